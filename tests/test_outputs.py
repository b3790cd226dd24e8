"""How outputs are written (schedc/outputs.py), through the CLI as a user runs it: a write that fails
part-way leaves nothing behind, files get the usual permissions, a symbolic link is written through,
a FIFO or device is written directly, and JSON is strict (no Infinity or NaN)."""
from __future__ import annotations

import errno
import json
import os
import shutil
import stat
import tempfile
from pathlib import Path

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


def test_the_umask_is_never_changed_to_be_read(run_cli, tmp_path, umask, monkeypatch):
    """Reading the umask by setting it and setting it back races with every other thread of a
    program that uses schedc as a library (a file one of them creates in between gets the wrong
    mode). A new output is created with 0666 and the kernel takes the umask off, as for `>`."""
    umask(0o027)

    def no_umask(mask):
        raise AssertionError("os.umask called")
    monkeypatch.setattr(os, "umask", no_umask)
    code, _, err = run_cli("compile", "1f1b", *SMALL, "-o", str(tmp_path / "out"))
    assert code == 0, err
    assert {stat.S_IMODE(p.stat().st_mode) for p in (tmp_path / "out").iterdir()} == {0o640}


# ---- replacing what is there ----
def _as_non_root_user(monkeypatch):
    """os.access answered as for a user without root's override: writable when the mode bits of
    the owner, the group or others (whichever class the user is in) allow it. The tests run as root
    here, and root may write any file, so `cp` and `>` as root would not refuse either; this is the
    check the kernel makes for everyone else."""
    def access(path, mode, *, effective_ids=False, **kw):
        st = os.stat(path)
        uid, gids = (os.geteuid(), os.getgroups() + [os.getegid()])
        bits = 0o200 if st.st_uid == uid else 0o020 if st.st_gid in gids else 0o002
        return not (mode & os.W_OK) or bool(st.st_mode & bits)
    monkeypatch.setattr(os, "access", access)


def test_a_read_only_file_is_refused_as_cp_refuses_it(run_cli, tmp_path, monkeypatch):
    """Renaming over a file needs only the folder's permission, so a 0444 output used to be replaced
    where `cp` and a shell's `>` say "Permission denied"."""
    _as_non_root_user(monkeypatch)
    target = tmp_path / "one.csv"
    target.write_text("the old contents\n")
    target.chmod(0o444)
    code, _, err = export(run_cli, target)
    assert code == 2 and "error[io]" in err and "is read-only (mode 0444); not replacing it" in err, err
    assert target.read_text() == "the old contents\n" and os.listdir(tmp_path) == ["one.csv"]
    target.chmod(0o644)  # writable again: replaced
    assert export(run_cli, target)[0] == 0 and target.read_text().startswith(FIRST)


def test_a_read_only_file_among_a_commands_outputs_stops_it_before_any_is_written(run_cli, tmp_path, monkeypatch):
    _as_non_root_user(monkeypatch)
    out = tmp_path / "out"
    assert run_cli("compile", "1f1b", *SMALL, "-o", str(out))[0] == 0
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    locked = sorted(out.iterdir())[-1]
    locked.chmod(0o444)
    code, _, err = run_cli("compile", "1f1b", "--param", "P=3", "--param", "M=3", "-o", str(out))
    assert code == 2 and "is read-only" in err and locked.name in err, err
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before  # nothing replaced, nothing left over


@pytest.mark.skipif(not hasattr(os, "seteuid") or os.geteuid() != 0, reason="needs root, to become another user")
def test_a_read_only_file_is_refused_for_an_ordinary_user_by_the_kernels_answer(run_cli, monkeypatch):
    """The same, without the stand-in: the test process becomes `nobody` (effective ids) for the
    command, in a folder anyone may write, as an ordinary user would run it."""
    folder = Path(tempfile.mkdtemp(prefix="schedc-ro-"))
    try:
        folder.chmod(0o777)
        target = folder / "one.csv"
        target.write_text("the old contents\n")
        target.chmod(0o444)
        assert export(run_cli, folder / "warm.csv")[0] == 0  # every module loaded while still root
        os.setegid(65534)
        os.seteuid(65534)
        try:
            with pytest.raises(PermissionError):  # what `cp` and `>` meet
                open(target, "w")
            code, _, err = export(run_cli, target)
        finally:
            os.seteuid(0)
            os.setegid(0)
        assert code == 2 and "is read-only" in err, err
        assert target.read_text() == "the old contents\n" and sorted(os.listdir(folder)) == ["one.csv", "warm.csv"]
    finally:
        shutil.rmtree(folder)


@pytest.mark.skipif(not hasattr(os, "chown") or os.geteuid() != 0, reason="only root may give a file away")
def test_a_replaced_output_keeps_its_owner_and_group(run_cli, tmp_path):
    target = tmp_path / "one.csv"
    target.write_text("old\n")
    os.chown(target, 65534, 65534)
    target.chmod(0o4750)  # a set-user-id bit too: chown clears it, so the mode is set after
    assert export(run_cli, target)[0] == 0
    st = target.stat()
    assert (st.st_uid, st.st_gid, stat.S_IMODE(st.st_mode)) == (65534, 65534, 0o4750)
    assert target.read_text().startswith(FIRST)


def test_an_owner_a_user_may_not_give_keeps_the_group_if_it_may(tmp_path, monkeypatch):
    """An ordinary user may not give a file to another user, but may keep a group they belong to;
    failing both, the replacement is theirs, as a file they create (the write goes on)."""
    calls = []

    def fchown(fd, uid, gid):
        calls.append((uid, gid))
        raise PermissionError(errno.EPERM, "Operation not permitted")
    monkeypatch.setattr(os, "fchown", fchown)
    target = tmp_path / "one.json"
    target.write_text("{}")
    st = target.stat()
    write_file(target, "[]")
    assert calls == [(st.st_uid, st.st_gid), (-1, st.st_gid)] and target.read_text() == "[]"


def test_a_hard_linked_output_is_replaced_not_written_through(run_cli, tmp_path):
    """As documented (docs/cli.md, "Output files"): the name given gets the new file, atomically;
    its other names keep the old contents (as `mv`, `sed -i` and rsync do; `cp` writes through)."""
    target, other = tmp_path / "one.csv", tmp_path / "other.csv"
    target.write_text("old\n")
    os.link(target, other)
    assert export(run_cli, target)[0] == 0
    assert target.read_text().startswith(FIRST) and other.read_text() == "old\n"
    assert target.stat().st_nlink == 1 and other.stat().st_nlink == 1


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


# ---- the outputs' places, checked before the work ----
@pytest.mark.parametrize("argv, output", [
    (["compile", "1f1b", "-o", "ro"], "ro"),
    (["compile", "1f1b", "-o", "ro/new"], "ro/new"),
    (["viz", "1f1b", "-o", "ro/x.svg"], "ro/x.svg"),
    (["check", "1f1b", "--viz", "ro/x.svg"], "ro/x.svg"),
], ids=["compile", "compile-new-folder", "viz", "check-viz"])
def test_a_folder_not_writable_is_refused_before_the_work(run_cli, tmp_path, monkeypatch, argv, output):
    _as_non_root_user(monkeypatch)
    (tmp_path / "ro").mkdir(mode=0o555)
    monkeypatch.chdir(tmp_path)
    called = []
    monkeypatch.setattr("schedc.commands.common.run_checks", lambda *a, **k: called.append(a))
    code, stdout, err = run_cli(*argv)
    assert code == 2 and stdout == "" and not called, err  # no summary, no "ok": nothing was checked
    assert err.startswith(f"{output}: error[io]: ") and "is not writable" in err, err
    code, stdout, _ = run_cli(*argv, "--json")
    assert code == 2 and json.loads(stdout)["file"] == output  # the output's path, not the input's
    assert os.listdir(tmp_path / "ro") == []


@pytest.mark.parametrize("where, said", [
    ("afile/out.json", "cannot write: {tmp}/afile is a file, not a folder"),
    ("afile/new/out.json", "cannot create the output folder: {tmp}/afile is a file, not a folder"),
    ("ro/out.json", "cannot write: the folder {tmp}/ro is not writable (its permissions, or a read-only file "
                    "system)"),
    ("ro/new/out.json", "cannot create the output folder: the folder {tmp}/ro is not writable (its permissions, "
                        "or a read-only file system)"),
])
def test_an_outputs_place_is_judged_by_one_rule_in_one_wording(run_cli, tmp_path, monkeypatch, where, said):
    """`run --trace/--profile` (probe_writable) walked up to the nearest folder there by a rule of
    its own and said "cannot write there (X is not a writable folder)" where compile and viz
    (check_writable) said which: a file in the way, or a folder not writable. One rule now, one
    wording, the same for every command."""
    from schedc.errors import OutputError
    from schedc.outputs import check_output, probe_writable
    _as_non_root_user(monkeypatch)
    (tmp_path / "afile").write_text("x")
    (tmp_path / "ro").mkdir(mode=0o555)
    path = tmp_path / where
    for probe in (check_output, probe_writable):
        with pytest.raises(OutputError) as exc:
            probe(path)
        d = exc.value.diagnostics[0]
        assert (d.message, d.where) == (said.format(tmp=tmp_path), str(path)), probe.__name__
    code, _, err = run_cli("viz", "1f1b", "-o", str(path.with_suffix(".svg")))
    assert code == 2 and said.format(tmp=tmp_path) in err, err
    code, _, err = run_cli("run", "1f1b", "--param", "P=2,M=2", "--model", "examples.mlp:build_stages",
                           "--profile", str(path))
    assert code == 2 and err.startswith("--profile: error[io]: --profile ") and said.format(tmp=tmp_path) in err, err
    assert not any(p.name.startswith(".") for p in (tmp_path / "ro").iterdir())
    if where.startswith("afile"):  # found as it is written (sim), in the same words (it said "-o names the folder")
        code, _, err = run_cli("sim", "1f1b", "--trace", str(path))
        assert code == 2 and err == f"{path}: error[io]: {said.format(tmp=tmp_path)}\n", err


def test_a_late_write_error_names_the_output_in_json(run_cli, tmp_path, monkeypatch):
    """Found only as the files are written (here a folder made read-only meanwhile): the JSON's
    `file` is still the output's path."""
    out = tmp_path / "out"
    out.mkdir()
    from schedc import outputs
    monkeypatch.setattr(outputs, "check_writable", lambda *a, **k: None)
    monkeypatch.setattr("schedc.commands.compile.check_writable", lambda *a, **k: None)
    def refuse(path, data, temps):
        raise OSError(errno.EACCES, "Permission denied")
    monkeypatch.setattr(outputs, "_stage", refuse)
    code, stdout, _ = run_cli("compile", "1f1b", *SMALL, "-o", str(out), "--json")
    error = json.loads(stdout.splitlines()[-1])
    assert code == 2 and error["file"] == str(out / "1f1b.json") and error["errors"][0]["code"] == "io"


@pytest.mark.parametrize("command", ["compile", "viz"])
def test_an_output_name_the_system_refuses_is_an_io_error_before_any_work(run_cli, tmp_path, command):
    """The up-front check of -o looked the name up and met ENAMETOOLONG as an internal error (fuzz
    seed 1207): a name too long for the file system is the output's `io` error, exit 2."""
    long = str(tmp_path / ("x" * 300))
    argv = ["compile", "looped_bfs", "-o", long] if command == "compile" else ["viz", "1f1b", "-o", long + ".svg"]
    code, out, err = run_cli(*argv)
    assert code == 2 and "error[io]: cannot write: File name too long" in err and "Traceback" not in err, err
    assert out == ""


SPOOF = "hang\x1b[2K\r1f1b: 2 ranks; ok\x1b[8m\u202e"  # erases the line, writes a verdict, conceals the rest


def _spoofing_ir(run_cli, folder: Path, name: str = SPOOF) -> Path:
    """A failing schedule's IR JSON whose `schedule` name is `name` (the trial's spoof.json)."""
    code, text, _ = run_cli("export", "1f1b", *SMALL, "--to", "ir-json")
    assert code == 0
    doc = json.loads(text)
    doc["schedule"] = name
    doc["actions"] = [["0F0", "0B0", "0F1", "0B1"], ["1F0", "1F1", "1B0", "1B1"]]  # rank 0 waits for B(1,0): a deadlock
    path = folder / "spoof.json"
    path.write_text(json.dumps(doc))
    return path


def _raw(text: str) -> list[str]:
    """The characters a terminal would act on in `text` (a line's end and a tab aside)."""
    return [ch for ch in text if (ord(ch) < 0x20 and ch not in "\n\t") or 0x7F <= ord(ch) < 0xA0
            or 0x202A <= ord(ch) <= 0x202E or 0x2066 <= ord(ch) <= 0x2069]


@pytest.mark.parametrize("argv", [("check",), ("sim",), ("viz", "-o", "{out}/p.svg"), ("compile", "-o", "{out}/b"),
                                  ("export", "--to", "torch-csv", "--level", "compute", "-o", "{out}/e.csv"),
                                  ("prove",)])
def test_a_name_cannot_spoof_a_line_on_the_terminal(run_cli, tmp_path, argv):
    """A schedule's name with an escape sequence, a carriage return and a bidi override (trial 2,
    item 2): every line printed shows them escaped, as error lines do, so the real verdict stays."""
    spoof = _spoofing_ir(run_cli, tmp_path)
    argv = [a.format(out=tmp_path) for a in argv]
    code, out, err = run_cli(argv[0], str(spoof), *argv[1:])
    assert not _raw(out) and not _raw(err), (out, err)
    if argv[0] in ("check", "viz", "compile"):
        assert out.startswith("hang\\x1b[2K\\x0d1f1b: 2 ranks; ok\\x1b[8m\\u202e: "), out
        assert "FAILED" in out.splitlines()[0]


def test_json_keeps_a_name_exact(run_cli, tmp_path):
    """JSON escapes control characters itself: the name read back is the name (DEL included)."""
    spoof = _spoofing_ir(run_cli, tmp_path, SPOOF + "\x7f")
    for command in ("check", "export"):
        code, out, _ = run_cli(command, str(spoof), "--json", *(("--to", "ir-json") if command == "export" else ()))
        assert not _raw(out)
        assert json.loads(out)["schedule"] == SPOOF + "\x7f", command


def test_a_file_name_with_an_escape_is_shown_escaped_in_every_line(run_cli, tmp_path):
    """The trial's `x<ESC>[8m.csv`: the summary line and the `wrote` line show `\\x1b`; the
    exported text written to standard output stays exact."""
    csv = tmp_path / "x\x1b[8m.csv"
    csv.write_text("0F0,0B0,0F1,0B1\n1F1,1F0,1B0,1B1\n")
    code, out, err = run_cli("check", str(csv))
    assert code == 1 and out.startswith("x\\x1b[8m: ") and "FAILED" in out.splitlines()[0]
    assert not _raw(out + err)
    code, out, err = run_cli("viz", str(csv), "-o", str(tmp_path / "v\x1b]0;t\x07.svg"))
    assert "wrote " + str(tmp_path / "v\\x1b]0;t\\x07.svg") in err and not _raw(out + err)
    code, text, _ = run_cli("export", str(csv), "--to", "ir-json")
    assert code == 0 and json.loads(text)["schedule"] == "x\x1b[8m"


def test_dash_as_export_output_is_standard_output(run_cli, tmp_path, monkeypatch):
    """`export -o -` writes to standard output, as export without -o (trial 2, item 15: it wrote a
    file named `-`)."""
    monkeypatch.chdir(tmp_path)
    code, text, err = run_cli("export", "1f1b", *SMALL, "--to", "torch-csv", "-o", "-")
    assert code == 0 and text.startswith(FIRST) and err == "" and not (tmp_path / "-").exists()
    assert run_cli("export", "1f1b", *SMALL, "--to", "torch-csv", "-o", "-", "--json")[1] == \
        run_cli("export", "1f1b", *SMALL, "--to", "torch-csv", "--json")[1]


@pytest.mark.parametrize("argv,option,said", [
    (("compile", "1f1b", "-o", "-"), "-o/--output", "the folder schedc compile writes its files into"),
    (("run", "1f1b", "--model", "m:f", "--print-torchrun", "-o", "-"), "-o/--output", "the folder schedc run"),
    (("viz", "1f1b", "-o", "-"), "-o/--output", "schedc viz's own report"),
    (("check", "1f1b", "--viz", "-"), "--viz", "schedc check's own report"),
    (("sim", "1f1b", "--trace", "-"), "--trace", "schedc sim's own report"),
    (("run", "1f1b", "--model", "m:f", "--trace", "-"), "--trace", "schedc run's own report"),
    (("run", "1f1b", "--model", "m:f", "--profile", "-"), "--profile", "schedc run's own report"),
])
def test_dash_is_refused_where_an_output_is_not_the_one_on_standard_output(run_cli, tmp_path, monkeypatch,
                                                                          argv, option, said):
    """A folder of outputs, or a file beside the report standard output holds: `-` is a usage
    error naming the option, before any work, and no file named `-` is made."""
    monkeypatch.chdir(tmp_path)
    code, out, err = run_cli(*argv)
    assert code == 2 and out == "" and err.startswith(f"{option}: error[usage]: `-` would be standard output")
    assert said in err and not (tmp_path / "-").exists()
