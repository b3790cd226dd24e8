"""How schedc writes what it outputs: files that appear whole or not at all, with the permissions a
new file usually gets, and JSON that is valid JSON. Every command's `-o`, `--trace`, `--viz` and
`--json` goes through here (docs/cli.md, "Output files").

A regular file (or a new one) is written to a temporary file in its folder and renamed over it: a
new file gets 0666 less the umask (applied by the kernel, as for a shell's `>`), a replaced one
keeps its mode and, where the user may, its owner and group (hard links to it keep the old file); a
file the user may not write is refused, as `cp` refuses it; a failure or an interrupt leaves
nothing behind. A symbolic link is written through: its target is replaced atomically, the link
stays (a link to nothing is refused). A FIFO, a character device or an open descriptor (`/dev/stdout`, a
shell's `>(...)`) is written directly, as a shell redirection would; a FIFO nobody reads is an
error, not a wait. Anything else (a folder, a block device, a socket) is refused. A command checks
its outputs' places before its work (`check_writable`), so a file in a folder's place or a folder it
may not write is an error naming the output before anything is computed; `write_replacing` also
removes a writer's earlier outputs that this run does not write (compile's). JSON never holds
`Infinity` or `NaN`: a number that is not finite is written `null`. What a native library prints
while it runs (HiGHS) goes to standard error, so standard output holds only what the command writes.
A data-parallel job's text shows one replica's ranks where every replica's are alike (`alike_replicas`).
Standard output itself is guarded (`GuardedStdout`): a write to it that fails is an `io` error.
"""
from __future__ import annotations

import errno
import json
import math
import os
import re
import stat
import sys
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from .errors import OutputError


def write_file(path: Path | str, data: str | bytes) -> Path:
    """Write one output (text is UTF-8) by the rules above; the path written (as given)."""
    path = Path(path)
    return write_files(path.parent, {path.name: data}, named=path)[0]


def write_files(folder: Path | str, files: dict[str, str | bytes], named: Path | None = None) -> list[Path]:
    """Write `files` ({name: text or bytes}) into `folder` (created if missing), all or none: each
    regular file goes to a temporary file first, and they are renamed into place only once all are
    written (a FIFO or device is written as it comes). Any failure, a full disk or an interrupt,
    removes every temporary file. The paths written, as given. A folder that cannot be made is an
    error naming `named` (the one output's path), else the folder."""
    folder = Path(folder)
    _make_folder(folder, folder if named is None else named)
    targets = [_target(folder / name) for name in files]  # refuse what cannot be written before writing any
    payloads = [data.encode("utf-8") if isinstance(data, str) else data for data in files.values()]
    temps: list[tuple[str, Path]] = []
    current = folder  # the output being written, for the message
    try:
        for target, data in zip(targets, payloads):
            current = target.path
            if target.direct:
                _write_direct(target.path, data)
            else:
                _stage(target, data, temps)
        while temps:
            current = temps[0][1]
            os.replace(*temps[0])
            del temps[0]
    except OSError as exc:
        raise _io_error(exc, current) from None
    finally:
        for tmp, _ in temps:
            Path(tmp).unlink(missing_ok=True)
    return [folder / name for name in files]


def probe_writable(path: Path | str) -> None:
    """Refuse now, before the long work whose output `path` is (`run --trace`, `--profile`), what
    `write_file(path)` would refuse or fail at later, where trying can tell: what `check_output`
    refuses (its folder, or the nearest one there above a missing one, not a folder or not one this
    process may write in; the file a folder or read-only), and then the temporary file the write
    would make beside it, created and removed (what only trying tells: a folder the kernel will not
    let this process write). A FIFO or a device is only asked whether it may be opened (opening a
    FIFO would end its reader's input; `/dev/full` opens and fails only as it is written, so that
    failure stays for the write)."""
    path = Path(path)
    check_output(path)
    temps: list[tuple[str, Path]] = []
    try:
        if not path.parent.is_dir():
            return  # (the write makes the missing folders, in the one `check_output` found writable)
        target = _target(path)
        if target.direct:
            if not os.access(target.path, os.W_OK):
                raise OSError(errno.EACCES, os.strerror(errno.EACCES))
            return
        os.close(_create_temp(target, temps)[0])
    except OSError as exc:
        raise _io_error(exc, path) from None
    finally:
        for tmp, _ in temps:
            Path(tmp).unlink(missing_ok=True)


def not_over_inputs(outputs, inputs, command: str, hint: str = "name another file") -> None:
    """Refuse, before any work, an output that is one of the command's own inputs: an OutputError
    naming the output if a path of `outputs` ((path, what it is) pairs; what is there now, links
    followed) is the same file, by device and inode, as one of `inputs` that is a regular file (`-`,
    a built-in's name, a FIFO are not: nothing there to lose). A measured profile, a rank's event
    file or a schedule's source would be replaced by what was made from it, and some cannot be made
    again without the run. The rule of every command that writes outputs (cli.py applies it to each
    option, compile to the files it writes into its folder)."""
    files = []
    for name in inputs:
        if name is None or name == "-":
            continue
        try:
            st = os.stat(name)
        except (OSError, ValueError):
            continue
        if stat.S_ISREG(st.st_mode):
            files.append((name, (st.st_dev, st.st_ino)))
    if not files:
        return
    for path, what in outputs:
        try:
            st = os.stat(path)
        except (OSError, ValueError):
            continue  # (a new file: nothing of an input's there)
        for name, key in files:
            if (st.st_dev, st.st_ino) == key:
                raise OutputError(f"{command} would write its {what} over its own input, {name}: {hint}", str(path))


@dataclass(frozen=True)
class Replaced:
    """What `write_replacing` did: the paths `written`, the earlier outputs `removed`, and those
    `kept` (each with why it was not removed)."""

    written: list[Path]
    removed: list[Path]
    kept: list[tuple[Path, str]]


def write_replacing(folder: Path | str, files: dict[str, str | bytes], others=()) -> Replaced:
    """`write_files(folder, files)`, then remove each of `others` (names of outputs the same writer
    makes on other runs, not on this one) found in `folder`, so no earlier run's output is left
    beside this run's as if it were one of them. Only a regular file this process may write is
    removed (each at once, by unlink), and only once every new file is in place: a symbolic link,
    a FIFO, a device, a folder or a read-only file is kept, with why (judged before anything is
    written). An output that cannot be written removes nothing."""
    folder = Path(folder)
    stale = [folder / name for name in others if name not in files and os.path.lexists(folder / name)]
    kept = [(path, why) for path in stale if (why := _why_kept(path)) is not None]
    written = write_files(folder, files)
    removed = []
    for path in stale:
        if any(path == k for k, _ in kept):
            continue
        try:
            path.unlink()
            removed.append(path)
        except FileNotFoundError:
            continue  # gone meanwhile: nothing stale left
        except OSError as exc:
            kept.append((path, f"cannot remove it: {exc.strerror or exc}"))
    return Replaced(written, removed, kept)


def _why_kept(path: Path) -> str | None:
    """Why the earlier output `path` is not removed (None: it may be): only a regular file, not a
    link, that this process may write is (a read-only one is refused, as it is not replaced)."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return None  # gone already
    if stat.S_ISLNK(st.st_mode):
        return "it is a symbolic link"
    if not stat.S_ISREG(st.st_mode):
        return "it is not a regular file"
    if not _may_write(path):
        return f"it is read-only (mode {stat.S_IMODE(st.st_mode):04o})"
    return None


@dataclass(frozen=True)
class _Target:
    """Where an output goes: `path` (a symbolic link resolved), written directly or replaced
    atomically; what it replaces (None: a new file, which gets 0666 less the umask)."""

    path: Path
    direct: bool = False
    old: os.stat_result | None = None


def _target(path: Path) -> _Target:
    """How `path` is written, by what is there now (links followed); a SchedcError if it cannot be."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        if os.path.islink(path):
            raise OutputError("is a symbolic link to a missing file; not writing through it", str(path)) from None
        return _Target(path)
    except OSError as exc:
        raise _io_error(exc, path) from None
    if stat.S_ISFIFO(st.st_mode) or stat.S_ISCHR(st.st_mode) or (stat.S_ISREG(st.st_mode) and
                                                                  _names_a_descriptor(path)):
        return _Target(path, direct=True)  # `-o /dev/stdout >> log` appends, as the shell would
    if stat.S_ISREG(st.st_mode):
        real = Path(os.path.realpath(path))
        _refuse_read_only(real, st)
        return _Target(real, old=st)
    what = "a folder" if stat.S_ISDIR(st.st_mode) else "a block device" if stat.S_ISBLK(st.st_mode) else \
        "a socket" if stat.S_ISSOCK(st.st_mode) else "not a regular file"
    raise OutputError(f"is {what}; schedc writes regular files, FIFOs and character devices", str(path))


_DESCRIPTOR = re.compile(r"/(?:dev|proc/[^/]+)/fd/\d+")


def _names_a_descriptor(path: Path) -> bool:
    """Whether `path` reaches an open file descriptor (`/dev/stdout`, `/dev/fd/N`, `/proc/self/fd/N`)
    through its symbolic links: what is behind it was opened by the shell, to be written, not
    replaced."""
    name = os.path.abspath(path)
    for _ in range(40):  # the kernel's own limit on a chain of links
        if _DESCRIPTOR.fullmatch(name):
            return True
        if not os.path.islink(name):
            return False
        name = os.path.normpath(os.path.join(os.path.dirname(name), os.readlink(name)))
    return False


def _refuse_read_only(path: Path, st: os.stat_result) -> None:
    """Refuse to replace a file this process may not write, as `cp` and a shell's `>` refuse it
    (renaming over it needs only the folder's permission). The kernel's answer for this process, so
    root may replace it, as root's `cp` does."""
    if not _may_write(path):
        raise OutputError(f"is read-only (mode {stat.S_IMODE(st.st_mode):04o}); not replacing it: make it "
                          "writable (chmod u+w) or remove it first", str(path))


def _may_write(path: Path) -> bool:
    """Whether this process may open the existing file `path` for writing (effective ids where the
    platform can check them)."""
    effective = os.access in os.supports_effective_ids
    return os.access(path, os.W_OK, effective_ids=effective)


def _make_folder(folder: Path, output: Path) -> None:
    """Make `folder` (and those above it) for `output`; what is in the way, as `check_writable`
    says it, naming `output`."""
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        if isinstance(exc, (FileExistsError, NotADirectoryError)):
            _check_folder(folder, output)  # names the file in the way
        raise OutputError(f"cannot create the output folder: {exc.strerror}", str(output)) from None


def check_writable(folder: Path | str, names=(), output: Path | str | None = None) -> None:
    """Before a command's work: an OutputError if `folder` could not hold new files (a file is in
    its place or on its path; it, or the folder it would be made in, is one this process may not
    write) or if one of `names` in it could not be written by the rules above (a read-only file, a
    folder of that name, ...). The error names the output (`output`, else the folder or the file).
    Nothing is created; the writing checks again."""
    folder = Path(folder)
    try:
        _check_writable(folder, names, Path(output) if output is not None else folder)
    except OSError as exc:  # (a name the system refuses to look up: too long, a loop of links)
        raise OutputError(f"cannot write: {exc.strerror}", str(output if output is not None else folder)) from None


def _check_writable(folder: Path, names, output: Path) -> None:
    _check_folder(folder, output)
    if not folder.is_dir():
        return  # made when written, in a folder checked above
    if not names:
        _may_create_in(folder, folder)
    for name in names:
        target = _target(folder / name)
        if not target.direct:  # (a FIFO or a descriptor is written in place: its folder is not written)
            _may_create_in(target.path.parent, target.path)


def check_output(path: Path | str) -> None:
    """`check_writable` for one output file: its folder, and the file if it is there."""
    path = Path(path)
    check_writable(path.parent, [path.name], output=path)


def _check_folder(folder: Path, output: Path) -> None:
    """An OutputError naming `output` if `folder` is not a folder, or if it is missing and the
    nearest folder above it that is there is not one this process may create folders in."""
    if folder.is_dir():
        return
    if os.path.lexists(folder):
        raise OutputError("is a file, not a folder: -o names the folder the outputs go in" if output == folder
                          else f"cannot write: {folder} is a file, not a folder", str(output))
    above = folder.parent
    while not os.path.lexists(above) and above != above.parent:
        above = above.parent
    if not above.is_dir():
        raise OutputError(f"cannot create the output folder: {above} is a file, not a folder", str(output))
    _may_create_in(above, output, "cannot create the output folder")


def _may_create_in(folder: Path, output: Path, what: str = "cannot write") -> None:
    """An OutputError naming `output` if this process may not create files in `folder` (the
    kernel's answer: its permissions, or a read-only file system)."""
    effective = os.access in os.supports_effective_ids
    if not os.access(folder, os.W_OK | os.X_OK, effective_ids=effective):
        where = "this folder" if folder == output else f"the folder {folder}"
        raise OutputError(f"{what}: {where} is not writable (its permissions, or a read-only file system)",
                          str(output))


def _stage(target: _Target, data: bytes, temps: list[tuple[str, Path]]) -> None:
    """Write `data` to a new temporary file beside `target.path`, with the mode (owner, group) of
    what it replaces, flushed to disk; listed in `temps` before it exists, so a failure or an
    interrupt at any point can remove it."""
    fd, tmp = _create_temp(target, temps)
    with os.fdopen(fd, "wb") as fh:
        if target.old is not None:
            _keep_owner(fd, target.old)
            mode = stat.S_IMODE(target.old.st_mode)  # set after chown, which clears set-id bits
            if hasattr(os, "fchmod"):
                os.fchmod(fd, mode)
            else:
                os.chmod(tmp, mode)
        fh.write(data)
        fh.flush()
        os.fsync(fd)


def _create_temp(target: _Target, temps: list[tuple[str, Path]]) -> tuple[int, str]:
    """A new hidden `.NAME.XXXXXXXX.tmp` beside the target, open for writing: mode 0666 less the
    umask for a new output (the kernel applies the umask, so it is never read or changed here), 0600
    until its mode is set for a replacement."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0)
    for _ in range(100):
        tmp = str(target.path.parent / f".{target.path.name}.{os.urandom(4).hex()}.tmp")
        temps.append((tmp, target.path))
        try:
            return os.open(tmp, flags, 0o666 if target.old is None else 0o600), tmp
        except FileExistsError:
            temps.pop()  # someone else's file: not ours to remove
    raise OSError(errno.EEXIST, "no free name for a temporary file")


def _keep_owner(fd: int, old: os.stat_result) -> None:
    """Give the replacement the old file's owner and group where this process may (root may; a user
    may keep a group they belong to); else it is the user's, as a file they create."""
    if not hasattr(os, "fchown"):
        return
    for uid, gid in ((old.st_uid, old.st_gid), (-1, old.st_gid)):
        try:
            os.fchown(fd, uid, gid)
            return
        except OSError:  # not allowed (or a file system without owners): try less
            continue


def _write_direct(path: Path, data: bytes) -> None:
    """Write to a FIFO, a device or a descriptor's file in place, appending (a file the shell
    opened with `>` is empty, with `>>` it is a log). Opened without waiting, so a FIFO that no
    process reads fails (ENXIO) instead of hanging; then written with ordinary blocking writes."""
    nonblock = getattr(os, "O_NONBLOCK", 0)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | nonblock | getattr(os, "O_CLOEXEC", 0))
    except OSError as exc:
        if exc.errno == errno.ENXIO and stat.S_ISFIFO(os.stat(path).st_mode):
            raise OutputError("cannot write: no process is reading the FIFO", str(path)) from None
        raise
    with os.fdopen(fd, "wb") as fh:
        if nonblock:
            os.set_blocking(fd, True)
        fh.write(data)


def _io_error(exc: OSError, where) -> OutputError:
    return OutputError(f"cannot write: {exc.strerror or exc}", str(where))


class StdoutLost(Exception):
    """A write to standard output failed (a full disk, an I/O error), as `OSError` `error` says; a
    pipe closed by its reader is not this (BrokenPipeError passes as it is)."""

    def __init__(self, error: OSError):
        self.error = error
        super().__init__(error.strerror or str(error))


# what a terminal would act on (schedc/span.py's `visible`), but a line's own end and a tab
_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


class TextStream:
    """A stream that schedc's lines are written to (the CLI's standard output and standard error):
    every control character in what is written (an escape sequence, a carriage return, a bidi
    override), whatever it came from (a schedule's name, a file's name, a rank's output), is shown
    escaped as `\\x1b` (span.py's `visible`, as diagnostics show it), so a name cannot hide or
    rewrite a line (a verdict) on the terminal. A line's end and a tab pass as they are. JSON passes
    unchanged (`dumps_json` escapes every control character itself). What is data, not lines
    (`export`'s text on standard output), is written by `write_data`, exact."""

    def __init__(self, stream):
        self.stream = stream

    def write(self, text: str) -> int:
        if _CONTROL.search(text):
            from .span import visible
            text = visible(text, keep="\t\n")
        return self.stream.write(text)

    def writelines(self, lines) -> None:
        for line in lines:
            self.write(line)

    def write_data(self, text: str) -> int:
        """Write `text` exactly as it is (an exported file's content)."""
        return self.stream.write(text)

    def __getattr__(self, name):
        return getattr(self.stream, name)


def write_data(stream, text: str) -> None:
    """Write `text` to `stream` exactly (a `TextStream`'s `write_data`; any other stream's write)."""
    getattr(stream, "write_data", stream.write)(text)


class GuardedStdout:
    """Standard output as the CLI hands it to a command: a write or flush that fails (ENOSPC, EIO,
    ...) raises `StdoutLost`, so the CLI tells it from a bug's OSError and reports `error[io]`
    (exit 2). Everything else is the wrapped stream's."""

    def __init__(self, stream):
        self.stream = stream

    def write(self, text: str) -> int:
        try:
            return self.stream.write(text)
        except BrokenPipeError:
            raise
        except OSError as exc:
            raise StdoutLost(exc) from None

    def writelines(self, lines) -> None:
        for line in lines:
            self.write(line)

    def flush(self) -> None:
        try:
            self.stream.flush()
        except BrokenPipeError:
            raise
        except OSError as exc:
            raise StdoutLost(exc) from None

    def discard(self) -> None:
        """After a failed write to the process's own standard output: what is still buffered goes
        to /dev/null, so the flush at exit does not fail (and say so) a second time."""
        if not any(self.stream is own for own in (sys.stdout, sys.__stdout__) if own is not None):
            return
        try:
            fd = self.stream.fileno()
            null = os.open(os.devnull, os.O_WRONLY)
        except (OSError, ValueError):
            return
        os.dup2(null, fd)
        os.close(null)

    def __getattr__(self, name):
        return getattr(self.stream, name)


def rounded(x: float) -> int | float:
    """A time or size as outputs show it: to 12 significant digits (sums of a stage's 1/3 of a
    unit are not exact in binary), an integer when it is one; not finite stays as it is."""
    x = float(x)
    if not math.isfinite(x):
        return x
    x = float(f"{x:.12g}")
    return int(x) if x.is_integer() else x


def alike_replicas(rows, replicas: int) -> int:
    """The ranks of one replica when every replica of a job's per-rank `rows` (rank d x P + p is
    replica d's rank p) has replica 0's, else 0: a text report then shows replica 0's ranks and
    `ALIKE` (a 100,000-rank job in a few lines; JSON keeps every rank)."""
    if replicas <= 1 or len(rows) % replicas:
        return 0
    n = len(rows) // replicas
    first = list(rows[:n])
    return n if all(list(rows[d * n:(d + 1) * n]) == first for d in range(1, replicas)) else 0


ALIKE = "each of the {D:,} replicas alike: job rank d x {P} + p as rank p above"  # (after replica 0's rows)


def per_rank_list(values, replicas: int, shown) -> str:
    """`[...]` of a list per job rank, `shown(values)` inside the brackets; where the replicas are
    alike (`alike_replicas`), replica 0's and how many replicas it stands for."""
    P = alike_replicas(values, replicas)
    return f"[{shown(values[:P])}] in each of the {replicas:,} replicas" if P else f"[{shown(values)}]"


def dumps_json(value, **options) -> str:
    """`json.dumps(value, **options)`, strict: a float that is not finite (inf, -inf, nan) becomes
    null, so the text is JSON every parser reads (Python's default writes `Infinity`/`NaN`)."""
    try:
        text = json.dumps(value, allow_nan=False, **options)
    except ValueError:  # rare: walk the value only when it holds such a number
        text = json.dumps(finite_only(value), allow_nan=False, **options)
    # DEL, which json leaves as it is, escaped as the other control characters are (only a string
    # can hold it): JSON printed or written never holds a character a terminal acts on
    return text.replace("\x7f", "\\u007f") if "\x7f" in text else text


def finite_only(value):
    """`value` with every non-finite float replaced by None (dicts, lists and tuples walked; a tuple
    stays a tuple)."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: finite_only(v) for k, v in value.items()}
    if isinstance(value, list):
        return [finite_only(v) for v in value]
    if isinstance(value, tuple):
        return tuple(finite_only(v) for v in value)
    return value


@contextmanager
def native_stdout_to_stderr():
    """For the duration, file descriptor 1 (where C code such as HiGHS prints, whatever its options
    say) is standard error: standard output keeps only what schedc writes, one JSON object with
    `--json`. Python's own `sys.stdout` is untouched (flushed first, so its order is kept)."""
    if sys.stdout is not None:
        sys.stdout.flush()
    saved = _point(1, 2)
    try:
        yield
    finally:
        if saved is not None:
            _flush_native()  # C stdio buffers what it printed: out to stderr before fd 1 is back
            os.dup2(saved, 1)
            os.close(saved)


def _point(fd: int, to: int) -> int | None:
    """Make `fd` a copy of `to`; a copy of the old `fd` to restore, or None when there is none."""
    try:
        saved = os.dup(fd)
    except OSError:  # fd 1 closed: nothing to protect
        return None
    try:
        os.dup2(to, fd)
    except OSError:
        os.close(saved)
        return None
    return saved


def _flush_native() -> None:
    """fflush(NULL): empty every C stdio buffer (where the platform's C library can be loaded)."""
    try:
        import ctypes
        ctypes.CDLL(None).fflush(None)
    except (OSError, AttributeError, TypeError):
        pass
