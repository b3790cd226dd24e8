"""Costs stay linear in the input (issue 19): counts of operations at two sizes, never seconds.

Each test measures one kind of work with a counter at a small and a larger size and asserts the
shape (linear, not quadratic or exponential), or that a limit is an error before the work starts.
"""
from __future__ import annotations

import pytest

import schedc
from schedc import syntax as ast
from schedc.errors import SchedcError
from schedc.compiler import compile_schedule
from schedc.parse import parse
from schedc.prove.model import model
from schedc.prove.sample import evaluate


def _let_chain(n: int) -> str:
    """`n` nested `let` functions, each calling the previous one 3 times (3^n calls if inlined)."""
    lets = [f"  let f{i}(x) = f{i - 1}(x) + f{i - 1}(x) - f{i - 1}(x + k)" for i in range(1, n + 1)]
    return "\n".join(["schedule lets(P = 1, M = 1) {", "  stages 1", "  place loop", "  let k = 0", "  let f0(x) = x",
                      *lets, "  rank r {", f"    F(0, f{n}(0))", "    B(0, 0)", "  }", "}"])


def _arithmetic(n: int, run) -> int:
    """The Python work (lines run, schedc's own and the code it generates) of `run(n)` on the chain
    of `n` functions."""
    return _lines(lambda: run(n))


def _compile(n: int) -> None:
    program = compile_schedule(parse(_let_chain(n), "lets.pp"))
    assert [str(a) for st in program.ranks[0] for a in st.parts] == ["0F0", "0B0"]


def _prove_eval(n: int) -> None:
    """`f<n>(0)` by the prover's evaluator (its own compiled copies of the function bodies)."""
    functions = model(parse(_let_chain(n), "lets.pp")).functions
    here = parse("schedule s { stages 1 }", "s.pp").span
    assert evaluate(ast.Call(f"f{n}", (ast.Num(0, here),), here, here), {"k": 0, "P": 1, "M": 1}, functions) == 0


def test_let_functions_calling_the_previous_ones_compile_in_linear_work():
    small, large = _arithmetic(6, _compile), _arithmetic(12, _compile)
    assert large <= 3 * small, (small, large)  # 3^6 times more if each call ran its callee anew


def test_prover_evaluates_let_function_chains_in_linear_work():
    small, large = _arithmetic(4, _prove_eval), _arithmetic(8, _prove_eval)
    assert large <= 3 * small, (small, large)


def test_a_function_chain_too_deep_to_evaluate_is_a_clear_error_at_its_line(run_cli, tmp_path):
    """Evaluation recurses through `let` functions: a chain nested past MAX_CALL_NESTING is refused
    where it is defined (no RecursionError); one within it compiles and proves."""
    from schedc.expr import MAX_CALL_NESTING

    def chain(n):
        lets = [f"  let f{i}(x) = f{i - 1}(x) + 1" for i in range(1, n + 1)]
        return "\n".join(["schedule fns(P = 2, M = 2) {", "  stages P", "  place loop", "  let f0(x) = x",
                          *lets, f"  let top = f{n}(0)", "  rank r { for m in 0 .. M { F(r, m) } "
                          "for m in 0 .. M { B(r, m) } }", "}"])
    deep = tmp_path / "deep.pp"
    deep.write_text(chain(1500))
    for command in ("check", "prove"):
        code, out, err = run_cli(command, str(deep))
        assert code == 2 and "error[too-large]" in err and "Traceback" not in err + out, command
        line = int(err.split(":")[1])
        assert 4 < line < 4 + MAX_CALL_NESTING  # the first function past the limit, not the end of the file
    fits = tmp_path / "fits.pp"
    fits.write_text(chain(200))
    assert run_cli("check", str(fits))[0] == 0
    assert run_cli("prove", str(fits))[0] == 0


class _CountingList(list):
    """A list that counts the items read from it."""

    reads = 0

    def __getitem__(self, i):
        _CountingList.reads += 1
        return super().__getitem__(i)


def _tries(monkeypatch, P: int, name: str = "gpipe", M: int = 2) -> int:
    """Readiness checks (reads of a step's first input) communication insertion makes for `name`
    at P, M, held as columns (the array path: `_when`, over `_sources`)."""
    import schedc.passes.comms as comms
    from schedc.api import load
    from schedc.columns import held_as_columns
    real = comms._sources

    def counted(steps):
        src_a, src_b, more = real(steps)
        return _CountingList(src_a), src_b, more
    program = held_as_columns(load(name, {"P": P, "M": M}))
    monkeypatch.setattr(comms, "_sources", counted)
    _CountingList.reads = 0
    comms.insert_comms(program)
    monkeypatch.setattr(comms, "_sources", real)
    return _CountingList.reads


def _small_lines(P: int) -> int:
    """Lines of `_lower_small` run to lower gpipe at P, M=2 held as actions (the plain-Python path)."""
    import sys
    import schedc.passes.comms as comms
    from schedc.api import load
    program = load("gpipe", {"P": P, "M": 2})
    lines = [0]

    def line(frame, event, arg):
        lines[0] += event == "line"
        return line

    def call(frame, event, arg):
        return line if frame.f_code is comms._lower_small.__code__ else None
    previous = sys.gettrace()
    sys.settrace(call)
    try:
        comms.insert_comms(program)
    finally:
        sys.settrace(previous)
    return lines[0]


def test_communication_insertion_is_linear_in_ranks(monkeypatch):
    # the drain runs one rank per round: a pass that tried every rank each round was quadratic
    small, large = _tries(monkeypatch, 256), _tries(monkeypatch, 512)
    assert small and large <= 2.2 * small, (small, large)
    small, large = _small_lines(32), _small_lines(64)  # (the small path: each step tried when it may run)
    assert small and large <= 2.2 * small, (small, large)


class _CountingTuple(tuple):
    """A tuple that counts the passes made over it."""

    passes = 0

    def __iter__(self):
        _CountingTuple.passes += 1
        return super().__iter__()


def test_a_ranks_stages_are_found_in_one_pass_over_the_placement():
    from schedc.runtime.table import Table
    placement = _CountingTuple(s % 3 for s in range(10))
    table = Table("t", {}, 3, 10, 1, placement, ((), (), ()))
    _CountingTuple.passes = 0
    assert [table.stages_of(r) for r in range(4)] == [(0, 3, 6, 9), (1, 4, 7), (2, 5, 8), ()]
    assert _CountingTuple.passes == 1  # one per rank made lowering quadratic at 65,536 ranks


def _missing_findings(monkeypatch, microbatch: int) -> tuple[int, list]:
    """How many findings lint builds (calls of Findings.add) for the one-action CSV `9F<microbatch>`."""
    from schedc import lint
    from schedc.interop.torch_csv import read_torch_csv
    calls = [0]
    real = lint.Findings.add

    def counted(self, *args, **kwargs):
        calls[0] += 1
        return real(self, *args, **kwargs)
    monkeypatch.setattr(lint.Findings, "add", counted)
    found = lint.lint(read_torch_csv(f"9F{microbatch}\r\n", "one.csv").to_program())
    monkeypatch.setattr(lint.Findings, "add", real)
    return calls[0], found


def test_one_action_naming_a_far_microbatch_is_checked_in_work_independent_of_it(monkeypatch):
    # 10 stages x (m + 1) microbatches of which one F is present: the findings are listed for the
    # first pairs and counted for the rest, never built one per pair
    small, _ = _missing_findings(monkeypatch, 99)
    large, found = _missing_findings(monkeypatch, 9_999)
    assert small == large <= 2 * 20 + 1
    assert found[-1].code == "missing"
    assert found[-1].message == f"... and {2 * 10 * 10_000 - 1 - 20} more 'missing' finding(s)"


def _literal_tree_nodes(n: int) -> int:
    """Syntax-tree nodes lark builds for a literal rank of `n` actions."""
    from schedc.parse import parser
    actions = " ".join(f"0F{m} 0B{m}" for m in range(n))
    return sum(1 for _ in parser().parse(f"schedule lit {{ stages 1 rank 0: {actions} }}").iter_subtrees())


def test_a_literal_rank_is_one_tree_node_whatever_its_length():
    # a node per action (each with positions propagated and a Transformer call) made a 1 MB literal
    # schedule take seconds: the actions are tokens, turned into the AST by the rank's one node
    assert _literal_tree_nodes(10) == _literal_tree_nodes(1000)
    program = compile_schedule(parse("schedule lit { stages 1 rank 0: 0F0 0F1 0B0 0B1 }", "lit.pp"))
    assert [str(a) for st in program.ranks[0] for a in st.parts] == ["0F0", "0F1", "0B0", "0B1"]


def test_a_lowering_over_the_action_limit_is_refused_before_it_is_built(monkeypatch):
    """1F1B at P=64, M=30000 (3.84M actions) lowers to 11.4M, over the 10M limit: a too-large error
    counted up front, not a lowering that runs out of memory. Here at P=4, M=8: 64 actions and 96
    sends and receives, against a limit of 159 and then 160."""
    import pytest
    from schedc.errors import SchedcError
    from schedc.passes import comms, lower, lower_for_torch
    program = schedc.load("1f1b", {"P": 4, "M": 8})
    monkeypatch.setattr(comms, "MAX_LOWERED_ACTIONS", 159)
    for pipeline in (lower, lower_for_torch):
        with pytest.raises(SchedcError) as err:
            pipeline(program)
        assert err.value.code == "too-large" and "160 actions" in err.value.diagnostics[0].message
    monkeypatch.setattr(comms, "MAX_LOWERED_ACTIONS", 160)
    lowered = lower(program)
    assert lowered.num_actions == 160 and comms.within_limit(lowered) is lowered


# ---- issue 21: reading, checking and lowering in work linear in the actions ----
def _lines(run) -> int:
    """Lines of schedc's own code that `run()` executes, and of the code it generates (a schedule's
    rank bodies and expressions, schedc/expr.py): a count of the Python work it does (array
    operations count one line whatever their length), the same on every machine."""
    import sys
    from schedc.expr import GENERATED
    count = [0]

    def line(frame, event, arg):
        if event == "line":
            count[0] += 1
        return line

    def call(frame, event, arg):
        name = frame.f_code.co_filename
        return line if name == GENERATED or "/schedc/" in name.replace("\\", "/") else None
    previous = sys.gettrace()
    sys.settrace(call)
    try:
        run()
    finally:
        sys.settrace(previous)
    return count[0]


def _lowered_csv(M: int) -> str:
    from schedc.interop.torch_csv import TorchCsv
    from schedc.passes import lower
    return TorchCsv(lower(schedc.load("1f1b", {"P": 4, "M": M})).ranks).dumps()


def test_a_csv_is_read_and_checked_without_an_object_per_action(monkeypatch):
    """File to verdict reads the cells as arrays and checks the arrays: its Python work grows with
    the ranks (the run over the steps is the one loop), and no action is made but the one each
    rank's peak names, and those only when asked for (a clear report shows the peaks' sizes). 4x the
    actions: under 4.4x the work, and the same 4 actions made."""
    from schedc import columns
    from schedc.interop.torch_csv import program_from_csv
    made = [0]
    real = columns.unchecked_action

    def counted(*args):
        made[0] += 1
        return real(*args)
    monkeypatch.setattr(columns, "unchecked_action", counted)
    from schedc.interop import csv_columns
    work, objects = [], []
    for M in (16, 64):
        text = _lowered_csv(M)
        made[0] = 0
        csv_columns._PARSED.clear()  # every cell read anew at both sizes, whatever ran before
        report = []
        work.append(_lines(lambda: report.append(schedc.check(program_from_csv(text, "f.csv")))))
        assert made[0] == 0 and report[0].to_dict()["peak_memory"] and made[0] == 0
        assert all(pk.action is not None for pk in report[0].peak_memory)
        objects.append(made[0])
    assert objects == [4, 4], objects
    assert work[1] <= 4.4 * work[0], work


def test_lowering_is_linear_in_microbatches(monkeypatch):
    small, large = (_tries(monkeypatch, 4, "1f1b", M) for M in (32, 128))
    assert small and large <= 4.4 * small, (small, large)


def test_torchs_stage_actions_are_added_in_linear_work():
    """`add_unshard_reshard` looked ahead from every step to the next 3 stages: with one stage per
    rank it scanned to the end each time, quadratic (a CSV of 1F1B at M=1024 took 7 s to write)."""
    from schedc.api import load
    from schedc.passes import add_unshard_reshard
    small, large = (_lines(lambda: add_unshard_reshard(load("1f1b", {"P": 2, "M": M}))) for M in (50, 200))
    assert large <= 4.4 * small, (small, large)


def test_a_schedule_loaded_again_is_parsed_once_and_its_greedy_order_made_once(monkeypatch):
    """Small programs: the second load of a text parses nothing and orders nothing (property tests
    load the same built-ins thousands of times); a text that does not parse is never kept."""
    import pytest
    from schedc import order, parse
    from schedc.api import load
    from schedc.errors import SchedcError
    calls = {"parse": 0, "order": 0}
    real_parse, real_order = parse._parse, order._greedy_order

    def parsed(*args):
        calls["parse"] += 1
        return real_parse(*args)

    def ordered(*args):
        calls["order"] += 1
        return real_order(*args)
    monkeypatch.setattr(parse, "_parse", parsed)
    monkeypatch.setattr(order, "_greedy_order", ordered)
    path = "tests/data/zb_h2_greedy.pp"
    first = load(path, {"P": 3, "M": 5})
    again = load(path, {"P": 3, "M": 5})
    assert calls == {"parse": calls["parse"], "order": calls["order"]} and calls["parse"] <= 1 and calls["order"] <= 1
    assert again == first and [a.span for _, _, a in again.actions()] == [a.span for _, _, a in first.actions()]
    for _ in range(2):
        with pytest.raises(SchedcError):
            parse.parse("schedule broken {", "broken.pp")
    assert calls["parse"] <= 3


def test_a_runnable_program_too_large_to_write_is_refused_and_compile_writes_the_rest(run_cli, tmp_path,
                                                                                       monkeypatch):
    from schedc.lower import codegen
    monkeypatch.setattr(codegen, "MAX_RUNNABLE_ACTIONS", 100)  # 1F1B at P=4, M=16 lowers to 320 actions
    code, out, err = run_cli("compile", "1f1b", "--param", "P=4,M=16", "-o", str(tmp_path / "out"))
    assert code == 0 and "no runnable program" in err and "at most 100" in err
    written = sorted(p.name for p in (tmp_path / "out").iterdir())
    assert written == ["1f1b.csv", "1f1b.json", "1f1b.svg"]
    import schedc.passes

    def no_lowering(program):
        raise AssertionError("lowered before it was refused")
    monkeypatch.setattr(schedc.passes, "lower", no_lowering)  # refused from the count alone (fuzz finding:
    with pytest.raises(SchedcError) as exc:  # compile 1f1b P=2 M=999999 lowered 8M actions to refuse them)
        codegen.lower_to_torch(schedc.load("1f1b", {"P": 4, "M": 16}))
    assert exc.value.code == "too-large" and "320 actions" in str(exc.value)


def test_run_refuses_a_program_too_large_to_write_before_checking_it(run_cli, tmp_path, monkeypatch):
    """Fuzz finding (seed 43): `run dualpipev --param P=2,M=999999 --print-torchrun` checked 8M
    actions for 100 s, then refused to write them; the size is counted first."""
    from schedc.lower import codegen
    from schedc.commands import common
    monkeypatch.setattr(codegen, "MAX_RUNNABLE_ACTIONS", 100)

    def no_checks(*args, **kwargs):
        raise AssertionError("checked before it was refused")
    monkeypatch.setattr(common, "run_checks", no_checks)
    code, out, err = run_cli("run", "1f1b", "--param", "P=4,M=16", "--model", "examples.mlp:build_stages",
                             "--print-torchrun", "-o", str(tmp_path / "out"))
    assert code == 2 and "at most 100" in err and not (tmp_path / "out").exists()
    # the fuzzer's (bench/README.md, "Fuzzing"): the error named no file
    assert err.startswith("1f1b: error[too-large]: the runnable program would hold 320 actions"), err


# ---- issue 21: compiling in work linear in the actions, whatever the shape ----
def _compile_lines(name: str, params: dict) -> int:
    """The Python work of expanding a built-in (its code made before: a second expansion)."""
    from schedc.api import load
    load(name, params)
    return _lines(lambda: load(name, params))


def test_compiling_is_linear_in_ranks():
    """gpipe with many ranks and few microbatches costs what the same number of actions costs on a
    few ranks: nothing is done per rank or per stage beyond its actions' share (per-stage costs
    and sizes were made one by one, a rank's setup was interpreted anew)."""
    wide, deep = _compile_lines("gpipe", {"P": 1024, "M": 2}), _compile_lines("gpipe", {"P": 16, "M": 128})
    assert wide <= 1.5 * deep, (wide, deep)  # 4,096 actions each
    assert _compile_lines("gpipe", {"P": 4096, "M": 2}) <= 4.4 * wide  # and linear in them


def test_a_schedule_is_compiled_once_and_its_limits_read_at_each_expansion(monkeypatch):
    """The rank bodies become Python code once per schedule (schedc/compiler.py's `_Code`); a second
    expansion, at other parameters, compiles nothing, and the limits it counts against are the
    ones in force then, not the ones when the code was made."""
    from schedc import compiler, expr
    from schedc.api import load
    load("zbv", {"P": 2, "M": 4})
    made = [0]
    real = expr.Module.function

    def counted(*args, **kwargs):
        made[0] += 1
        return real(*args, **kwargs)
    monkeypatch.setattr(expr.Module, "function", counted)
    assert load("zbv", {"P": 3, "M": 6}).num_actions == 3 * 2 * 6 * 3 and made[0] == 0
    monkeypatch.setattr(compiler, "MAX_ITERATIONS", 10)
    with pytest.raises(SchedcError) as err:
        load("zbv", {"P": 3, "M": 6})
    assert err.value.code == "too-large" and "more than 10 loop iterations" in err.value.diagnostics[0].message
    monkeypatch.setattr(compiler, "MAX_ITERATIONS", 10**6)
    monkeypatch.setattr(compiler, "MAX_ACTIONS", 50)
    with pytest.raises(SchedcError) as err:
        load("zbv", {"P": 3, "M": 6})
    assert "more than 50 actions" in err.value.diagnostics[0].message and made[0] == 0


def test_the_action_limit_counts_the_parts_of_a_compound(monkeypatch):
    """DualPipeV at P=2, M=999999 is 8M actions in 4M steps: the limit on actions (5M) counted
    steps, so its programs reached 8M actions (sim took 120 s). Both a loop's compounds and a
    literal rank's count their parts."""
    from schedc import compiler
    from schedc.api import load
    program = load("dualpipev", {"P": 2, "M": 8})
    steps = sum(map(len, program.ranks))
    assert steps < program.num_actions
    monkeypatch.setattr(compiler, "MAX_ACTIONS", program.num_actions - 1)
    with pytest.raises(SchedcError) as err:
        load("dualpipev", {"P": 2, "M": 8})
    assert err.value.code == "too-large"
    literal = "schedule s {\n  rank 0: 0F0 (0F1;0B0)OVERLAP_F_B 0B1\n}"
    monkeypatch.setattr(compiler, "MAX_ACTIONS", 3)
    with pytest.raises(SchedcError) as err:
        compile_schedule(parse(literal, "pairs.pp"))
    assert err.value.code == "too-large"
    monkeypatch.setattr(compiler, "MAX_ACTIONS", 4)
    assert compile_schedule(parse(literal, "pairs.pp")).num_actions == 4  # 3 steps


def test_the_iteration_limit_is_reached_in_a_few_lines_per_iteration(monkeypatch):
    """Issue 19: refusing a schedule at the loop-iteration limit (20,000,000) took 40-60 s. Loops
    run as generated Python code: an empty iteration is the loop's own line and the body's, so the
    refusal costs a few lines per counted iteration (here at a limit of 20,000)."""
    from schedc import compiler
    text = "schedule s(P = 1) { rank r { for i in 0 .. 1000000 { for j in 0 .. 1000 { if i * j % 7 == 3 { } } } } }"
    tree = parse(text, "loops.pp")
    monkeypatch.setattr(compiler, "MAX_ITERATIONS", 20_000)
    with pytest.raises(SchedcError) as err:
        compile_schedule(tree)
    assert err.value.code == "too-large" and "loop iterations" in err.value.diagnostics[0].message

    def refused():
        with pytest.raises(SchedcError):
            compile_schedule(tree)
    assert _lines(refused) <= 3 * 20_000


def test_the_detailed_checks_refuse_a_program_beyond_their_limit_before_any_pass(run_cli, tmp_path, monkeypatch):
    """What the fast checks cannot clear costs ~10 us an action in detail: past MAX_DETAILED_ACTIONS
    a clear `too-large` error (exit 2), not minutes; what they clear is unaffected."""
    from schedc import report
    monkeypatch.setattr(report, "MAX_DETAILED_ACTIONS", 100)

    def no_lint(program):
        raise AssertionError("a detailed pass ran")
    monkeypatch.setattr(report, "lint", no_lint)
    code, out, err = run_cli("check", "1f1b", "--param", "P=4,M=16")  # 128 actions, cleared fast
    assert code == 0, err
    csv = tmp_path / "1f1b.csv"  # bounded buffers at the communication level: only the detailed checks decide
    assert run_cli("export", "1f1b", "--param", "P=4,M=16", "--level", "comms", "--to", "torch-csv", "-o", str(csv))[0] == 0
    code, out, err = run_cli("check", str(csv), "--semantics", "bounded:2")
    assert code == 2 and err.startswith(f"{csv}: error[too-large]: ") and "at most 100 actions" in err, (code, err)


def test_sim_asks_the_fast_checks_before_linting(run_cli, monkeypatch, tmp_path):
    """`sim` refuses a schedule that is not sound; a sound one is cleared by the fast checks, not
    linted action by action (lint was 13 of sim dualpipev's 23 s at P=2, M=100000)."""
    from schedc import report
    real = report.lint
    calls = []
    monkeypatch.setattr(report, "lint", lambda program: calls.append(program) or real(program))
    assert run_cli("sim", "dualpipev", "--param", "P=4,M=16")[0] == 0 and calls == []
    broken = tmp_path / "broken.csv"
    broken.write_text("0F0,0B0,0B1\n")  # F(0,1) never runs
    code, out, err = run_cli("sim", str(broken))
    assert code == 1 and len(calls) == 1 and "error" in err, (code, err)


def test_compare_counts_the_actions_of_all_its_schedules(run_cli, monkeypatch):
    """Fuzz-scale finding: `compare 1f1b zb_h1 --param P=1000,M=1000` simulated 5M actions (43 s);
    the schedules compared share one limit, checked before simulating the one that crosses it."""
    from schedc import compare as compare_module
    simulated = []
    import schedc.simulate as simulate_module
    real = simulate_module.simulate
    monkeypatch.setattr(simulate_module, "simulate", lambda program, **kw: simulated.append(program.name)
                        or real(program, **kw))
    monkeypatch.setattr(compare_module, "MAX_COMPARED_ACTIONS", 200)  # 1F1B and ZB-H1 at P=4, M=8: 64 and 96
    assert run_cli("compare", "1f1b", "zb_h1", "--param", "P=4,M=8")[0] == 0 and len(simulated) == 2
    simulated.clear()
    code, out, err = run_cli("compare", "1f1b", "zb_h1", "gpipe", "--param", "P=4,M=8")
    assert code == 2 and "more than 200 actions in all (gpipe reaches 224)" in err, (code, err)
    assert simulated == ["1f1b", "zb_h1"]


@pytest.mark.parametrize("command", ["sim", "viz"])
def test_sim_and_viz_time_a_compute_level_program_in_one_pass_over_columns(run_cli, monkeypatch, tmp_path, command):
    """After its checks, sim and viz hold the program as columns, so the timed run takes the one
    pass of simulate_columns.py (zb_h1 at P=1000, M=1000, 3M actions: sim 28 s -> 8 s)."""
    from schedc import simulate_columns
    real, ran = simulate_columns.run_columns, []
    monkeypatch.setattr(simulate_columns, "run_columns", lambda sim: ran.append(real(sim)) or ran[-1])
    argv = [command, "zb_h1", "--param", "P=4,M=8"] + (["-o", str(tmp_path / "z.svg")] if command == "viz" else [])
    assert run_cli(*argv)[0] == 0
    assert ran and all(t is not None for t in ran)


def test_what_the_one_pass_run_does_not_take_is_timed_step_by_step_up_to_a_limit(run_cli, monkeypatch, tmp_path):
    """A PyTorch CSV of 7.6M actions at the communication level took 40 s and 4.4 GB in `sim`:
    past MAX_SIMULATED_ACTIONS the step-by-step simulator refuses (sim: exit 2; compile writes the
    rest, with a note), while a compute-level program held as columns is still timed in one pass."""
    from schedc import simulate
    monkeypatch.setattr(simulate, "MAX_SIMULATED_ACTIONS", 100)
    csv = tmp_path / "1f1b.csv"
    assert run_cli("export", "1f1b", "--param", "P=4,M=8", "--level", "comms", "--to", "torch-csv", "-o", str(csv))[0] == 0
    code, out, err = run_cli("sim", str(csv))
    assert code == 2 and "to time step by step" in err and "at most 100" in err, (code, err)
    code, out, err = run_cli("compile", str(csv), "-o", str(tmp_path / "out"))
    assert code == 0 and "schedc: no picture: " in err, err
    assert sorted(p.suffix for p in (tmp_path / "out").iterdir()) == [".csv", ".json", ".py"]
    code, out, err = run_cli("compile", "1f1b", "--param", "P=4,M=8", "-o", str(tmp_path / "pp"))  # 64 actions
    assert code == 0 and (tmp_path / "pp" / "1f1b.svg").exists(), err
    assert run_cli("sim", "1f1b", "--param", "P=4,M=16")[0] == 0  # 128 actions, in one pass


def test_export_rechecks_the_csv_only_when_it_flattened_groups(run_cli, monkeypatch, tmp_path):
    """The lowered program as written checks as the CSV's rows do unless groups were flattened
    (torch's CSV has none): only then is the CSV checked again (1F1B at P=64, M=20000: 27 s -> 11 s)."""
    from schedc import report
    real, checked = report.run_checks, []
    monkeypatch.setattr(report, "run_checks", lambda program, **kw: checked.append(program.level) or real(program, **kw))
    assert run_cli("export", "1f1b", "--param", "P=4,M=8", "--to", "torch-csv", "-o", str(tmp_path / "a.csv"))[0] == 0
    assert checked == ["compute", "comms"]  # (the second: the lowering checked again, translation validation)
    checked.clear()  # past the runnable limit the lowering is written unchecked (docs/run.md): the big case's time
    monkeypatch.setattr("schedc.lower.codegen.MAX_RUNNABLE_ACTIONS", 100)
    assert run_cli("export", "1f1b", "--param", "P=4,M=8", "--to", "torch-csv", "-o", str(tmp_path / "b.csv"))[0] == 0
    assert checked == ["compute"]
    grouped = tmp_path / "grp.pp"  # posted together, the receive first; in a row, a cycle
    grouped.write_text("schedule grp {\n  rank 0: 0F0 (0RECV_B0;0SEND_F0)GROUP 0B0\n"
                       "  rank 1: 1RECV_F0 1F0 1B0 1SEND_B0\n}\n")
    assert run_cli("check", str(grouped))[0] == 0
    code, out, err = run_cli("export", str(grouped), "--to", "torch-csv", "-o", str(tmp_path / "g.csv"))
    assert code == 1 and "which has no groups" in err and not (tmp_path / "g.csv").exists()
