"""torch's Flight Recorder dumps read into records: a file or a folder of them, JSON
(`_dump_fr_trace_json`) or pickle (`_dump_fr_trace`, and the file NCCL's watchdog writes to
TORCH_FR_DUMP_TEMP_FILE + rank), each an error naming the file and the entry when malformed.
A pickle is read as plain data only (dicts, lists, strings, numbers): it never runs code.
"""
from __future__ import annotations

import io
import pickle
import re
from dataclasses import dataclass
from pathlib import Path

from ..errors import SchedcError
from ..inputs import decode, loads_json

MAX_DUMP_BYTES = 256 * 2 ** 20  # a dump of 20,000 entries with stacks is a few MB
_RANK = re.compile(r"(\d+)(?:\.(?:json|pkl|pickle))?$")
_P2P = re.compile(r"(send|recv) (\d+)(?:->|<-)(\d+)$")
STATES = ("scheduled", "started", "completed")


@dataclass(frozen=True)
class Record:
    """One entry of a rank's dump: the operation (`op`: all_reduce, send, recv, coalesced, ...), its
    process group by name, its peer's rank in that group (send and recv), the group's sequence
    numbers, sizes, and whether it completed (state `completed`, or retired from the recorder: gloo
    leaves every state `scheduled` and retires a work once it is done)."""

    rank: int
    index: int  # its place in the file's entries
    record_id: int
    backend: str  # gloo, nccl, ...
    op: str
    pg: str
    peer: int | None  # the other end's rank in the group (send, recv)
    collective_seq: int
    p2p_seq: int
    is_p2p: bool
    sizes: tuple  # (input sizes, output sizes), as lists of shapes
    state: str
    done: bool

    @property
    def seq(self) -> int:
        """Its number on its group: the p2p sequence number of a send or receive, else the collective's."""
        return self.p2p_seq if self.is_p2p else self.collective_seq

    def text(self) -> str:
        """`all_reduce #2` / `send to 1 #3`: the operation as the dump names it."""
        peer = "" if self.peer is None else (f" to {self.peer}" if self.op == "send" else f" from {self.peer}")
        return f"{self.backend}:{self.op}{peer} #{self.seq}"


@dataclass(frozen=True)
class Dump:
    """One rank's dump: its file, rank, version, groups (name -> (desc, member ranks, or None when
    the dump does not say: gloo's)) and records in record order."""

    file: str
    rank: int
    version: str
    groups: dict
    records: tuple[Record, ...]


def read_dumps(paths: list[str]) -> list[Dump]:
    """Every dump the paths name (a folder: each file in it, by name), one per rank."""
    files: list[Path] = []
    for text in paths:
        path = Path(text)
        try:
            if not path.exists():
                raise SchedcError("io", "no such file or directory", where=text)
            if path.is_dir():
                inside = sorted(p for p in path.iterdir() if p.is_file() and not p.name.startswith("."))
                if not inside:
                    raise SchedcError("dump", "the folder holds no dump files", where=text)
                files += inside
            else:
                files.append(path)
        except OSError as exc:  # a name the file system refuses (too long, ...), a folder it cannot list
            raise SchedcError("io", f"cannot read {text[:80]!r}{'...' if len(text) > 80 else ''}: "
                              f"{exc.strerror or exc}", where="DUMP") from None
    dumps = [read_dump(f) for f in files]
    seen: dict[int, str] = {}
    for d in dumps:
        if d.rank in seen:
            raise SchedcError("dump", f"two dumps for rank {d.rank}: {seen[d.rank]} and {d.file}", where=d.file)
        seen[d.rank] = d.file
    return sorted(dumps, key=lambda d: d.rank)


def read_dump(path: Path) -> Dump:
    name = str(path)
    m = _RANK.search(path.name)
    if m is None:
        raise SchedcError("dump", "cannot tell which rank wrote this dump: its name does not end with the "
                          "rank (as torch names them, e.g. nccl_trace_rank_3 or rank3.json)", where=name)
    try:
        with open(path, "rb") as f:
            data = f.read(MAX_DUMP_BYTES + 1)
    except OSError as exc:
        raise SchedcError("io", f"cannot read the dump: {exc.strerror}", where=name) from None
    if len(data) > MAX_DUMP_BYTES:
        raise SchedcError("too-large", f"the dump is larger than {MAX_DUMP_BYTES // 2 ** 20} MiB", where=name)
    value = _decode(data, name)
    return _dump(value, name, int(m.group(1)))


def _decode(data: bytes, name: str):
    """The dump's value: JSON text, or a pickle of plain data."""
    if data[:1] == b"\x80":  # a pickle (protocol 2 and later start so)
        try:
            return _Plain(io.BytesIO(data), name).load()
        except SchedcError:
            raise
        except Exception as exc:  # noqa: BLE001 - whatever a truncated or foreign pickle raises
            raise SchedcError("dump", f"not a Flight Recorder pickle: {type(exc).__name__}: {exc}"[:300],
                              where=name) from None
    return loads_json(decode(data, name), name, "dump")


class _Plain(pickle.Unpickler):
    """Unpickles plain data only: any class or function named in the pickle is refused."""

    def __init__(self, file, name: str):
        super().__init__(file)
        self.name = name  # the dump's file, which the error names

    def find_class(self, module, name):
        raise SchedcError("dump", f"the pickle names {module}.{name}: a Flight Recorder dump holds plain data "
                          "only, and schedc does not run code from a pickle", where=self.name)


def _dump(value, name: str, rank: int) -> Dump:
    if not isinstance(value, dict) or "entries" not in value:
        raise SchedcError("dump", "not a Flight Recorder dump: expected an object with \"entries\" (torch's "
                          "_dump_fr_trace_json or _dump_fr_trace)", where=name)
    entries = value["entries"]
    if not isinstance(entries, list):
        raise SchedcError("dump", f"\"entries\" is {_kind(entries)}, expected a list", where=name)
    records = tuple(_record(e, i, name, rank) for i, e in enumerate(entries))
    return Dump(name, rank, str(value.get("version", "?")), _groups(value.get("pg_config"), name), records)


def _groups(config, name: str) -> dict:
    """pg_config: name -> (desc, ranks); gloo's holds one empty entry, and then nothing is known."""
    out: dict = {}
    if not isinstance(config, dict):
        return out
    for key, pg in config.items():
        if not isinstance(pg, dict) or not key:
            continue
        ranks = _ranks(pg.get("ranks"), name, key)
        if ranks:
            out[str(key)] = (str(pg.get("desc", "")), ranks)
    return out


def _ranks(text, name: str, key) -> tuple[int, ...] | None:
    if isinstance(text, list):
        items = text
    elif isinstance(text, str) and re.fullmatch(r"\[\s*(\d+\s*(,\s*\d+\s*)*)?\]", text):
        items = [int(x) for x in re.findall(r"\d+", text)]
    else:
        raise SchedcError("dump", f"pg_config[{key!r}]: \"ranks\" is {_kind(text)}, expected a list of ranks "
                          "such as \"[0, 2]\"", where=name)
    if not all(isinstance(x, int) and not isinstance(x, bool) and x >= 0 for x in items):
        raise SchedcError("dump", f"pg_config[{key!r}]: \"ranks\" holds something that is not a rank", where=name)
    return tuple(items)


def _field(e: dict, key: str, kinds, where: str, name: str):
    if key not in e:
        raise SchedcError("dump", f"{where}: no \"{key}\"", where=name)
    v = e[key]
    if not isinstance(v, kinds) or (isinstance(v, bool) and bool not in (kinds if isinstance(kinds, tuple) else (kinds,))):
        raise SchedcError("dump", f"{where}: \"{key}\" is {_kind(v)}", where=name)
    return v


def _record(e, i: int, name: str, rank: int) -> Record:
    where = f"entry {i}"
    if not isinstance(e, dict):
        raise SchedcError("dump", f"{where} is {_kind(e)}, expected an object", where=name)
    profiling = _field(e, "profiling_name", str, where, name)
    backend, sep, what = profiling.partition(":")
    if not sep or not what:
        raise SchedcError("dump", f"{where}: profiling_name {profiling!r} is not BACKEND:OPERATION "
                          "(e.g. nccl:all_reduce, nccl:send 0->1)", where=name)
    op, peer = what, None
    if what.split(" ")[0] in ("send", "recv"):
        m = _P2P.fullmatch(what)
        if m is None:
            raise SchedcError("dump", f"{where}: profiling_name {profiling!r}: expected 'send A->B' or "
                              "'recv A<-B'", where=name)
        op, peer = m.group(1), int(m.group(3))
    pg = _field(e, "process_group", (list, tuple), where, name)
    if len(pg) != 2 or not all(isinstance(x, str) for x in pg):
        raise SchedcError("dump", f"{where}: \"process_group\" is not [name, description]", where=name)
    state = _field(e, "state", str, where, name)
    if state not in STATES:
        raise SchedcError("dump", f"{where}: state {state!r} is not one of {', '.join(STATES)}", where=name)
    retired = e.get("retired", False)
    sizes = tuple(_sizes(e.get(k, []), k, where, name) for k in ("input_sizes", "output_sizes"))
    is_p2p = e.get("is_p2p", op in ("send", "recv"))
    if not isinstance(is_p2p, bool) or not isinstance(retired, bool):
        raise SchedcError("dump", f"{where}: \"is_p2p\" and \"retired\" are true or false", where=name)
    ints = {k: _field(e, k, int, where, name) for k in ("record_id", "collective_seq_id", "p2p_seq_id")}
    return Record(rank, i, ints["record_id"], backend, op, pg[0], peer, ints["collective_seq_id"],
                  ints["p2p_seq_id"], bool(is_p2p), _shapes(sizes), state, state == "completed" or retired is True)


def _sizes(value, key: str, where: str, name: str) -> list:
    """input_sizes / output_sizes: a list of shapes, each a list of whole numbers."""
    if not isinstance(value, (list, tuple)) or not all(
            isinstance(s, (list, tuple)) and all(isinstance(x, int) and not isinstance(x, bool) for x in s)
            for s in value):
        raise SchedcError("dump", f"{where}: \"{key}\" is not a list of shapes (lists of sizes)", where=name)
    return list(value)


def _shapes(sizes) -> tuple:
    """Sizes as tuples (hashable), whatever nesting the dump has."""
    def conv(x):
        return tuple(conv(y) for y in x) if isinstance(x, (list, tuple)) else x
    return conv(sizes)


def _kind(v) -> str:
    return {dict: "an object", list: "a list", tuple: "a list", str: "a string", bool: "true or false",
            int: "a number", float: "a number", type(None): "null"}.get(type(v), type(v).__name__)
