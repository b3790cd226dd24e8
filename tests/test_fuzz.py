"""Fuzzing schedc's inputs: nothing a user can write may escape as anything but a SchedcError.

(a) source texts generated from grammar/schedc.lark itself (schedc.strategies.sources, built on
    hypothesis.extra.lark.from_lark);
(b) mutated built-in .pp files, mutated PyTorch CSV texts and mutated IR JSON;
(c) the CLI on such files: exit code 0/1/2 only (never 4, an internal error), no traceback, and
    the code agrees with what the API says about the same file.
A SchedcError must render each diagnostic as `file:line:col: error[CODE]: message` (for a CSV or
a .pp, which always have a position) with the quoted source line and a caret.
"""
from __future__ import annotations

import io
import json
import os
import re
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

import schedc
from schedc.api import load_text
from schedc.cli import main
from schedc.errors import SchedcError
from schedc.interop.ir_json import dumps_ir, read_ir_json
from schedc.interop.torch_csv import read_torch_csv, to_torch_csv
from schedc.ir import Compound, CompoundKind
from schedc.parse import parse, parser
from schedc.passes import lower, lower_for_torch
from schedc.resources import builtin_schedules
from schedc.strategies import sources

FUZZ = settings(max_examples=60, deadline=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much,
                                       HealthCheck.data_too_large])
FEW = settings(FUZZ, max_examples=30)

BUILTINS = {name: path.read_text(encoding="utf-8") for name, path in builtin_schedules().items()}
EXT = {"pp": ".pp", "torch-csv": ".csv", "ir-json": ".json"}

# A checked program is cheap only while it is small: lint walks every (stage, microbatch) and
# lowering steps the ranks in lockstep. Bigger programs (a mutation can turn M = 8 into M = 8888)
# are still loaded, but not checked; the hang on huge indices is its own test below.
MAX_CELLS = 100_000
MAX_LOWER = 4_000


def small(p) -> bool:
    return p.num_stages * p.num_microbatches <= MAX_CELLS and p.num_actions <= MAX_CELLS


# ---------------------------------------------------------------------------------------------
# What every outcome must look like
# ---------------------------------------------------------------------------------------------
HEAD = re.compile(r"^(?P<file>.+?):(?P<line>\d+):(?P<col>\d+): error\[(?P<code>[a-z][a-z0-9-]*)\]: \S")


def assert_located(err: SchedcError, text: str, name: str, *, exact_quote: bool = False) -> None:
    """Every diagnostic of a bad .pp/.csv names the file, line and column and quotes the line (a
    .pp's lines end at \\n, \\r\\n or a lone \\r, as Python reads text; a CSV's at \\n or \\r\\n)."""
    assert isinstance(err, SchedcError)
    if not name.endswith(".csv"):
        text = re.sub(r"\r(?!\n)", "\n", text)
    assert err.diagnostics, "a SchedcError without diagnostics"
    rendered = err.render()
    assert "Traceback" not in rendered
    assert str(err) == rendered
    for d in err.diagnostics:
        assert d.span is not None, f"no location for: {d.render()}"
        lines = d.render().split("\n")
        m = HEAD.match(lines[0])
        assert m, f"not file:line:col: error[CODE]: ...\n{lines[0]!r}"
        assert m["file"] == name
        line, col = int(m["line"]), int(m["col"])
        assert 1 <= line <= max(text.count("\n"), len(text.splitlines())) + 1, (line, text)
        assert col >= 1
        json.dumps(d.to_dict())
        if exact_quote and line <= text.count("\n") + 1:
            source_line = text.split("\n")[line - 1]
            source_line = source_line[:-1] if source_line.endswith("\r") else source_line
            if len(source_line) <= 100 and len(lines) >= 3:
                gutter = f"{line:>4} | "
                assert lines[1] == gutter + source_line, (lines, source_line)
                assert "^" in lines[2]


def assert_well_formed(p) -> None:
    """A loaded Program is internally consistent, whatever file it came from (or check crashes)."""
    ints = (p.num_ranks, p.num_stages, p.num_microbatches, *p.placement)
    assert all(type(x) is int for x in ints), f"non-integer shape: {ints!r}"
    assert p.num_ranks >= 1 and p.num_stages >= 1 and p.num_microbatches >= 1, ints
    assert len(p.ranks) == p.num_ranks, (p.num_ranks, len(p.ranks))
    assert len(p.placement) == p.num_stages, (p.num_stages, p.placement)
    assert all(0 <= r < p.num_ranks for r in p.placement), p.placement
    assert all(isinstance(x, (int, str)) for kv in p.params for x in kv), p.params


def exercise(p) -> None:
    """A program that loaded: every check and export runs without raising, and agrees."""
    if not small(p):
        event("program too big to check")
        return
    report = schedc.check(p)
    report.render()
    report.summary()
    json.dumps(report.to_dict())
    assert report.ok == (not report.errors)
    for d in report.errors:
        d.render()
    again = read_ir_json(dumps_ir(p), "again.json")
    assert again == p
    if report.deadlock is None:  # buffering sends can only help a deadlock-free schedule
        for sem in ("bounded:2", "eager"):
            assert schedc.check(p, semantics=sem).deadlock is None, sem
    if schedc.check(p, semantics="eager").deadlock is not None:
        assert report.deadlock is not None
    if report.ok:
        event("checks ok")
        if p.num_actions <= MAX_LOWER and p.num_ranks <= 64:
            low = lower(p)
            low_report = schedc.check(low)
            assert low_report.ok, low_report.render()
            if p.routes:  # torch's CSV has no routes: the export refuses them
                event("routes: no torch CSV")
                return
            csv_text = to_torch_csv(p, "comms").dumps()
            back = read_torch_csv(csv_text, "back.csv")
            assert back.dumps() == csv_text
            assert back.to_program().ranks == tuple(tuple(_flatten_groups(r)) for r in lower_for_torch(p).ranks)
    else:
        event("checks fail")


def _flatten_groups(steps):
    for step in steps:  # torch's CSV has no groups: their members stand in a row
        if isinstance(step, Compound) and step.kind is CompoundKind.GROUP:
            yield from step.parts
        else:
            yield step


def outcome(text: str, name: str, fmt: str = "pp", *, exact_quote: bool = False):
    """Load and check `text`; only SchedcError may come out, and it must be located."""
    try:
        p = load_text(text, name, fmt)
    except SchedcError as err:
        event(f"{fmt}: input error {err.code}")
        assert_located(err, text, name, exact_quote=exact_quote)
        return None
    event(f"{fmt}: loaded")
    assert_well_formed(p)
    exercise(p)
    return p


# ---------------------------------------------------------------------------------------------
# (a) texts from the grammar
# ---------------------------------------------------------------------------------------------
GRAMMAR = parser()
KEYWORDS = {t.pattern.value for t in GRAMMAR.terminals if t.pattern.type == "str" and t.pattern.value.isalpha()}
SCAFFOLD = """schedule g(P = {P}, M = {M}, V = {V}) {{
  stages V * P
  place loop
  rank r {body}
}}
"""


@settings(FUZZ, max_examples=40)
@given(sources())
def test_grammar_texts_parse_and_load_or_fail_cleanly(text):
    # the generator follows the grammar, so the parser must accept every text...
    try:
        parse(text, "gen.pp")
    except SchedcError as err:
        raise AssertionError(f"a text the grammar derives does not parse:\n{err.render()}") from None
    # ...and compiling or checking it fails only with a located SchedcError
    outcome(text, "gen.pp", exact_quote=True)


@settings(FUZZ, max_examples=45)
@given(sources(start="block"), st.integers(1, 3), st.integers(1, 3), st.integers(1, 2))
def test_generated_rank_bodies_compile_and_check_or_fail_cleanly(body, P, M, V):
    """A rank body from the grammar inside a fixed header, so that most texts get to compile."""
    text = SCAFFOLD.format(P=P, M=M, V=V, body=body)
    p = outcome(text, "body.pp", exact_quote=True)
    if p is not None:
        assert (p.num_ranks, p.num_stages) == (P, V * P)
        assert p.placement == tuple(s % P for s in range(V * P))


@settings(FUZZ, max_examples=20)
@given(sources(literals="any"))
def test_grammar_texts_with_any_literals_fail_cleanly(text):
    outcome(text, "raw.pp")


# ---------------------------------------------------------------------------------------------
# (b) mutated inputs
# ---------------------------------------------------------------------------------------------
TOKEN = re.compile(r"[A-Za-z_0-9]+|\.\.|//|[<>=!]=|->|\S")
VOCAB = sorted({m.group() for text in BUILTINS.values() for m in TOKEN.finditer(text)}
               | KEYWORDS | {"0", "-1", "999999", "4611686018427387904", "1.5", "overlap", "group", "SEND_F",
                            "\"", "#", "{", "}", "(", ")", ";", "rank", "0:", "0F0", "(0F0;0B0)OVERLAP_F_B"})
CHARS = st.one_of(st.sampled_from(list("{}()[],;:=+-*/%<>!?.#\"\\ \n\t\r0123456789FBIWrmPMV_")),
                  st.characters(codec="utf-8"))


@st.composite
def mutated(draw, texts: list[str], tokens=TOKEN, vocab=VOCAB, max_edits: int = 4) -> str:
    text = draw(st.sampled_from(texts))
    for _ in range(draw(st.integers(1, max_edits))):
        spans = [m.span() for m in tokens.finditer(text)]
        kind = draw(st.sampled_from(["del_char", "ins_char", "rep_char", "del_range", "del_token",
                                     "dup_token", "swap_tokens", "rep_token", "ins_token"]))
        if not text:
            text = draw(CHARS)
            continue
        i = draw(st.integers(0, len(text) - 1))
        if kind == "del_char":
            text = text[:i] + text[i + 1:]
        elif kind == "ins_char":
            text = text[:i] + draw(CHARS) + text[i:]
        elif kind == "rep_char":
            text = text[:i] + draw(CHARS) + text[i + 1:]
        elif kind == "del_range":
            j = draw(st.integers(i, min(len(text), i + 40)))
            text = text[:i] + text[j:]
        elif spans:
            a, b = spans[draw(st.integers(0, len(spans) - 1))]
            if kind == "del_token":
                text = text[:a] + text[b:]
            elif kind == "dup_token":
                text = text[:b] + " " + text[a:b] + text[b:]
            elif kind == "rep_token":
                text = text[:a] + draw(st.sampled_from(vocab)) + text[b:]
            elif kind == "ins_token":
                text = text[:a] + draw(st.sampled_from(vocab)) + " " + text[a:]
            else:
                c, d = spans[draw(st.integers(0, len(spans) - 1))]
                if (a, b) > (c, d):
                    (a, b), (c, d) = (c, d), (a, b)
                if b <= c:
                    text = text[:a] + text[c:d] + text[b:c] + text[a:b] + text[d:]
    return text


@settings(FUZZ, max_examples=150)
@given(mutated(list(BUILTINS.values())))
def test_mutated_builtin_sources_fail_cleanly(text):
    outcome(text, "mutated.pp")


def _csv_bases() -> list[str]:
    out = []
    for name, params in [("1f1b", {"P": 2, "M": 3}), ("gpipe", {"P": 3, "M": 2}),
                         ("interleaved_1f1b", {"P": 2, "V": 2, "M": 2}), ("looped_bfs", {"P": 2, "V": 2, "M": 2})]:
        p = load_text(BUILTINS[name], f"{name}.pp", params=params)
        out.append(to_torch_csv(p, "compute").dumps())
        out.append(to_torch_csv(p, "comms").dumps())
    out.append("0F0,,0B0\r\n,1F0,1B0\r\n")  # idle cells
    out.append('"(0F0;1B1)OVERLAP_F_B",0UNSHARD,0F1,0B0,0B1,0RESHARD\r\n')
    return out


CSV_BASES = _csv_bases()
CELL = re.compile(r"[^,\r\n]+|,|\r?\n")
CSV_VOCAB = sorted({m.group() for t in CSV_BASES for m in CELL.finditer(t)}
                   | {"", '"', ",", "\n", "0BW0", "0F", "F0", "-1F0", "0X0", "(0F0;)GROUP", "((0F0))GROUP",
                      "0F0 ", " 1B0", "00F00", "0UNSHARD0", "(0SEND_F0;1RECV_F0)GROUP", "9F9"})


def _csv_read_back(text: str):
    csv = read_torch_csv(text, "m.csv")
    again = read_torch_csv(csv.dumps(), "again.csv")
    assert again.rows == csv.rows  # what we write reads back as the same cells
    assert again.dumps() == csv.dumps()
    return csv


@settings(FUZZ, max_examples=150)
@given(mutated(CSV_BASES, tokens=CELL, vocab=CSV_VOCAB))
def test_mutated_csv_texts_fail_cleanly(text):
    try:
        csv = _csv_read_back(text)
    except SchedcError as err:
        assert_located(err, text, "m.csv")
        return
    try:
        p = csv.to_program()
    except SchedcError as err:
        assert_located(err, text, "m.csv")
        return
    p2 = outcome(text, "m.csv", "torch-csv")  # the API path agrees, and checks the program
    assert p2 is not None and p2.ranks == p.ranks


def _ir_bases() -> list[str]:
    out = []
    for name, params in [("1f1b", {"P": 2, "M": 2}), ("interleaved_1f1b", {"P": 2, "V": 2, "M": 2})]:
        p = load_text(BUILTINS[name], f"{name}.pp", params=params)
        out.append(dumps_ir(p))
        out.append(dumps_ir(lower(p)))
    return out


IR_BASES = _ir_bases()
JSON_VALUES = st.one_of(st.none(), st.booleans(), st.integers(-2, 3), st.sampled_from([1.5, 10**30, "x", "0F0", ""]),
                        st.lists(st.integers(-1, 3), max_size=3), st.builds(dict),
                        st.builds(lambda: [["0F0"]]))  # fresh objects: a shared one could be put inside itself


@st.composite
def mutated_ir(draw) -> str:
    data = json.loads(draw(st.sampled_from(IR_BASES)))
    for _ in range(draw(st.integers(1, 3))):
        key = draw(st.sampled_from(sorted(data) if isinstance(data, dict) else ["<all>"]))
        how = draw(st.sampled_from(["set", "delete", "list-item", "drop-item"]))
        if not isinstance(data, dict) or key == "<all>":
            data = draw(JSON_VALUES)
        elif how == "set":
            data[key] = draw(JSON_VALUES)
        elif how == "delete":
            del data[key]
        elif isinstance(data[key], list) and data[key]:
            i = draw(st.integers(0, len(data[key]) - 1))
            if how == "drop-item":
                del data[key][i]
            else:
                data[key][i] = draw(JSON_VALUES)
    return json.dumps(data)


@FEW
@given(st.one_of(mutated_ir(), mutated(IR_BASES, max_edits=2)))
def test_mutated_ir_json_fails_cleanly(text):
    outcome(text, "m.json", "ir-json")


# ---------------------------------------------------------------------------------------------
# Inputs found by hand (while writing these tests) that must be clean errors, not crashes or hangs
# ---------------------------------------------------------------------------------------------
IR_OK = {"format": "schedc-ir", "schedule": "a", "ranks": 1, "stages": 1, "microbatches": 1, "placement": [0],
         "actions": [["0F0", "0B0"]]}
BIG = "9" * 5000
KNOWN = {
    "pp-string-bad-escape": ("pp", 'schedule a(P = 1, M = 1) {\n  require P >= 1 else "bad \\q escape"\n'
                                   '  rank r { F(0, 0) B(0, 0) }\n}\n'),
    "pp-string-tab": ("pp", 'schedule a(P = 1, M = 1) {\n  require P >= 1 else "a\tb"\n  rank r { F(0, 0) B(0, 0) }\n}\n'),
    "pp-int-5000-digits": ("pp", f"schedule a(P = {BIG}) {{\n  rank r {{ }}\n}}\n"),
    "pp-literal-5000-digits": ("pp", f"schedule a {{\n  rank 0: {BIG}F0\n}}\n"),
    "pp-rank-5000-digits": ("pp", f"schedule a {{\n  rank {BIG}: 0F0\n}}\n"),
    "csv-cell-5000-digits": ("torch-csv", f"{BIG}F0\n"),
    "ir-list": ("ir-json", "[]"),
    "ir-string": ("ir-json", '"schedc-ir"'),
    "ir-short-placement": ("ir-json", json.dumps({**IR_OK, "stages": 2, "actions": [["0F0", "1F0"]]})),
    "ir-ranks-vs-rows": ("ir-json", json.dumps({**IR_OK, "ranks": 3})),
    "ir-params-list": ("ir-json", json.dumps({**IR_OK, "params": []})),
    "ir-action-int": ("ir-json", json.dumps({**IR_OK, "actions": [[1]]})),
    "ir-annotations-list": ("ir-json", json.dumps({**IR_OK, "annotations": []})),
    "ir-microbatches-str": ("ir-json", json.dumps({**IR_OK, "microbatches": "1"})),
}


@pytest.mark.parametrize("fmt,text", list(KNOWN.values()), ids=list(KNOWN))
def test_known_bad_inputs_fail_cleanly(fmt, text):
    name = "known" + EXT[fmt]
    try:
        p = load_text(text, name, fmt)
    except SchedcError as err:
        assert_located(err, text, name)
        return
    report = schedc.check(p)  # accepted: then checking must not crash either
    report.render()
    json.dumps(report.to_dict())


@pytest.mark.parametrize("text", [
    "schedule a(P = 1) {\r  rank r { F(0, 0) B(0, 0) } } oops\n",
    "schedule a(P = 1) {\x0c\n  rank r { F(0, 0) B(0, 0) } } oops\n",
    "# caf\u00e9 \u2028 note\nschedule a(P = 1) {\n  rank r { F(0, 0) B(0, 0) } } oops\n",
], ids=["lone-CR-in-whitespace", "form-feed-in-whitespace", "U+2028-in-a-comment"])
def test_error_quotes_the_line_it_points_at(text):
    """The caret line quotes the line the error's line number names (lines end at \\n, \\r\\n or a
    lone \\r: the lone-CR text's error is on its line 2)."""
    with pytest.raises(SchedcError) as info:
        load_text(text, "ws.pp")
    assert_located(info.value, text, "ws.pp", exact_quote=True)


HUGE = {  # small files that declare (or imply) a huge number of (stage, microbatch) cells
    "csv": ("torch-csv", "0F" + "1" + "0" * 30 + "\n"),  # one cell naming microbatch 10**30
    "pp": ("pp", "schedule a {\n  stages 1000\n  microbatches 1000000\n  ranks 1\n  rank 0: 0F0 0B0\n}\n"),
    "json": ("ir-json", json.dumps({**IR_OK, "microbatches": 10**30})),
}


def test_huge_declared_sizes_do_not_hang(tmp_path):
    """Each is rejected (too large) or checked (actions missing) in seconds, not by looping over every
    (stage, microbatch) pair. The three run at once, under a memory cap, killed after 5 s."""
    procs = {}
    for key, (fmt, text) in HUGE.items():
        src = tmp_path / ("big" + EXT[fmt])
        src.write_text(text, encoding="utf-8", newline="")
        script = textwrap.dedent(f"""
            import resource, sys
            resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30))
            from schedc.cli import main
            sys.exit(main(["check", {str(src)!r}]))
        """)
        procs[key] = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE,
                                      stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 5
    slow, results = [], {}
    for key, proc in procs.items():
        try:
            out, err = proc.communicate(timeout=max(0.1, deadline - time.monotonic()))
            results[key] = (proc.returncode, err)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.communicate()
            slow.append(key)
    assert not slow, f"`schedc check` ran for more than 5 s on the {', '.join(slow)} input(s): " + \
        "; ".join(repr(HUGE[k][1][:70]) for k in slow)
    for key, (code, err) in results.items():
        assert code in (1, 2), (key, code, err)
        assert "Traceback" not in err


CLI_EDGES = [
    (["check", "gpipe", "--engine", "z3", "--timeout", "inf"], (0, 2)),
    (["check", "gpipe", "--engine", "z3", "--timeout", "nan"], (2,)),
    (["check", "gpipe", "--memory-limit", "nan"], (2,)),  # a NaN limit would pass every schedule
    (["check", "gpipe", "--param", "P=2", "--memory-limit", "0=nan"], (2,)),
]


@pytest.mark.parametrize("argv,codes", CLI_EDGES, ids=[" ".join(a[2:]) for a, _ in CLI_EDGES])
def test_cli_option_edge_cases(argv, codes):
    code, out, err = _cli(*argv)
    assert code in codes, (code, err)
    assert "Traceback" not in err and "internal error" not in err, err


# ---------------------------------------------------------------------------------------------
# (c) the CLI on mutated files
# ---------------------------------------------------------------------------------------------
def _cli(*argv):
    out, err = io.StringIO(), io.StringIO()
    code = main(list(argv), out, err)
    return code, out.getvalue(), err.getvalue()


def _expected_check_code(text: str, name: str, fmt: str) -> int | None:
    try:
        p = load_text(text, name, fmt)
    except SchedcError:
        return 2
    if not small(p):
        return None
    return 0 if schedc.check(p).ok else 1


@FEW
@given(st.one_of(
    mutated(list(BUILTINS.values())).map(lambda t: ("pp", t)),
    mutated(CSV_BASES, tokens=CELL, vocab=CSV_VOCAB).map(lambda t: ("torch-csv", t)),
    st.sampled_from(list(BUILTINS.values())).map(lambda t: ("pp", t)),
))
def test_cli_on_mutated_files_exits_cleanly(case):
    fmt, text = case
    expected = _expected_check_code(text, "x" + EXT[fmt], fmt)
    if expected is None:
        event("too big for the CLI test")
        return
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / ("input" + EXT[fmt])
        path.write_text(text, encoding="utf-8", newline="")
        runs = [
            ("check", str(path)),
            ("check", "--json", str(path)),
            ("check", "--semantics", "eager", str(path)),
            ("export", "--to", "ir-json", str(path)),
            ("export", "--to", "torch-csv", "--level", "compute", str(path)),
            ("compile", str(path), "-o", str(Path(tmp) / "build")),
        ]
        for argv in runs:
            code, out, err = _cli(*argv)
            assert code in (0, 1, 2), (argv, code, err)
            assert "Traceback" not in err and "internal error" not in err, (argv, err)
            if argv[0] == "check":
                if "--semantics" not in argv:
                    assert code == expected, (argv, code, expected, err, out)
                if "--json" in argv:
                    rows = [json.loads(line) for line in out.splitlines()]
                    assert len(rows) == 1 and rows[0]["ok"] == (code == 0)
            if argv[0] == "compile":
                built = Path(tmp) / "build"
                if code == 0:
                    assert any(built.glob("*.json"))
                elif code == 1:
                    assert not built.exists() or not any(built.iterdir()), "a failing compile wrote files"
        if expected == 0:
            code, out, err = _cli("export", "--to", "torch-csv", str(path))
            if code == 2 and "routes" in err:  # torch's CSV has no routes (DualPipe): refused, and says so
                return
            assert code == 0, err
            assert schedc.check(read_torch_csv(out).to_program()).ok


@FEW
@given(st.one_of(mutated_ir(), mutated(IR_BASES, max_edits=2)))
def test_cli_on_mutated_ir_json_exits_cleanly(text):
    try:
        p = load_text(text, "x.json", "ir-json")
        if all(type(x) is int for x in (p.num_stages, p.num_microbatches)) and not small(p):
            event("too big for the CLI test")
            return
    except Exception:  # noqa: BLE001 - the CLI must cope with it all the same
        pass
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "input.json"
        path.write_text(text, encoding="utf-8")
        for argv in [("check", str(path)), ("check", "--json", str(path)),
                     ("export", "--to", "torch-csv", str(path))]:
            code, out, err = _cli(*argv)
            assert code in (0, 1, 2), (argv, code, err)
            assert "Traceback" not in err and "internal error" not in err, (argv, err)


OPTIONS = {
    "--semantics": ["rendezvous", "eager", "bounded:1", "bounded:0", "bounded:-1", "bounded:x", "bounded:", "lazy", ""],
    "--memory-limit": ["3", "0", "-1", "0.5", "nan", "inf", "0=1,1=2", "99=1", "x", "1=", "=1", "0=1,0=2", ""],
    "--param": ["P=2", "M=3", "V=2", "P=0", "M=-1", "X=1", "P=1.5", "P=", "=3", "P=2=3", "M=99999999999999999999"],
    "--timeout": ["5", "0", "-1", "0.001", "nan", "inf", "x"],
    "--engine": ["native", "z3", "cvc5"],
    "--sweep": ["P=1..2", "M=2..1", "M=0..1", "X=1..2", "P=a..b", "P=1..2..3", "M=1..3"],
    "--format": ["pp", "torch-csv", "ir-json"],
    "--notation": ["current", "legacy", "x"],
}
COMMANDS = {"check": ["--json"], "compile": ["--force"], "export": ["--to=torch-csv", "--to=ir-json", "--level=compute"]}


@FEW
@given(st.sampled_from(sorted(COMMANDS)), st.sampled_from(["gpipe", "1f1b", "interleaved_1f1b", "no-such", "."]),
       st.lists(st.sampled_from(sorted(OPTIONS)).flatmap(lambda k: st.tuples(st.just(k), st.sampled_from(OPTIONS[k]))),
                max_size=4),
       st.data())
def test_cli_options_fail_cleanly(command, target, options, data):
    """Odd option values are usage errors (2), never internal errors (4) or tracebacks."""
    with tempfile.TemporaryDirectory() as tmp:
        argv = [command, target, "--param", "P=2", "--param", "M=2"]
        for key, value in options:
            if command != "check" and key == "--sweep":
                continue
            if command == "export" and key in ("--semantics", "--memory-limit", "--timeout", "--engine"):
                continue
            argv += [key, value]
        argv += data.draw(st.lists(st.sampled_from(COMMANDS[command]), max_size=1, unique=True), label="flags")
        if command == "export" and not any(a.startswith("--to") for a in argv):
            argv.append("--to=ir-json")
        if command == "compile":
            argv += ["-o", str(Path(tmp) / "out")]
        code, out, err = _cli(*argv)
        assert code in (0, 1, 2, 3), (argv, code, err)
        assert "Traceback" not in err and "internal error" not in err, (argv, err)
        if code == 3:  # "the solver gave up" only comes from the solver
            assert "z3" in argv, argv


# ---------------------------------------------------------------------------------------------
# bench/fuzz.py: the long-running fuzzer, run small here
# ---------------------------------------------------------------------------------------------
def _bench_fuzz():
    import importlib.util
    path = Path(__file__).resolve().parent.parent / "bench" / "fuzz.py"
    spec = importlib.util.spec_from_file_location("schedc_bench_fuzz", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# What the fuzzer found and is not fixed yet, let through a short run by signature (each with a
# test of its own, marked xfail).
KNOWN_OPEN: dict = {}  # none open: the findings below are fixed


def test_bench_fuzz_short_run_has_no_internal_errors_hangs_or_partial_files(tmp_path, capsys):
    """A seeded run of every target, commands included (plan and diagnose too): each input is
    counted in one class, and none is an internal error, a hang or a partial file (but for the open
    findings above). The seed gives a few inputs of each newer kind: importer names (DeepSpeed's
    here: Megatron-Core takes 5 s to import), --profile files, setup files edited at their keys,
    JSON and pickled Flight Recorder dumps, and pickles that would run code."""
    fuzz = _bench_fuzz()
    # (seed 1: the draws depend on the built-ins, and with dualpipe.pp seed 0 drew no pickle that runs code)
    code = fuzz.main(["--examples", "260", "--seeds", "8", "--seed", "1", "--importers", "deepspeed", "--json",
                      "--out", str(tmp_path)])
    out = capsys.readouterr().out
    report = json.loads(out.strip().splitlines()[-1])
    assert report["inputs"] == 260 and sum(report["per_target"].values()) == 260
    assert sum(report["classes"].values()) == 260 and set(report["classes"]) == set(fuzz.CLASSES)
    assert set(report["per_target"]) == set(fuzz.TARGETS), report["per_target"]
    assert out.startswith("schedc fuzz (random): 260 inputs in ")
    used = report["features"]
    assert {"importer", "profile", "setup", "setup keys", "dump json", "dump pickle", "dump code"} <= set(used), used
    bad = [f for f in report["distinct_failures"] if not any(known(f) for known in KNOWN_OPEN.values())]
    assert not bad, out
    assert code == (1 if report["failures"] else 0)
    assert report["outcomes"].get("run stopped where the ranks would start", 0) + \
        report["outcomes"].get("run exit 0", 0) > 0, "no `schedc run` got past its checks"


def test_bench_fuzz_counts_each_class_and_saves_a_reproducer(tmp_path, monkeypatch):
    """The worker puts an input past its cap in `hang`, one that kills the worker or raises in
    `internal`, and an unlocated error in `invalid`; each distinct failure gets a folder."""
    from schedc.errors import SchedcError as Error
    fuzz = _bench_fuzz()

    def die(text):
        os._exit(3)

    def unlocated(text):
        fuzz._located(Error("csv", "no location"), "fuzz.pp")

    def boom(text):
        raise KeyError("stage")

    def eat(text):
        block = b"\x01" * (400 << 20)  # resident, and held while it waits
        time.sleep(30)
        return str(len(block))
    for name, fn in {"sleep": lambda text: time.sleep(30), "die": die, "boom": boom, "unlocated": unlocated,
                     "eat": eat}.items():
        monkeypatch.setitem(fuzz.API, name, fn)
    fz = fuzz.Fuzzer(tmp_path, memory_cap_mb=200)
    got = {}
    try:
        for t in ["parse", "sleep", "parse", "die", "boom", "boom", "unlocated", "eat", "pp"]:
            fz.cap = 1.5 if t == "sleep" else 30.0  # the memory cap must stop `eat`, not the clock
            got[t] = fz.one({"target": t, "text": "schedule a {"})
    finally:
        fz.close()
    assert got == {"parse": "ok", "sleep": "hang", "die": "internal", "boom": "internal", "unlocated": "invalid",
                   "eat": "hang", "pp": "ok"}
    assert fz.count == 9 and fz.per_class == {"ok": 3, "hang": 2, "internal": 3, "invalid": 1}
    assert len(fz.failures) == 5 and fz.failures[next(s for s in fz.failures if "KeyError" in s)]["count"] == 2
    assert any("memory cap" in f["detail"] for f in fz.failures.values())
    folders = sorted(p.name for p in tmp_path.iterdir())
    assert len(folders) == 5 and all((tmp_path / f / "repro.sh").is_file() for f in folders), folders


def _classify(fuzz, argv, written, code=0, out="", before=None, why=False):
    before = {"input.pp": b"x"} if before is None else before
    cls, detail = fuzz.check_command({"target": argv[0], "argv": argv}, code, out, "", before, {**before, **written})
    return (cls, detail) if why else cls


def test_bench_fuzz_judges_the_files_a_command_writes():
    fuzz = _bench_fuzz()
    svg = b'<svg xmlns="http://www.w3.org/2000/svg" width="1" height="1"></svg>'
    assert _classify(fuzz, ["viz", "input.pp", "-o", "out/x.svg"], {"out/x.svg": svg}) == "ok"
    assert _classify(fuzz, ["viz", "input.pp", "-o", "out/x.svg"], {"out/x.svg": svg[:-3]}) == "invalid"
    assert _classify(fuzz, ["viz", "input.pp", "-o", "out/x.svg"], {"out/.x.svg.k2j.tmp": b""}) == "partial"
    assert _classify(fuzz, ["viz", "input.pp", "-o", "out/x.svg"], {"out/x.svg": svg}, code=2) == "partial"
    assert _classify(fuzz, ["viz", "input.pp", "-o", "out/x.svg"], {}, code=4) == "internal"
    assert _classify(fuzz, ["compile", "input.pp", "-o", "out"], {"out/a.svg": svg}, code=1) == "partial"
    assert _classify(fuzz, ["compile", "input.pp", "-o", "out", "--force"], {"out/a.svg": svg}, code=1) == "ok"
    assert _classify(fuzz, ["compile", "input.pp", "-o", "out"], {"out/a.svg": svg}) == "invalid"  # no IR
    assert _classify(fuzz, ["compile", "input.pp", "-o", ".."], {}) == "ok"  # (seed 83: outside the folder)
    ir = dumps_ir(load_text(BUILTINS["gpipe"], "gpipe.pp")).encode()
    assert _classify(fuzz, ["compile", "input.pp", "-o", "out"], {"out/a.svg": svg, "out/a.json": ir}) == "ok"
    cls, why = _classify(fuzz, ["compile", "input.pp", "-o", "out"],
                         {"out/a.svg": svg, "out/a.json": ir, "out/a_program.py": b"def f(:"}, why=True)
    assert cls == "invalid" and "Python cannot parse" in why
    assert _classify(fuzz, ["sim", "input.pp", "--json"], {}, out='{"makespan": NaN}\n') == "invalid"
    assert _classify(fuzz, ["sim", "input.pp", "--json"], {}, out='{"makespan": null}\n') == "ok"
    assert _classify(fuzz, ["sim", "input.pp", "--json"], {}, code=1) == "invalid"  # no JSON at all
    stopped = fuzz.check_command({"target": "run", "argv": ["run", "zbv", "--json"]}, 0, "", "", {}, {}, stopped=True)
    assert stopped[0] == "ok"  # (seed 89: run's JSON comes after the ranks, which the fuzzer never starts)
    assert _classify(fuzz, ["check", "input.pp", "--", "--json"], {}, code=2, out="text\n") == "ok"  # a file name
    assert _classify(fuzz, ["sim", "input.pp", "--trace", "t"], {"t": b'{"traceEvents": [], "x": Infinity}'}) == \
        "invalid"
    assert _classify(fuzz, ["export", "input.pp", "--to", "ir-json"], {}, out='{"format": "schedc-ir"') == "invalid"
    dot = b'digraph "a" {\n\tr0s0 [label="0F0"]\n\tr0s0 -> r0s1 [color="#000000"]\n}\n'
    assert _classify(fuzz, ["viz", "input.pp", "--dag", "-o", "g.dot"], {"g.dot": dot}) == "ok"
    injected = dot.replace(b'label="0F0"', b'label="a\\\\" URL="javascript:x" x="y"')
    assert _classify(fuzz, ["viz", "input.pp", "--dag", "-o", "g.dot"], {"g.dot": injected}) == "invalid"
    pwned = ["diagnose", "dumps", "--schedule", "a.pp"]  # a pickled dump that ran code
    assert _classify(fuzz, pwned, {"dumps/PWNED": b""}, code=2) == "invalid"
    assert _classify(fuzz, pwned, {}, code=2) == "ok"
    html = b"<html><script>var d = 1;</script><script>x = '<!--<script>'</script></html>"
    assert _classify(fuzz, ["viz", "input.pp", "-o", "p.html"], {"p.html": html}) == "invalid"


def test_bench_fuzz_stops_run_before_any_rank_starts(tmp_path):
    """`schedc run` without --print-torchrun goes through its checks and stops where it would launch."""
    fuzz = _bench_fuzz()
    fz = fuzz.Fuzzer(tmp_path)
    try:
        cls = fz.one({"target": "run", "argv": ["run", "1f1b", "--param", "P=2,M=2", "--model",
                                                "examples.mlp:build_stages", "--steps", "1"], "files": {}})
        printed = fz.one({"target": "run", "argv": ["run", "gpipe", "--model", "examples.mlp:build_stages",
                                                    "--print-torchrun", "-o", "out"], "files": {}})
    finally:
        fz.close()
    assert (cls, printed) == ("ok", "ok"), fz.failures
    assert set(fz.outcomes) <= {"run stopped where the ranks would start", "run exit 0", "run exit 2"}


# ---------------------------------------------------------------------------------------------
# Findings of the fuzzer, fixed: each its reproducer
# ---------------------------------------------------------------------------------------------
DP_DEADLOCK = """schedule dp(P = 2, M = 2) {
  stages P
  place loop
  replicas 2
  rank r, replica d { if r == d { UNSHARD(r) } for m in 0 .. M { F(r, m) } for m in 0 .. M { B(r, m) }
                      if r != d { UNSHARD(r) } }
}
"""


@pytest.mark.parametrize("argv,codes", [(["viz", "dp.pp", "-o", "x.svg"], (0,)), (["viz", "dp.pp", "-o", "x.html"], (0,)),
                                        (["check", "dp.pp", "--viz", "x.svg"], (1,)),
                                        (["compile", "dp.pp", "--force", "-o", "build"], (1,))],
                         ids=["viz-svg", "viz-html", "check-viz", "compile-force"])
def test_a_data_parallel_deadlock_across_replicas_is_drawn(tmp_path, monkeypatch, argv, codes):
    """The deadlock's ranks are the job's (replica 1's rank 0 is rank 2), while the picture draws one
    pipeline: its step grid is the job's, as `check` prints it (was an IndexError, exit 4)."""
    import xml.etree.ElementTree as ET
    monkeypatch.chdir(tmp_path)
    (tmp_path / "dp.pp").write_text(DP_DEADLOCK, encoding="utf-8")
    code, out, err = _cli(*argv)
    assert code in codes and "internal error" not in err, (code, err)
    for svg in tmp_path.rglob("*.svg"):
        ET.parse(svg)
    assert list(tmp_path.rglob("*.svg")) or list(tmp_path.rglob("*.html"))


# ---------------------------------------------------------------------------------------------
# Findings of the fuzzer, each with its reproducer (all fixed)
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("argv", [("check", "x" * 300), ("compare", "x" * 300), ("prove", "y" * 300),
                                  ("run", "1f1b", "--model", "examples.mlp:build_stages", "--trace", "x" * 300),
                                  # seed 73: diagnose's DUMP (Path.is_dir raised OSError, exit 4)
                                  ("diagnose", "x" * 300, "--schedule", "1f1b"),
                                  ("diagnose", "x" * 300 + "0", "--schedule", "1f1b")])
def test_an_input_name_longer_than_the_file_system_allows_is_a_clean_error(argv):
    code, out, err = _cli(*argv)
    assert code == 2 and "Traceback" not in err and "internal error" not in err, (code, err)
    assert argv[0] != "diagnose" or "error[io]: cannot read 'xxx" in err, err


def _bounded(argv, seconds=30, memory=1 << 30):
    """`schedc ARGV` in a process under a memory cap; (exit code, stderr), or None past `seconds`."""
    script = textwrap.dedent(f"""
        import resource, sys
        resource.setrlimit(resource.RLIMIT_AS, ({memory}, {memory}))
        from schedc.cli import main
        sys.exit(main({list(argv)!r}))
    """)
    try:
        done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=seconds)
    except subprocess.TimeoutExpired:
        return None
    return done.returncode, done.stderr


def test_synth_under_a_huge_memory_limit_stays_small_and_ends():
    result = _bounded(["synth", "--param", "P=3,M=4", "--memory-limit", "1e308", "--time-limit", "1"])
    assert result is not None and result[0] == 0, result


def test_synth_refuses_to_write_a_cost_the_language_cannot_state(tmp_path):
    out = tmp_path / "s.pp"
    code, _, err = _cli("synth", "--param", "P=2,M=2", "--cost", "out=1e308", "-o", str(out), "--time-limit", "1")
    assert code == 2 and "beyond what a schedule can state" in err and "Traceback" not in err
    assert not out.exists()


def test_synth_writes_a_schedule_that_checks_under_its_own_limit(tmp_path):
    out = tmp_path / "s.pp"
    code, _, err = _cli("synth", "--param", "P=2,M=4", "--cost", "act=2,weight=1,out=0.1", "--memory-limit", "2",
                        "-o", str(out), "--time-limit", "1")
    assert code == 0, err
    report = schedc.check(load_text(out.read_text(encoding="utf-8"), "s.pp"))
    assert report.ok, report.render()


# ---- the third campaign's findings (seed 23, 43,762 inputs) ----
def test_prove_reports_a_name_the_rank_body_never_defines_at_its_place(tmp_path):
    path = tmp_path / "stay.pp"
    path.write_text("schedule s(P = 2, M = 2) {\n  stages P\n  place loop\n  rank stay {\n"
                    "    let warm = min(P - 1 - r, M)\n    for m in 0 .. M { F(stay, m) }\n"
                    "    for m in 0 .. M { B(stay, m) }\n  }\n}\n")
    code, _, err = _cli("prove", str(path), "--memory", "0", "--timeout", "2")
    assert code == 2 and "stay.pp:5:28: error[unknown-name]: unknown name 'r'" in err, err


def test_a_compute_level_data_parallel_job_over_its_memory_limit_is_drawn(tmp_path):
    from schedc.interop.ir_json import dumps_ir
    path = tmp_path / "dp.json"
    path.write_text(dumps_ir(load_text("schedule dp(P = 2, M = 2) { stages P\n place loop\n replicas 2\n"
                                       " rank r, replica d { for m in 0 .. M { F(r, m) } for m in 0 .. M { B(r, m) } } }",
                                       "dp.pp")))
    code, _, err = _cli("viz", str(path), "-o", str(tmp_path / "x.svg"), "--semantics", "eager", "--memory-limit", "1")
    assert code == 0 and (tmp_path / "x.svg").exists() and "Traceback" not in err, err


def test_a_certificate_whose_memory_is_not_an_object_is_refused(tmp_path):
    cert = tmp_path / "cert.json"
    cert.write_text('{"schedule": "1f1b", "timing": {}, "memory": true}')
    code, _, err = _cli("prove", "1f1b", "--certificate", str(cert), "--timeout", "1")
    assert code == 2 and "error[certificate]" in err and "each an object" in err, err


def test_a_sweeps_work_bound_is_the_one_documented_and_keeps_it_to_seconds():
    """Fourth campaign (seed 29, 59,868 inputs): `check zb_h1 --param P=512 --forward-only --sweep
    M=1..200` ran past the 30 s cap within the old bound (50M actions; 7 us an action with every
    finding reported). Issue 35: within the next bound (2M actions) a sweep with `--model` took 34 s
    beside a loaded machine (the detailed checks, 14 us an action) and `--sweep P=1..100000` 11 s
    alone (per rank). The bound counts work units of about 1 us (instances, ranks, actions, detailed
    actions), 12M of them, and docs/limits.md says so."""
    from pathlib import Path

    from schedc.commands.check import MAX_SWEEP_WORK
    assert MAX_SWEEP_WORK == 12_000_000
    limits = (Path(__file__).resolve().parent.parent / "docs" / "limits.md").read_text()
    assert f"| 100,000; {MAX_SWEEP_WORK:,} units |" in limits
