"""Lowering to a torch.distributed program: the text is a fixed template plus checked literals.

Every built-in lowers to a program that parses, imports only schedc.runtime, holds exactly the
communication-level table (which verifies), and does nothing on import; names from CSV stems and
IR JSON (free text) cannot inject code; `schedc compile` writes the program; the core never
imports torch; the runtime's table reader rejects malformed tables; each instruction's inputs and
value in the table are the dependency rule's, and the interpreter reads them from there. A
lowering that does not pass the checks its schedule passed (the runnable program, or torch's for the
comms-level CSV) is an internal error, nothing written; every built-in's lowerings pass them.
"""
from __future__ import annotations

import ast
import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings

import schedc
from schedc.ir import RECVS, WAITS, Action, Op
from schedc.lower import lower_to_torch
from schedc.passes import lower
from schedc.resources import builtin_schedules
from schedc.rules.deps import needs, payload, produces
from schedc.strategies import programs
from schedc.runtime.table import TableError, load_table, parts, partners, to_program

ROOT = Path(__file__).resolve().parent.parent
HOSTILE = [
    'x"); import os; #',
    "x'''\nimport os\nos.system('echo pwned')\n'''",
    'x"""\nraise SystemExit(3)\n"""',
    "a\\\nimport os",
    "\u2028import os\u2029\x00\x0c\r",
    "}\n]\nimport os\n#",
    "{__import__('os').system('true')}",
]


def _import(path: Path):
    spec = importlib.util.spec_from_file_location("lowered_program", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _only_template(source: str) -> None:
    tree = ast.parse(source)
    imports = [n for n in ast.walk(tree) if isinstance(n, (ast.Import, ast.ImportFrom))]
    assert [(n.module, [a.name for a in n.names]) for n in imports] == [("schedc.runtime.entry", ["main", "leave"])]
    calls = {ast.unparse(n.func) for n in ast.walk(tree) if isinstance(n, ast.Call)}
    assert calls == {"_run", "main", "_leave"}, calls


@pytest.mark.parametrize("name", sorted(builtin_schedules()))
def test_every_builtin_lowers_to_a_program_holding_its_communication_table(name, tmp_path):
    program = schedc.load(name, {"P": 4, "M": 8, "V": 2}, strict_params=False)
    lowered = lower_to_torch(program, verified="rendezvous")
    _only_template(lowered.source)
    path = tmp_path / "prog.py"
    path.write_text(lowered.source)
    module = _import(path)  # importing runs nothing
    table = load_table(module.PROGRAM, module.RANKS)
    assert table == lowered.table
    assert callable(module.main)
    again = to_program(table)
    assert again.ranks == lower(program).ranks and again.placement == program.placement
    assert schedc.check(again).ok
    assert module.PROGRAM["verified"] == "rendezvous" and module.PROGRAM["schedule"] == name
    assert lowered.metadata["ranks"] == 4 and lowered.metadata["steps"] == [len(r) for r in table.ranks]
    # every send has its receive, and the peers are the ranks of the stages on the other end
    pairs = partners(table)
    comms = [(r, x, i) for r, steps in enumerate(table.ranks) for x, st in enumerate(steps)
             for i, a in enumerate(parts(st)) if a.op.startswith(("SEND", "RECV"))]
    assert set(pairs) == set(comms)
    assert lowered.torchrun_command("p.py", "m:f")[:2] == ["torchrun", "--nproc-per-node=4"]


@pytest.mark.parametrize("name", builtin_schedules())
@pytest.mark.parametrize("receives", ["needed", "early"])
def test_every_instruction_carries_the_rules_inputs_and_value(name, receives):
    lowered = lower_to_torch(schedc.load(name), receives=receives)
    table = lowered.table
    seen = 0
    for steps in table.ranks:
        for instr in (i for st in steps for i in parts(st) if i.microbatch is not None):
            a = Action(Op[instr.op], instr.stage, instr.microbatch)
            if a.op.is_compute:
                assert instr.inputs == needs(a, table.stages), instr
                assert instr.value() == produces(a), instr
            else:  # a send or receive moves its payload; a wait awaits its operation's
                assert instr.inputs == ()
                assert instr.value() == payload(Action(WAITS.get(a.op, a.op), a.stage, a.microbatch)), instr
            seen += 1
    assert seen > 0
    meta, ranks = table.to_data()  # the literal leaves them out: reading it fills them in
    assert all(len(st) <= 4 for steps in ranks for st in steps) and load_table(meta, ranks) == table


def test_the_interpreter_imports_no_dependency_rule():
    source = (ROOT / "schedc" / "runtime" / "interpreter.py").read_text()
    imported = {node.module for node in ast.walk(ast.parse(source)) if isinstance(node, ast.ImportFrom)}
    assert not {m for m in imported if m and "deps" in m}, imported


def test_the_program_reads_as_a_table_with_a_comment_per_step():
    source = lower_to_torch(schedc.load("1f1b", {"P": 2, "M": 2})).source
    assert "('SEND_F', 0, 0, 1),                     #    1  0SEND_F0 -> rank 1\n" in source
    assert "('RECV_F', 1, 0, 0),                     #    0  1RECV_F0 <- rank 0\n" in source
    assert "    # rank 1: stages 1; 8 steps\n" in source
    assert "'verified': None," in source


@pytest.mark.parametrize("hostile", HOSTILE)
def test_hostile_names_from_csv_stems_and_ir_json_stay_data(hostile, tmp_path):
    base = schedc.load("1f1b", {"P": 2, "M": 2})
    # IR JSON: the schedule name and parameter names are free text
    data = json.loads(__import__("schedc.interop.ir_json", fromlist=["dumps_ir"]).dumps_ir(base))
    data["schedule"] = hostile
    data["params"] = {hostile: 1}
    ir = tmp_path / "prog.json"
    ir.write_text(json.dumps(data))
    from_ir = schedc.load(str(ir))
    assert from_ir.name == hostile
    for program in (from_ir, _csv_with_stem(base, hostile, tmp_path)):
        lowered = lower_to_torch(program)
        _only_template(lowered.source)
        path = tmp_path / "prog.py"
        path.write_text(lowered.source)
        module = _import(path)
        assert module.PROGRAM["schedule"] == program.name
        assert load_table(module.PROGRAM, module.RANKS) == lowered.table


def _csv_with_stem(program, hostile: str, tmp_path: Path):
    stem = hostile.replace("/", "_").replace("\x00", "_")
    try:
        path = tmp_path / f"{stem}.csv"
        path.write_text(schedc.to_torch_csv(program, "comms"), newline="")
    except (OSError, ValueError):  # a name the file system refuses: use the text form directly
        from schedc.api import load_text
        return load_text(schedc.to_torch_csv(program, "comms"), f"{hostile}.csv", "torch-csv")
    return schedc.from_torch_csv(str(path))


def test_compile_writes_the_program_with_a_safe_file_name(tmp_path, run_cli):
    csv = tmp_path / 'x"); import os; #.csv'
    csv.write_text(schedc.to_torch_csv(schedc.load("1f1b", {"P": 2, "M": 2}), "comms"), newline="")
    out = tmp_path / "out"
    code, stdout, _ = run_cli("compile", str(csv), "-o", str(out))
    assert code == 0, stdout
    (program,) = out.glob("*_program.py")
    assert program.name == "x____import_os___--f4fbea22_program.py"  # (a name changed to be safe: + its hash)
    assert all(ch.isalnum() or ch in "_.-" for ch in program.name)
    module = _import(program)
    assert module.PROGRAM["schedule"] == 'x"); import os; #'
    assert module.PROGRAM["verified"] == "rendezvous"
    code, stdout, _ = run_cli("compile", "gpipe", "--param", "P=2", "--param", "M=3", "-o", str(out))
    assert code == 0 and (out / "gpipe_program.py").is_file() and (out / "gpipe.csv").is_file()


def test_compile_force_writes_an_unverified_program_for_a_failing_schedule(tmp_path, run_cli):
    broken = tmp_path / "broken.pp"
    broken.write_text("schedule broken {\n  rank 0: 0F0 0RECV_B0 0B0 0SEND_F0\n"
                      "  rank 1: 1RECV_F0 1F0 1B0 1SEND_B0\n}\n")
    code, _, err = run_cli("compile", str(broken), "-o", str(tmp_path / "a"))
    assert code == 1 and not (tmp_path / "a").exists()
    code, _, err = run_cli("compile", str(broken), "-o", str(tmp_path / "b"), "--force")
    assert code == 1
    module = _import(tmp_path / "b" / "broken_program.py")
    assert module.PROGRAM["verified"] is None
    # its text claims no verification it did not get
    assert "from an UNVERIFIED schedule:\nwritten with `schedc compile --force`" in module.__doc__
    assert "verified schedule" not in module.__doc__
    crossed = tmp_path / "crossed.pp"  # deadlocks under rendezvous sends, passes under eager ones
    crossed.write_text("schedule crossed {\n rank 0: 0F0 0F1 0SEND_F0 0SEND_F1 0RECV_B0 0B0 0RECV_B1 0B1\n"
                       " rank 1: 1RECV_F0 1F0 1B0 1SEND_B0 1RECV_F1 1F1 1B1 1SEND_B1\n}\n")
    code, _, _ = run_cli("compile", str(crossed), "-o", str(tmp_path / "c"), "--semantics", "eager")
    verified = _import(tmp_path / "c" / "crossed_program.py")
    assert code == 0 and verified.PROGRAM["verified"] == "eager"
    assert "from a verified schedule." in verified.__doc__ and "UNVERIFIED" not in verified.__doc__
    assert "its checks were not run" in lower_to_torch(schedc.load("1f1b"), verified=None).source


def _crossed(program, lowering=lower):
    """A lowering gone wrong: rank 1's first two receives swapped (each channel's messages then
    meet the wrong receives: crossed, or a wait for ever)."""
    from dataclasses import replace
    lowered = lowering(program)
    rows = [list(row) for row in lowered.ranks]
    at = [i for i, st in enumerate(rows[1]) if isinstance(st, Action) and st.op in RECVS][:2]
    rows[1][at[0]], rows[1][at[1]] = rows[1][at[1]], rows[1][at[0]]
    return replace(lowered, ranks=tuple(map(tuple, rows)))


def test_a_lowering_that_does_not_check_is_never_written_as_verified(tmp_path, run_cli, monkeypatch):
    # translation validation: the lowered program is checked again under the verified semantics,
    # so a bug in lowering is an internal error, not a runnable program that hangs or crosses tensors
    import schedc.passes
    program = schedc.load("1f1b", {"P": 2, "M": 3})
    assert lower_to_torch(program, verified="rendezvous").metadata["verified"] == "rendezvous"
    monkeypatch.setattr(schedc.passes, "lower", lambda p, receives="needed": _crossed(p))
    with pytest.raises(RuntimeError, match="1f1b lowered does not pass the checks its schedule passed under rendezvous"):
        lower_to_torch(program, verified="rendezvous")
    assert lower_to_torch(program, verified=None).metadata["verified"] is None  # (--force, --no-verify: as asked)
    code, _, err = run_cli("compile", "1f1b", "--param", "P=2,M=3", "-o", str(tmp_path / "out"))
    assert code == 4 and "schedc: internal error: RuntimeError: 1f1b lowered does not pass" in err
    assert not (tmp_path / "out" / "1f1b_program.py").exists()


def test_a_torch_lowering_that_does_not_check_is_never_written_as_verified(tmp_path, run_cli, monkeypatch):
    # the same for the comms-level PyTorch CSV (`compile`'s and `export --to torch-csv`'s): torch's
    # lowering, before its groups are flattened, is checked again under the verified semantics
    import schedc.passes
    from schedc.interop.torch_csv import to_torch_csv
    program = schedc.load("1f1b", {"P": 2, "M": 3})
    real = schedc.passes.lower_for_torch
    monkeypatch.setattr(schedc.passes, "lower_for_torch", lambda p: _crossed(p, real))
    with pytest.raises(RuntimeError, match="1f1b lowered for torch does not pass the checks its schedule passed "
                                           "under nccl"):
        to_torch_csv(program, "comms", verified="nccl")
    assert to_torch_csv(program, "comms").rows  # (not checked: written as asked, the library's to_torch_csv)
    code, _, err = run_cli("compile", "1f1b", "--param", "P=2,M=3", "-o", str(tmp_path / "out"))
    assert code == 4 and "schedc: internal error: RuntimeError: 1f1b lowered for torch does not pass" in err
    assert not (tmp_path / "out").exists()
    csv = tmp_path / "1f1b.csv"
    code, out, err = run_cli("export", "1f1b", "--param", "P=2,M=3", "--to", "torch-csv", "-o", str(csv))
    assert code == 4 and "schedc: internal error: RuntimeError: 1f1b lowered for torch does not pass" in err
    assert not csv.exists() and out == ""


def test_a_torch_lowering_is_validated_within_the_runnable_programs_limit(monkeypatch):
    # the cost is bounded as the runnable program's: a torch lowering of more actions is written unchecked
    from schedc.lower import codegen
    from schedc.passes import lower_for_torch
    lowered = lower_for_torch(schedc.load("1f1b", {"P": 2, "M": 3}))
    monkeypatch.setattr(codegen, "MAX_RUNNABLE_ACTIONS", lowered.num_actions)
    assert codegen.validate_torch_lowering(lowered, "rendezvous")
    monkeypatch.setattr(codegen, "MAX_RUNNABLE_ACTIONS", lowered.num_actions - 1)
    assert not codegen.validate_torch_lowering(_crossed(lowered, lambda p: p), "rendezvous")


@pytest.mark.parametrize("semantics", ["rendezvous", "nccl", "gloo"])
@pytest.mark.parametrize("name", sorted(builtin_schedules()))
def test_every_builtin_lowering_passes_its_validation(name, semantics):
    # what compile and run validate, for every built-in at P=2,3,4 that checks: the runnable
    # lowering (and under gloo with receives posted early, as `run` posts them there) and torch's
    from schedc.errors import SchedcError
    from schedc.interop.torch_csv import torch_cannot_run
    from schedc.lower.codegen import validate_lowering, validate_torch_lowering
    from schedc.passes import lower_for_torch
    checked = 0
    for P in (2, 3, 4):
        try:
            program = schedc.load(name, {"P": P, "V": 2}, strict_params=False)
        except SchedcError:  # (dualpipe takes an even P)
            continue
        assert schedc.check(program, semantics=semantics).ok, (name, P)
        validate_lowering(lower(program), semantics)
        if semantics == "gloo":
            validate_lowering(lower(program, receives="early"), semantics)
        if torch_cannot_run(program) is None:  # (routes: no CSV)
            assert validate_torch_lowering(lower_for_torch(program), semantics)
        checked += 1
    assert checked >= 2


def test_the_core_lowering_and_the_cli_do_not_import_torch(tmp_path):
    probe = ("import sys, schedc, schedc.lower, schedc.runtime, schedc.runtime.launch\n"
             "from schedc.cli import main\n"
             f"assert main(['compile', '1f1b', '-o', {str(tmp_path)!r}]) == 0\n"
             "print('torch' in sys.modules)\n")
    res = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip().splitlines()[-1] == "False"


def _data():
    program = schedc.load("1f1b", {"P": 2, "M": 2})
    return lower_to_torch(program).table.to_data()


@pytest.mark.parametrize("damage, message", [
    (lambda m, r: m.update(format="other"), "not a schedc program table"),
    (lambda m, r: m.update(version=9), "version"),
    (lambda m, r: r[0].__setitem__(0, ("X", 0, 0)), "unknown op 'X'"),
    (lambda m, r: r[0].__setitem__(0, ("F", 1, 0)), "stage 1 is on rank 1"),
    (lambda m, r: r[0].__setitem__(0, ("F", 0, 5)), "microbatch"),
    (lambda m, r: r[0].__setitem__(0, ("F", 0, True)), "microbatch"),
    (lambda m, r: r[0].__setitem__(1, ("SEND_F", 0, 0, 0)), "not rank 0"),
    (lambda m, r: r[0].__setitem__(1, ("SEND_B", 0, 0, 1)), "no stage -1"),
    (lambda m, r: r[0].__setitem__(1, ("GROUP", (("F", 0, 0),))), "a GROUP holds only"),
    (lambda m, r: m.update(params={"P": "2"}), "params"),
    (lambda m, r: r.pop(), "one list of steps per rank"),
])
def test_the_table_reader_rejects_malformed_tables(damage, message):
    meta, ranks = _data()
    damage(meta, ranks)
    with pytest.raises(TableError, match=message):
        load_table(meta, ranks)


def test_a_program_refuses_a_world_of_the_wrong_size(tmp_path):
    path = tmp_path / "prog.py"
    path.write_text(lower_to_torch(schedc.load("1f1b", {"P": 2, "M": 2})).source)
    env = {"PATH": "/usr/bin:/bin", "WORLD_SIZE": "3", "RANK": "0", "OMP_NUM_THREADS": "1"}
    import os
    env["PYTHONPATH"] = os.pathsep.join(sys.path)
    res = subprocess.run([sys.executable, str(path), "--model", "examples.mlp:build_stages"], env=env, cwd=ROOT,
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 2
    assert "the schedule has 2 ranks but WORLD_SIZE is 3 (nodes x --nproc-per-node must be 2)" in res.stderr
    res = subprocess.run([sys.executable, str(path), "--help"], env=env, cwd=ROOT, capture_output=True, text=True,
                         timeout=120)
    assert res.returncode == 0 and "--model" in res.stdout


@settings(max_examples=60, deadline=None)
@given(programs(max_ranks=4, max_microbatches=4, placements=("loop", "vshape", "table")))
def test_the_lowered_size_is_counted_exactly_before_lowering(program):
    # the limits on lowered programs are checked from this count, before any of it is built
    from schedc.passes.comms import lowered_size
    assert lowered_size(program) == lower(program).num_actions
