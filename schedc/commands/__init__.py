"""One module per `schedc` command: its handler `run(args, stdout, stderr) -> exit code`.

schedc/cli.py builds the argument parser and dispatches here; common.py holds what several
commands share (parameters, loading, checks, atomic writes, pictures).
"""
