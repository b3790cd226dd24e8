"""How outputs are written (schedc/outputs.py), through the CLI as a user runs it: a write that fails
part-way leaves nothing behind, files get the usual permissions, a symbolic link is written through,
a FIFO or device is written directly, and JSON is strict (no Infinity or NaN)."""
from __future__ import annotations

import errno
import json
import os
import stat

import pytest

from schedc.outputs import dumps_json, native_stdout_to_stderr, write_file

SMALL = ("--param", "P=2", "--param", "M=2")


FIRST = "0UNSHARD,0F0"  # what the exported CSV of 1f1b starts with (torch's lowering: UNSHARD first)


def export(run_cli, out):
    """`schedc export 1f1b --to torch-csv -o OUT` at a small setting."""
    return run_cli("export", "1f1b", *SMALL, "--to", "torch-csv", "-o", str(out))


class _FullDisk:
    """A file on a disk that fills up: the first write puts `room` bytes down, then fails (ENOSPC),
    or raises `error` instead."""

    def __init__(self, fh, room=100, error=None):
        self.fh, self.room, self.error = fh, room, error

    def write(self, data):
        self.fh.write(data[:self.room])
        self.fh.flush()
        raise self.error or OSError(errno.ENOSPC, "No space left on device")

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.fh.close()

    def __getattr__(self, name):
        return getattr(self.fh, name)


def _fill_disk(monkeypatch, **how):
    """Every file schedc opens for writing from a descriptor (its temporary files) hits a full disk."""
    real = os.fdopen
    monkeypatch.setattr(os, "fdopen", lambda fd, *a, **k: _FullDisk(real(fd, *a, **k), **how))


@pytest.fixture
def umask():
    """Set the umask for one test (the old one comes back after)."""
    old = os.umask(0o022)
    yield os.umask
    os.umask(old)


# ---- a write that fails part-way ----
def test_a_write_that_fails_part_way_leaves_no_temporary_file(run_cli, tmp_path, monkeypatch):
    _fill_disk(monkeypatch)
    out = tmp_path / "out"
    code, _, err = run_cli("compile", "1f1b", *SMALL, "-o", str(out))
    assert code == 2 and "error[io]" in err and "No space left on device" in err
    assert list(out.iterdir()) == []  # neither the outputs nor a truncated hidden .NAME.tmp


def test_a_failed_replacement_keeps_the_old_file_whole(run_cli, tmp_path, monkeypatch):
    target = tmp_path / "one.csv"
    target.write_text("the old contents\n")
    _fill_disk(monkeypatch)
    code, _, err = export(run_cli, target)
    assert code == 2 and "No space left on device" in err
    assert target.read_text() == "the old contents\n" and os.listdir(tmp_path) == ["one.csv"]


def test_an_interrupt_part_way_leaves_no_temporary_file(tmp_path, monkeypatch):
    _fill_disk(monkeypatch, error=KeyboardInterrupt())
    with pytest.raises(KeyboardInterrupt):
        write_file(tmp_path / "x.json", "{}" * 1000)
    assert os.listdir(tmp_path) == []


# ---- permissions ----
@pytest.mark.parametrize("mask", [0o022, 0o027, 0o077])
def test_a_new_output_gets_0666_less_the_umask(mask, run_cli, tmp_path, umask):
    umask(mask)
    code, _, err = run_cli("compile", "1f1b", *SMALL, "-o", str(tmp_path / "out"))
    assert code == 0, err
    for path in (tmp_path / "out").iterdir():
        assert stat.S_IMODE(path.stat().st_mode) == 0o666 & ~mask, path


def test_a_replaced_output_keeps_its_mode(run_cli, tmp_path, umask):
    umask(0o022)
    target = tmp_path / "one.csv"
    target.write_text("old\n")
    target.chmod(0o640)
    assert export(run_cli, target)[0] == 0
    assert stat.S_IMODE(target.stat().st_mode) == 0o640 and target.read_text().startswith(FIRST)


# ---- symbolic links, FIFOs, devices ----
def test_a_symbolic_link_is_written_through_atomically(run_cli, tmp_path):
    real = tmp_path / "real.csv"
    real.write_text("old\n")
    real.chmod(0o640)
    link = tmp_path / "link.csv"
    link.symlink_to("real.csv")
    code, _, err = export(run_cli, link)
    assert code == 0, err
    assert link.is_symlink() and os.readlink(link) == "real.csv"  # the link stays a link
    assert real.read_text().startswith(FIRST) and stat.S_IMODE(real.stat().st_mode) == 0o640
    assert sorted(os.listdir(tmp_path)) == ["link.csv", "real.csv"]


def test_a_symbolic_link_to_nothing_is_refused(run_cli, tmp_path):
    link = tmp_path / "link.csv"
    link.symlink_to("nowhere.csv")
    code, _, err = export(run_cli, link)
    assert code == 2 and "symbolic link to a missing file" in err
    assert os.listdir(tmp_path) == ["link.csv"] and link.is_symlink()


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs here")
def test_a_fifo_is_written_directly_and_stays_a_fifo(run_cli, tmp_path):
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    reader = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)  # a reader is there, so the write need not wait
    try:
        code, _, err = export(run_cli, fifo)
        got = os.read(reader, 1 << 16).decode()
    finally:
        os.close(reader)
    assert code == 0, err
    assert got.startswith(FIRST) and stat.S_ISFIFO(os.stat(fifo).st_mode)
    assert os.listdir(tmp_path) == ["pipe"]


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs here")
def test_a_fifo_nobody_reads_is_an_error_not_a_wait(run_cli, tmp_path):
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    code, _, err = export(run_cli, fifo)
    assert code == 2 and "no process is reading the FIFO" in err
    assert stat.S_ISFIFO(os.stat(fifo).st_mode)


def test_an_open_descriptor_is_appended_to_as_the_shell_opened_it(run_cli, tmp_path):
    """`-o /dev/stdout >> log`: the file behind the descriptor is written, after what it holds,
    not replaced by a new file (which would lose the log)."""
    log = tmp_path / "log.txt"
    log.write_text("earlier line\n")
    inode = log.stat().st_ino
    with open(log, "a") as fh:
        if not os.path.exists(f"/dev/fd/{fh.fileno()}"):
            pytest.skip("no /dev/fd here")
        code, _, err = export(run_cli, f"/dev/fd/{fh.fileno()}")
    assert code == 0, err
    text = log.read_text()
    assert text.startswith("earlier line\n" + FIRST) and log.stat().st_ino == inode
    assert os.listdir(tmp_path) == ["log.txt"]


def test_a_character_device_is_written_directly(run_cli, tmp_path):
    null = tmp_path / "null"  # a null device of our own: were it replaced, no system file would be
    try:
        os.mknod(null, 0o666 | stat.S_IFCHR, os.makedev(1, 3))
    except (AttributeError, OSError):
        pytest.skip("cannot make a device node here (needs root or CAP_MKNOD)")
    code, _, err = export(run_cli, null)
    assert code == 0, err
    assert stat.S_ISCHR(os.stat(null).st_mode) and os.listdir(tmp_path) == ["null"]


def test_a_folder_is_refused(run_cli, tmp_path):
    (tmp_path / "dir").mkdir()
    code, _, err = export(run_cli, tmp_path / "dir")
    assert code == 2 and "is a folder" in err


# ---- strict JSON ----
def _strict(text: str):
    """Parse as JSON only: Python's `Infinity`/`NaN` extension is an error."""
    def refuse(constant):
        raise ValueError(f"not JSON: {constant}")
    return json.loads(text, parse_constant=refuse)


def test_json_has_no_infinity_or_nan():
    value = {"a": float("inf"), "b": [float("-inf"), (1.5, float("nan"))], "c": {"d": 2}, "e": "inf"}
    assert _strict(dumps_json(value)) == {"a": None, "b": [None, [1.5, None]], "c": {"d": 2}, "e": "inf"}
    assert dumps_json({"x": 1.0}, indent=1) == json.dumps({"x": 1.0}, indent=1)  # finite: as json.dumps


# ---- what native code prints ----
def test_native_output_goes_to_stderr_not_stdout(capfd):
    import ctypes
    print("before", flush=False)  # Python's own output keeps its place on stdout
    with native_stdout_to_stderr():
        os.write(1, b"raw line\n")
        ctypes.CDLL(None).printf(b"buffered C line\n")  # in C stdio's buffer until flushed
    print("after")
    out, err = capfd.readouterr()
    assert out == "before\nafter\n"
    assert "raw line" in err and "buffered C line" in err
