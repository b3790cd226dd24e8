"""`python -m schedc`: the same command line as the `schedc` script (schedc/cli.py).

Only the CLI module is imported here, so startup stays as light as the script's.
"""
from .cli import entry

if __name__ == "__main__":
    entry()
