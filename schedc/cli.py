"""The `schedc` command line: argument parsing and wiring only.

`main(argv, stdout, stderr) -> int` so tests drive it with in-memory streams. Exit codes: 0 every
check holds, 1 a check fails, 2 bad input or usage (or standard output that cannot be written: a
full disk, not a closed pipe, which ends the command quietly with 0), 3 unknown (a solver gave up),
4 an internal error (a bug in schedc), 130 interrupted (Ctrl-C), 143 stopped by SIGTERM (handled as
Ctrl-C is).
"""
from __future__ import annotations

import argparse
import os
import sys
import threading
from typing import Sequence, TextIO

from .errors import EXIT_INPUT, EXIT_INTERRUPTED, EXIT_OK, EXIT_TERMINATED, OutputError, SchedcError
from .signals import exit_code, interrupts, terminated

EXIT_INTERNAL = 4


class _Parser(argparse.ArgumentParser):
    """argparse that reports usage errors as SchedcError instead of exiting."""

    def __init__(self, *args, stdout: TextIO | None = None, **kwargs):
        self._out = stdout
        super().__init__(*args, **kwargs)

    def error(self, message):
        raise SchedcError("usage", f"{message} (see `{self.prog} --help`)")

    def parse_args(self, args=None, namespace=None):
        """argparse's, but an argument no parser took points at the help of the command given
        (`schedc check --help`: where the options it takes are), not at schedc's."""
        parsed, extras = self.parse_known_args(args, namespace)
        if extras:
            command = getattr(parsed, "command", None)
            prog = f"{self.prog} {command}" if command else self.prog
            raise SchedcError("usage", f"unrecognized arguments: {' '.join(extras)} (see `{prog} --help`)")
        return parsed

    def _check_value(self, action, value):
        """argparse's check of a choice, with a suggestion for a near miss (`chek`: did you mean 'check'?)."""
        try:
            super()._check_value(action, value)
        except argparse.ArgumentError as e:
            from .expr import did_you_mean
            raise argparse.ArgumentError(action, e.message + did_you_mean(str(value), action.choices)) from None

    def exit(self, status=0, message=None):
        if message:
            self._print_message(message)
        raise _Exit(status)

    def _print_message(self, message, file=None):
        if message:
            (self._out or sys.stdout).write(message)


class _Exit(Exception):
    def __init__(self, status):
        self.status = status


def _parser(stdout: TextIO, argv: Sequence[str] = ()) -> _Parser:
    """The parser: every command's name and help (schedc/commands/__init__.py's `COMMANDS`), and
    the options of the one `argv` names, whose module is imported for them (the others' are not)."""
    from .commands import COMMANDS
    p = _Parser(prog="schedc", stdout=stdout,
                description="Compile and verify pipeline-parallel training schedules.")
    p.add_argument("--version", action="version", version=f"schedc {_version()}")
    sub = p.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    named = next((a for a in argv if not a.startswith("-")), None)  # (schedc's own options take no value)
    for command in COMMANDS:
        q = sub.add_parser(command.name, help=command.help, stdout=stdout)
        if command.name == named:
            command.load().add_arguments(q)
    return p


def _version() -> str:
    from . import __version__
    return __version__


def main(argv: list[str] | None = None, stdout: TextIO | None = None, stderr: TextIO | None = None) -> int:
    """Run one command; its exit code. SIGTERM is handled as Ctrl-C for the duration (main thread)."""
    stdout = stdout or sys.stdout
    stderr = stderr or sys.stderr
    with interrupts():
        return _main(argv, stdout, stderr)


# An interrupt's exception, kept: the frames it passed through hold the Z3 solver and terms of the
# query it stopped, and freeing those after a stopped query aborted the process ("double free or
# corruption", 4 of 12 Ctrl-Cs during `prove`) once the command had answered. Kept, they are freed
# by no one: `entry` leaves by os._exit.
_KEPT: list[BaseException] = []


def _main(argv: list[str] | None, stdout: TextIO, stderr: TextIO) -> int:
    """`_command`, with standard output guarded: a write to it that fails (a full disk, an I/O
    error; not a closed pipe) is `error[io]`, exit 2, in one line on standard error (nothing more
    is written to standard output, and what is still buffered for it is dropped). Both streams
    show a control character of what is written escaped (`outputs.TextStream`): a schedule's or a
    file's name cannot rewrite a line on the terminal."""
    from .outputs import GuardedStdout, StdoutLost, TextStream
    guarded = GuardedStdout(stdout)
    try:
        status = _command(argv, TextStream(guarded), TextStream(stderr))  # type: ignore[arg-type]  # (a TextIO in all it is used for)
        guarded.flush()  # what is still buffered fails here, not at exit
        return status
    except StdoutLost as e:
        guarded.discard()
        stderr.write(SchedcError("io", f"cannot write: {e}", where="standard output").render() + "\n")
        return EXIT_INPUT
    except BrokenPipeError:
        return EXIT_OK


# options that name a file to write: an empty one names none (`-o ""` wrote to standard output)
_OUTPUT_OPTIONS = ("output", "trace", "profile", "trace_dir", "viz")


# `-` as an output: standard output where the command writes one file and prints nothing else
# there (export and import, as without -o; trace merge); refused, with why, where the option names
# a folder or a file beside the report the command prints on standard output. (Other options named
# above are inputs where these commands do not write them: `sim --profile` is read.)
_TO_STDOUT = {("export", "output"), ("import", "output"), ("trace", "output")}
_FOLDERS = {("compile", "output"), ("run", "output")}
_BESIDE_THE_REPORT = {("check", "viz"), ("viz", "output"), ("sim", "trace"), ("run", "trace"), ("run", "profile"),
                      ("synth", "output")}


def _no_empty_paths(args) -> None:
    """An empty output path is a usage error; `-` is standard output where a command writes its one
    output there (`export -o -` is `export` without -o), and a usage error where it writes a folder
    of files or a file beside its own report."""
    for name in _OUTPUT_OPTIONS:
        value = getattr(args, name, None)
        option = "-o/--output" if name == "output" else "--" + name.replace("_", "-")
        if value == "":
            raise SchedcError("usage", "the path is empty: name a file (or leave the option out)", where=option)
        if value != "-":
            continue
        key = (args.command, name)
        if key in _TO_STDOUT and args.command != "trace":
            setattr(args, name, None)  # (their default: standard output)
        elif key in _FOLDERS:
            raise SchedcError("usage", f"`-` would be standard output, but this names the folder schedc "
                              f"{args.command} writes its files into: name a folder", where=option)
        elif key in _BESIDE_THE_REPORT:
            raise SchedcError("usage", f"`-` would be standard output, which holds schedc {args.command}'s own report: "
                              "name a file", where=option)


# options that name a file a command reads (`--profile` is written by `run`, read by the others)
_INPUT_OPTIONS = ("input", "inputs", "traces", "dumps", "schedule", "setup", "costs", "profile", "certificate")


def _not_over_inputs(args) -> None:
    """No output option names one of the command's input files (`sim --costs p.json --trace p.json`
    replaced a measured profile): a usage-time `error[io]` naming the output, before any work
    (outputs.not_over_inputs; compile checks the files it writes into its folder itself)."""
    from .outputs import not_over_inputs
    outputs = [(value, "output" if name == "output" else "--" + name.replace("_", "-") + " output")
               for name in _OUTPUT_OPTIONS if isinstance(value := getattr(args, name, None), str)
               and not (name == "profile" and args.command != "run")
               and not (name == "output" and args.command in ("compile", "run"))]  # (folders)
    if not outputs:
        return
    inputs: list[str] = []
    for name in _INPUT_OPTIONS:
        if name == "profile" and args.command == "run":
            continue
        value = getattr(args, name, None)
        inputs += [value] if isinstance(value, str) else [v for v in value or () if isinstance(v, str)] \
            if isinstance(value, list) else []
    not_over_inputs(outputs, inputs, "schedc trace merge" if args.command == "trace" else f"schedc {args.command}")


def _named(error: SchedcError, args) -> str | None:
    """Of a command that reads several inputs (`trace merge TRACE...`), the one an error is about:
    where its first finding is located, if that is one of them."""
    inputs = getattr(args, "traces", None) or ()
    first = error.diagnostics[0] if error.diagnostics else None
    where = None if first is None else (first.span.file if first.span is not None else first.where)
    return where if where in inputs else None


def _command(argv: list[str] | None, stdout: TextIO, stderr: TextIO) -> int:  # noqa: C901
    from .outputs import StdoutLost
    args = None
    try:
        argv = list(argv if argv is not None else sys.argv[1:])
        args = _parser(stdout, argv).parse_args(argv)
        if args.command is None:
            _parser(stdout).print_help()
            return EXIT_INPUT
        _no_empty_paths(args)
        _not_over_inputs(args)
        from .commands import COMMANDS
        return next(c for c in COMMANDS if c.name == args.command).load().run(args, stdout, stderr)
    except _Exit as e:
        return e.status if isinstance(e.status, int) else EXIT_INPUT
    except SchedcError as e:
        stderr.write(e.render() + "\n")
        if getattr(args, "json", False):  # --json: the error as JSON on stdout too, `file` what it is about
            from .commands.common import input_error_json
            file = e.output if isinstance(e, OutputError) else getattr(args, "input", None) or _named(e, args)
            stdout.write(input_error_json(e, file) + "\n")
        return EXIT_INPUT
    except KeyboardInterrupt as e:  # Ctrl-C, or SIGTERM (schedc/signals.py): every `finally` has run
        _KEPT.append(e)  # its frames hold the stopped query's Z3 objects: see _KEPT
        stderr.write("schedc: terminated (SIGTERM)\n" if terminated() else "schedc: interrupted\n")
        return exit_code()
    except BrokenPipeError:
        return EXIT_OK
    except StdoutLost:
        raise  # (not a bug: _main reports it)
    except Exception as e:  # a bug in schedc: say so briefly, no traceback unless asked
        if os.environ.get("SCHEDC_DEBUG"):
            raise
        stderr.write(f"schedc: internal error: {type(e).__name__}: {e}\n"
                     "  this is a bug in schedc; rerun with SCHEDC_DEBUG=1 for a traceback and report it\n")
        return EXIT_INTERNAL


def entry() -> None:
    status = main(sys.argv[1:], sys.stdout, sys.stderr)
    solving = any(t.name == "schedc-solver" and t.is_alive() for t in threading.enumerate())
    if solving or status in (EXIT_INTERRUPTED, EXIT_TERMINATED):
        # A solver left to end by its own time limit (HiGHS, after Ctrl-C) would still be running while
        # the interpreter tears down the modules it uses, and a Z3 query stopped by Ctrl-C or SIGTERM
        # leaves native state whose destructors can abort the process ("double free or corruption",
        # 2 of 12 SIGTERMs during `prove`) after the command has answered. Every `finally` has run and
        # the outputs are written or removed: leave without that tear-down.
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(status)
    if getattr(sys.modules.get("__main__"), "entry", None) is entry:  # the program: `schedc`, `python -m schedc`
        _leave(status)
    sys.exit(status)  # (run inside another program, e.g. by runpy: it may go on after SystemExit)


def _leave(status: int) -> None:
    """Exit with `status` as `sys.exit` does, less the interpreter's teardown of every module and
    object, which no one sees and which costs a short command a tenth of its time (15 ms of
    `schedc check NAME`): what a normal exit does that can be seen is done first (other threads
    finished, the atexit functions, the standard streams flushed). A thread still running, or a
    stream that cannot be flushed (a closed pipe), leaves by the normal exit instead, which says so
    as it always has."""
    import atexit
    if any(t.is_alive() and not t.daemon for t in threading.enumerate() if t is not threading.main_thread()):
        sys.exit(status)  # (the interpreter waits for them)
    atexit._run_exitfuncs()
    try:
        for stream in (sys.stdout, sys.stderr):
            if stream is not None:
                stream.flush()
    except (OSError, ValueError):
        sys.exit(status)
    os._exit(status)
