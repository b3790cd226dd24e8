"""Render a communication-level Program as a self-describing Python program for schedc.runtime.

The text is a fixed template; the only parts that vary are literals made by `_literal` from
validated values (checked again with `ast.literal_eval`), comments made from integers and the
closed set of op names, and the docstring's first paragraph: verified, or why not (a closed set).
The rendered program imports only `schedc.runtime` (which brings torch).
"""
from __future__ import annotations

import ast
import math
from dataclasses import dataclass

from ..collection import PAUSED
from ..columns import columns_of
from ..errors import SchedcError
from ..ir import Compound as IrCompound
from ..ir import Program
from ..runtime.table import COMM_OPS, PEER_STAGE, Compound, Instr, Step, Table, TableError, load_table, parts

# The docstring's first paragraph: what the program's checks vouch for. A verified program's says so;
# an unverified one's (PROGRAM["verified"] None) says why there is no check behind it, from this
# closed set (`unverified=`), never a claim it did not earn.
VERIFIED = "A pipeline-parallel training program, lowered by schedc from a verified schedule."
UNVERIFIED = {
    "force": "A pipeline-parallel training program, lowered by schedc from an UNVERIFIED schedule:\n"
             "written with `schedc compile --force`, its checks did not pass (they failed or could not\n"
             "decide), so it may deadlock, cross messages or run out of memory.",
    "unchecked": "A pipeline-parallel training program, lowered by schedc from an UNVERIFIED schedule:\n"
                 "its checks were not run (`schedc run --no-verify`, or lowered without them), so it may\n"
                 "deadlock, cross messages or run out of memory.",
}

HEADER = '''\
#!/usr/bin/env python3
"""{purpose}

PROGRAM describes the schedule (its name, parameters, sizes, and the placement: stage -> rank).
RANKS holds, for each rank, the steps it runs in order, with every message explicit. A step is data:

    (op, stage, microbatch)          F forward, B full backward (I then W),
                                     I backward for inputs, W backward for weights
    (op, stage, microbatch, peer)    SEND_F / RECV_F / SEND_B / RECV_B; peer is the rank on the
                                     other end; a receive is named by the stage that receives
    (op, stage)                      UNSHARD / RESHARD (no-ops in this runtime) / REDUCE_GRAD
                                     (with replicas: the stage's gradients averaged over its
                                     data-parallel group; else a no-op)
    ("GROUP", (step, ...))           sends and receives posted together
    ("OVERLAP_F_B", (step, ...))     a forward and a backward run as one action

Sends and receives are posted where they stand and waited for where their value is used; the k-th
send between two ranks meets the k-th receive. Run it on every rank, for example

    torchrun --nproc-per-node=RANKS this_file.py --model pkg.module:build_stages

(RANKS = PROGRAM["ranks"]; with PROGRAM["replicas"] = D, rank d * P + p runs replica d's pipeline
rank p on its share of the batch), or `schedc run`; or import it and call main(argv).
`python this_file.py --help` lists the options. It needs only torch and schedc.runtime.
"""
from schedc.runtime.entry import main as _run, leave as _leave

'''

FOOTER = '''

def main(argv=None):
    """Run this rank's steps (RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT come from the launcher)."""
    return _run(PROGRAM, RANKS, argv)


if __name__ == "__main__":
    _leave(main())  # at once: nothing torch holds is freed after its process groups are gone
'''


@dataclass(frozen=True)
class LoweredProgram:
    """The lowered program: `source` (Python text), `table` (what it runs), and `metadata`."""

    name: str  # the schedule's name, free text (never part of the code)
    source: str
    table: Table
    metadata: dict

    def torchrun_command(self, path: str, model: str, extra: list[str] | tuple[str, ...] = ()) -> list[str]:
        """The torchrun command line that runs this program from `path` on one node."""
        return ["torchrun", f"--nproc-per-node={self.table.num_ranks}", str(path), "--model", model, *extra]


def table_of(program: Program, verified: str | None = None) -> Table:
    """The runtime table of a communication-level program (peers resolved from the placement; each
    action's inputs and value filled in from the rule, schedc/rules/deps.py, as the table is read
    back). A data-parallel job gives one list per job rank, replica after replica (rank d * P + p),
    each replica's peers inside it."""
    P = program.num_ranks
    rows: list[tuple[Step, ...]] = []
    for d in range(program.dp):
        placement = tuple(d * P + r for r in program.placement)
        one = program.replica(d)

        def instr(a, placement=placement) -> Instr:
            op = a.op.value
            return Instr(op, a.stage, a.microbatch, _peer(placement, op, a.stage) if op in COMM_OPS else None)

        held = columns_of(one)  # a rank's steps held as columns are made for this and not kept
        rows.extend(tuple(Compound(st.kind.value, tuple(instr(p) for p in st.parts)) if isinstance(st, IrCompound)
                          else instr(st) for st in (held.made(r) if held is not None else one.ranks[r]))
                    for r in range(P))
    ranks = tuple(rows)
    del rows
    meta, data = Table(program.name, dict(program.params), P * program.dp, program.num_stages,
                       program.num_microbatches, tuple(program.placement), ranks, verified,
                       program.dp, program.p2p, program.forward_only,
                       tuple((*r.microbatches, *r.stages) for r in program.routes)).to_data()
    del ranks  # (one copy of the steps at a time: big programs hold millions)
    try:  # the table must read back exactly as the runtime will read it
        return load_table(meta, data)
    except TableError as exc:
        raise SchedcError("bad-comm", f"the lowered program is not runnable: {exc}") from None


def _peer(placement: tuple[int, ...], op: str, stage: int) -> int:
    """The rank of the stage a send or receive talks to; -1 when there is no such stage (a
    schedule written with --force), which `load_table` then reports."""
    other = stage + PEER_STAGE[op]
    return placement[other] if 0 <= other < len(placement) else -1


MAX_RUNNABLE_ACTIONS = 500_000  # the most actions (sends and receives too) a generated program holds (8 to 16 s to write)


def refuse_unrunnable(program: Program, where: str | None = None) -> None:
    """A `too-large` error if the runnable program of `program` would hold more than
    MAX_RUNNABLE_ACTIONS actions, counted without lowering it (`run` asks before its checks); the
    error names `where` (the input's file), or the schedule."""
    from ..passes.comms import lowered_size
    actions = sum(program.each_replica(lowered_size))  # (replicas that share their lists: counted once)
    if actions > MAX_RUNNABLE_ACTIONS:
        raise SchedcError("too-large", f"the runnable program would hold {actions:,} actions as Python "
                          f"source; at most {MAX_RUNNABLE_ACTIONS:,} (about 40 MB of Python): use fewer microbatches, "
                          "or run the lowered CSV with torch's runtime (schedc export --to torch-csv)",
                          where=where or program.name)


def lower_to_torch(program: Program, *, verified: str | None = None, receives: str = "needed",
                   unverified: str = "unchecked") -> LoweredProgram:
    """Insert communication (if the program has none) and render the runnable program.

    `verified` records the send semantics the schedule was checked under (None: not checked, for
    the reason `unverified` names, a key of UNVERIFIED, which the program's docstring gives);
    `receives="early"` posts every receive at the start of its rank's step (gloo; `passes.lower`).
    """
    from ..passes import lower
    refuse_unrunnable(program)  # (before lowering: refused, none is built)
    lowered = lower(program, receives=receives)
    if verified is not None:
        validate_lowering(lowered, verified)
    return runnable(lowered, verified, unverified)


def runnable(lowered: Program, verified: str | None, unverified: str = "unchecked") -> LoweredProgram:
    """The runnable program of a lowering (communication explicit) that passed the checks under
    `verified` (None: not checked): `lower_to_torch`'s last half, for a caller that has lowered and
    checked the program itself (`schedc run`'s receives posted early, checked under gloo)."""
    table = table_of(lowered, verified)
    source = render_program(table, unverified)
    sends = sum(a.is_send for steps in table.ranks for st in steps for a in parts(st))
    metadata = {
        "schedule": table.schedule,
        "params": dict(table.params),
        "ranks": table.num_ranks,
        "stages": table.num_stages,
        "microbatches": table.num_microbatches,
        "placement": list(table.placement),
        "replicas": table.replicas,
        "p2p": table.p2p,
        "forward_only": table.forward_only,
        "steps": [len(steps) for steps in table.ranks],
        "messages": sends,
        "verified": verified,
    }
    if table.routes:
        metadata["routes"] = [list(r) for r in table.routes]
    return LoweredProgram(table.schedule, source, table, metadata)


def validate_lowering(lowered: Program, verified: str, what: str = "lowered") -> None:
    """Translation validation: the program that runs, communication explicit, checked again under
    the semantics its schedule was verified under. Lowering orders every message so that it passes
    (docs/semantics.md); one that does not is a bug in schedc, raised as one (nothing is written, no
    rank starts), never run as verified. `what` names the lowering in the message."""
    from ..report import run_checks
    from ..rules.semantics import Semantics
    report = run_checks(lowered, semantics=Semantics.parse(verified))
    if report.ok is not True:
        raise RuntimeError(f"{lowered.name} {what} does not pass the checks its schedule passed under {verified} "
                           f"({report.summary()}): a bug in schedc's lowering; please report it with the schedule")


def validate_torch_lowering(lowered: Program, verified: str) -> bool:
    """`validate_lowering` of torch's lowering (`passes.lower_for_torch`: stage actions, then sends
    and receives, its groups not yet flattened into CSV rows), when it holds at most
    MAX_RUNNABLE_ACTIONS actions, the bound of the runnable program's own validation; a larger one
    is written unvalidated, as no runnable program is made of it. True if it was checked."""
    if lowered.num_actions > MAX_RUNNABLE_ACTIONS:
        return False
    validate_lowering(lowered, verified, "lowered for torch")
    return True


def render_program(table: Table, unverified: str = "unchecked") -> str:
    """The program's text: a verified table's docstring says it was verified; an unverified one's
    (`table.verified` None) says why not, `UNVERIFIED[unverified]`."""
    meta, ranks = table.to_data()
    purpose = VERIFIED if table.verified is not None else UNVERIFIED[unverified]
    head = HEADER.replace("{purpose}", purpose) + "PROGRAM = " + _literal(meta, indent=0) + "\n" + "\n" + "RANKS = [\n"
    blocks = []
    for r, steps in enumerate(ranks):
        stages = ", ".join(str(s) for s in table.stages_of(r)) or "none"
        where = (f" (replica {int(table.replica_of(r))}, pipeline rank {int(r % table.pipeline_ranks)})"
                 if table.replicas > 1 else "")
        lines = [f"    # rank {int(r)}{where}: stages {stages}; {len(steps)} steps\n    [\n"]
        for x, (data, st) in enumerate(zip(steps, table.ranks[r])):
            text = _literal(data)
            lines.append(f"        {text},{' ' * max(1, 40 - len(text))}# {int(x):>4}  {_comment(st)}\n")
        lines.append("    ],\n")
        blocks.append("".join(lines))
    tail = "]\n" + FOOTER
    _check_source(head, blocks, tail, meta, ranks)
    return head + "".join(blocks) + tail


def _comment(step) -> str:
    """`0SEND_F3 -> rank 1`: built from ints and the closed set of op names only."""
    def one(a: Instr) -> str:
        text = f"{int(a.stage)}{a.op}{'' if a.microbatch is None else int(a.microbatch)}"
        if a.peer is not None:
            text += (" -> rank " if a.is_send else " <- rank ") + str(int(a.peer))
        return text
    if isinstance(step, Compound):
        return step.kind + ": " + "; ".join(one(p) for p in step.parts)
    return one(step)


def _literal(value, indent: int | None = None) -> str:
    """A Python literal for plain data (str, int, bool, None, finite float, tuple, list, dict)."""
    if value is None or isinstance(value, (bool, int, str)):
        return repr(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError("non-finite float")
        return repr(value)
    if isinstance(value, tuple):
        inner = ", ".join(_literal(v) for v in value)
        return f"({inner},)" if len(value) == 1 else f"({inner})"
    if isinstance(value, list):
        return "[" + ", ".join(_literal(v) for v in value) + "]"
    if isinstance(value, dict):
        items = [f"{_literal(k)}: {_literal(v)}" for k, v in value.items()]
        if indent is None:
            return "{" + ", ".join(items) + "}"
        pad = " " * (indent + 4)
        return "{\n" + "".join(f"{pad}{item},\n" for item in items) + " " * indent + "}"
    raise TypeError(f"cannot embed a {type(value).__name__} in a program")


def _check_source(head: str, blocks: list[str], tail: str, meta: dict, ranks: list) -> None:
    """Belt and braces: the text parses, its only statements are the template's, and its literals
    evaluate to exactly the table. The template with RANKS empty is parsed whole; each rank's block
    (a list literal and comments) is evaluated alone, so the work and memory go with one rank at a
    time, not with the whole program. The collector is paused meanwhile: a parse making millions
    of nodes would otherwise run full collections over all of them, quadratic in the program."""
    with PAUSED:
        _check_parsed(ast.parse(head + tail), meta)
        for r, (block, steps) in enumerate(zip(blocks, ranks, strict=True)):
            if ast.literal_eval("[\n" + block + "]") != [steps]:
                raise RuntimeError(f"internal error: the generated program's steps of rank {r} differ from its table")


def _check_parsed(tree: ast.Module, meta: dict) -> None:
    shapes = [type(node).__name__ for node in tree.body]
    if shapes != ["Expr", "ImportFrom", "Assign", "Assign", "FunctionDef", "If"]:
        raise RuntimeError(f"internal error: the generated program has statements {shapes}")
    program_node, ranks_node = (stmt.value for stmt in tree.body[2:4] if isinstance(stmt, ast.Assign))  # (both are)
    if ast.literal_eval(program_node) != meta or ast.literal_eval(ranks_node) != []:
        raise RuntimeError("internal error: the generated program's literals differ from its table")
