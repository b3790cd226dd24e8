"""Every example in README.md and docs/*.md runs, and shows what schedc does today.

Each fenced block is one of these (an HTML comment on the line before a block is its marker):

- ```console: `$ schedc ...` lines run in-process (`schedc.cli.main`), in one scratch folder per page,
  in page order. The lines after a command, up to the next `$`, are its output (standard output, then
  standard error): `...` matches anything (doctest's ELLIPSIS); an output that is a JSON object is
  compared as data, where the string "..." matches any value. A command ending in `# exit N` must
  exit N, any other 0. A command with no lines after it has only its exit code checked; `> FILE`
  at its end writes its standard output to FILE.
- ```sh: commands to paste (the quick start): `pip install` parts are what this suite runs in, so
  they are skipped; `schedc` parts run as above; the test command must be the one .ci/run runs.
- ```pp: a schedule; it compiles at its defaults and passes `schedc check`, unless marked
  `<!-- fails: CODE -->`, when `check` must report CODE.
- ```python: runs, in the page's namespace and scratch folder. ```pycon: a doctest, the same way
  (ELLIPSIS, NORMALIZE_WHITESPACE).
- ```toml, ```json: must parse. ```text: outputs and command synopses; a synopsis line
  `schedc COMMAND ...` may name only options COMMAND has.
- `<!-- file: NAME -->` writes the block to NAME in the scratch folder, for the commands after it.
- `<!-- same-as: PATH -->`: the block is the repository's file PATH, which its own test runs.
- `<!-- not-run: why -->`: not run (keep these rare: a multi-process training run, a cluster command).

Besides: the tables of docs/limits.md hold schedc's actual limits, and every page in docs/ is in
mkdocs.yml's nav.
"""
from __future__ import annotations

import doctest
import io
import json
import re
import shlex
import tomllib
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
LANGUAGES = {"console", "sh", "pp", "python", "pycon", "toml", "json", "text"}
FENCE = re.compile(r"^(?P<indent> *)(?P<fence>```+)(?P<lang>[\w+-]*)[ \t]*$")
MARKER = re.compile(r"^\s*<!--\s*(?P<key>file|fails|same-as|not-run):\s*(?P<value>.*?)\s*-->\s*$")
EXIT = re.compile(r"\s#\s*exit\s+(\d+)\s*$")
ELLIPSIS = "..."


@dataclass(frozen=True)
class Block:
    page: Path
    line: int  # of the opening fence, from 1
    lang: str
    text: str
    markers: dict[str, str]

    @property
    def where(self) -> str:
        return f"{self.page.relative_to(ROOT)}:{self.line}"


def blocks(page: Path) -> list[Block]:
    """The fenced blocks of a page, with the marker on the line before each (if any)."""
    lines = page.read_text(encoding="utf-8").splitlines()
    out, i = [], 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        indent, fence = len(m["indent"]), m["fence"]
        end = next((j for j in range(i + 1, len(lines)) if lines[j].strip() == fence), None)
        assert end is not None, f"{page.relative_to(ROOT)}:{i + 1}: a fence that is never closed"
        body = "\n".join(line[indent:] for line in lines[i + 1:end]) + "\n"
        markers, j = {}, i - 1
        while j >= 0 and (marker := MARKER.match(lines[j])):
            markers[marker["key"]] = marker["value"]
            j -= 1
        out.append(Block(page, i + 1, m["lang"], body, markers))
        i = end + 1
    return out


def _run(argv: list[str]) -> tuple[int, str]:
    """Run schedc in-process: (exit code, standard output then standard error). `> FILE` at the end
    writes standard output to FILE instead."""
    from schedc.cli import main
    target = None
    if len(argv) > 2 and argv[-2] == ">":
        argv, target = argv[:-2], argv[-1]
    out, err = io.StringIO(), io.StringIO()
    code = main(argv, out, err)
    if target is not None:
        Path(target).write_text(out.getvalue(), encoding="utf-8")
        out = io.StringIO()
    return code, (out.getvalue() + err.getvalue()).replace("\r\n", "\n")


def _tidy(text: str) -> str:
    return "\n".join(line.rstrip() for line in text.strip("\n").splitlines()) + "\n"


def _json_matches(want, got) -> bool:
    if want == ELLIPSIS:
        return True
    if isinstance(want, dict):
        return isinstance(got, dict) and want.keys() == got.keys() and all(_json_matches(want[k], got[k]) for k in want)
    if isinstance(want, list):
        return isinstance(got, list) and len(want) == len(got) and all(map(_json_matches, want, got))
    return want == got and type(want) is type(got)


def _output_matches(want: str, got: str) -> bool:
    if want.lstrip().startswith("{"):
        try:
            wanted, printed = json.loads(want), json.loads(got)
        except json.JSONDecodeError:
            pass
        else:
            return _json_matches(wanted, printed)
    return doctest.OutputChecker().check_output(_tidy(want), _tidy(got), doctest.ELLIPSIS)


def _schedc_argv(command: str, where: str) -> list[str]:
    argv = shlex.split(command, comments=True)
    assert "|" not in argv and ">" not in argv[:-2], f"{where}: no pipes, and `> FILE` only at the end: {command}"
    if argv[:3] == ["python", "-m", "schedc"]:
        return argv[3:]
    assert argv[0] == "schedc", f"{where}: a console example runs schedc (mark others not-run): {command}"
    return argv[1:]


def _commands(text: str) -> list[tuple[str, list[str]]]:
    """(command, output lines) pairs of a console block; `\\` continues a command."""
    out: list[tuple[str, list[str]]] = []
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i]
        assert line.startswith("$ "), f"a console block starts with a command, not {line!r}"
        command = line[2:]
        while command.endswith("\\"):
            i += 1
            command = command[:-1] + " " + lines[i].strip()
        i += 1
        output = []
        while i < len(lines) and not lines[i].startswith("$ "):
            output.append(lines[i])
            i += 1
        out.append((command, output))
    return out


def _console(block: Block) -> None:
    for n, (command, output) in enumerate(_commands(block.text)):
        where = f"{block.where} (command {n + 1}: {command})"
        m = EXIT.search(command)
        expected = int(m.group(1)) if m else 0
        code, got = _run(_schedc_argv(command, where))
        assert code == expected, f"{where}: exit {code}, the page says {expected}\n{got}"
        if output and not _output_matches("\n".join(output), got):
            raise AssertionError(f"{where}: the output differs from the page's\n--- the page:\n"
                                 + "\n".join(output) + "\n--- schedc:\n" + got)


@lru_cache(maxsize=1)
def ci_script() -> str:
    return (ROOT / ".ci" / "run").read_text(encoding="utf-8")


def _sh(block: Block) -> None:
    for line in block.text.splitlines():
        if not line.strip():
            continue
        if "pytest" in line:
            assert line.strip() in ci_script().splitlines(), f"{block.where}: .ci/run does not run {line!r}"
            continue
        for part in (p.strip() for p in line.split("&&")):
            argv = shlex.split(part)
            if "pip" in argv[:3] and "install" in argv:
                assert "-e" in argv or argv[-3:] == [f"torch=={_torch_pin()}", "--index-url", CPU_INDEX], \
                    f"{block.where}: installs something other than this project or the pinned CPU torch: {part}"
                continue
            code, got = _run(_schedc_argv(part, block.where))
            assert code == 0, f"{block.where}: `{part}` exits {code}\n{got}"


CPU_INDEX = "https://download.pytorch.org/whl/cpu"  # PyTorch's index of its CPU builds


def _torch_pin() -> str:
    """The torch version the test extra pins (pyproject.toml)."""
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]["optional-dependencies"]
    return next(d.split("==")[1] for d in extras["test"] if d.startswith("torch=="))


def _pp(block: Block) -> None:
    import schedc
    from schedc.api import load_text
    try:
        program = load_text(block.text, block.markers.get("file", block.where))
    except schedc.SchedcError as e:
        report = {"ok": False, "errors": [{"code": e.code}], "deadlock": None, "mismatches": [],
                  "memory_violations": []}
    else:
        report = schedc.check(program).to_dict()
    codes = {e["code"] for e in report["errors"]}
    codes |= {code for code, key in (("deadlock", "deadlock"), ("mismatch", "mismatches"),
                                     ("memory", "memory_violations")) if report[key]}
    if "fails" in block.markers:
        assert block.markers["fails"] in codes, f"{block.where}: check should report {block.markers['fails']}: {codes}"
    else:
        assert report["ok"], f"{block.where}: the schedule fails its checks: {codes}"


def _pycon(block: Block, namespace: dict) -> None:
    test = doctest.DocTestParser().get_doctest(block.text, namespace, block.where, str(block.page), block.line)
    report = io.StringIO()
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    result = runner.run(test, out=report.write, clear_globs=False)
    assert result.failed == 0, report.getvalue()


@lru_cache(maxsize=None)
def _help(command: str) -> str:
    return _run([command, "--help"])[1]


def _synopses(block: Block) -> None:
    for line in block.text.splitlines():
        words = line.split()
        if words[:1] != ["schedc"] or len(words) < 2 or not words[1].isidentifier():
            continue
        help_text = _help(words[1])
        for option in re.findall(r"(--[a-z][a-z-]*)", line):
            assert re.search(rf"{option}\b", help_text), f"{block.where}: `schedc {words[1]}` has no {option}"


def _run_block(block: Block, namespace: dict, scratch: Path) -> None:
    if "not-run" in block.markers:
        assert block.markers["not-run"], f"{block.where}: say why a block is not run"
        return
    if "same-as" in block.markers:
        path = block.markers["same-as"]
        assert block.text.strip() == (ROOT / path).read_text(encoding="utf-8").strip(), f"{block.where}: differs from {path}"
        return
    if "file" in block.markers:
        (scratch / block.markers["file"]).write_text(block.text, encoding="utf-8")
    if block.lang == "console":
        _console(block)
    elif block.lang == "sh":
        _sh(block)
    elif block.lang == "pp":
        _pp(block)
    elif block.lang == "python":
        exec(compile(block.text, block.where, "exec"), namespace)
    elif block.lang == "pycon":
        _pycon(block, namespace)
    elif block.lang == "toml":
        tomllib.loads(block.text)
    elif block.lang == "json":
        json.loads(block.text)
    elif block.lang == "text":
        _synopses(block)


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_the_examples_of_each_page_run(page, tmp_path, monkeypatch):
    found = blocks(page)
    for block in found:
        assert block.lang in LANGUAGES, f"{block.where}: a block needs one of the languages {sorted(LANGUAGES)}"
    scratch = tmp_path / "work"
    scratch.mkdir()
    (scratch / "examples").symlink_to(ROOT / "examples")  # `--model examples.mlp:build_stages`, as from a clone
    (scratch / "tests").symlink_to(ROOT / "tests")  # the saved Flight Recorder dumps docs/diagnose.md reads
    monkeypatch.chdir(scratch)
    monkeypatch.syspath_prepend(str(scratch))
    namespace: dict = {"__name__": f"docs_{page.stem}"}
    for block in found:
        _run_block(block, namespace, scratch)


def test_examples_are_rarely_left_unrun():
    every = [b for page in PAGES for b in blocks(page)]
    unrun = [b.where for b in every if "not-run" in b.markers]
    assert len(every) >= 60 and len(unrun) <= 6, unrun


def test_the_readme_test_command_is_the_one_ci_runs():
    readme = blocks(ROOT / "README.md")
    commands = [line for b in readme if b.lang == "sh" for line in b.text.splitlines() if "pytest" in line]
    assert commands == ["python -m pip install -e '.[test,importers]' && python -m pytest -q"], commands
    assert commands[0] in ci_script().splitlines()


# ---- the limits page holds schedc's limits ----
def _table(page: str, header: str) -> list[list[str]]:
    text = (ROOT / "docs" / page).read_text(encoding="utf-8")
    table = text[text.index(header):].split("\n\n", 1)[0].splitlines()[2:]
    return [[cell.strip() for cell in row.strip().strip("|").split("|")] for row in table]


def test_the_limits_page_states_schedcs_limits():
    from schedc import compiler, expr, hardware, importers, ir, lint, parse, report, simulate
    from schedc.inputs import MAX_DIGITS
    from schedc.lower import codegen
    from schedc.viz.dag import MAX_DAG_STEPS
    limits = {row[0]: row[1] for row in _table("limits.md", "| what | limit |")}
    expected = {
        "actions a schedule expands to": f"{ir.MAX_ACTIONS:,}",
        "actions of the lowered program (its sends and receives too)": f"{ir.MAX_LOWERED_ACTIONS:,}",
        "loop iterations": f"{compiler.MAX_ITERATIONS:,}",
        "evaluation steps (loop iterations times the operations of their bodies, and `let` function evaluations)":
            f"{expr.MAX_STEPS:,}",
        "ranks": f"{compiler.MAX_RANKS:,}",
        "stages, microbatches": f"{compiler.MAX_STAGES:,} each",
        "stage x microbatch pairs (`check`)": f"{lint.MAX_PAIRS:,}",
        "source text": f"{parse.MAX_SOURCE_BYTES:,} characters",
        "nesting of the text": f"{parse.MAX_DEPTH} levels",
        "nesting of a `let` function, through the functions it calls": f"{expr.MAX_CALL_NESTING} levels",
        "integers in an option or a cost file's key": f"{MAX_DIGITS} digits",
        "findings listed per code": f"{lint.MAX_PER_CODE}",
        "dependency graph (`viz --dag`)": f"{MAX_DAG_STEPS:,} steps",
        "actions checked in detail": f"{report.MAX_DETAILED_ACTIONS:,}",
        "actions timed step by step (`sim`, `viz`, `compare`, `compile`'s picture)": f"{simulate.MAX_SIMULATED_ACTIONS:,}",
        "actions of a runnable program (`compile`'s `<name>_program.py`, `run`)": f"{codegen.MAX_RUNNABLE_ACTIONS:,}",
        "a framework's schedule (`deepspeed:NAME`, `megatron:NAME`): P x M x V":
            "; ".join(f"{name} {importers.max_work(name):,}" for name in importers.CHARACTERS),
        "a model's layers (`[model] layers`)": f"{hardware.MAX_LAYERS:,}",
    }
    assert compiler.MAX_STAGES == compiler.MAX_MICROBATCHES
    for what, limit in expected.items():
        assert limits.get(what) == limit, f"docs/limits.md says {what}: {limits.get(what)}; schedc's is {limit}"


def test_the_limits_page_states_the_commands_own_limits():
    from schedc import plan
    from schedc.prove import prover
    from schedc.synth import problem, search
    from schedc.verify import solver
    from schedc.viz import scene
    from schedc.interop import chrome_trace
    text = " ".join((ROOT / "docs" / "limits.md").read_text(encoding="utf-8").split())
    for phrase in (f"checks at most {prover.BOUNDED_SETTINGS} small settings",
                   f"`schedc plan` spends at most {plan.MAX_PLAN_WORK:,} work units on its search",
                   f"{plan.UNITS_LAYER} a layer of the model for each layout bounded",
                   f"{plan.UNITS_TRACED:,} a rank, microbatch and chunk for each framework's schedule traced",
                   f"{plan.UNITS_SHAPED} an action for each schedule's program expanded and bounded by its shape",
                   f"{plan.UNITS_PROGRAM:,} and {plan.UNITS_SIMULATED} an action for each schedule simulated, "
                   f"{plan.UNITS_CHECKED} an action for each one checked",
                   f"Z3 resource units (default {prover.PROOF_UNITS:,}; each query its share)",
                   f"on its search (default {search.SEARCH_UNITS:,})",
                   f"at most {solver.DEADLOCK_UNITS:,} units on a query of at most {solver.MAX_STEPS:,} steps",
                   f"may take at most {solver.DEADLOCK_MEMORY // 2**30} GiB of memory beyond the command's",
                   f"at most {problem.MAX_RANKS} ranks, {problem.MAX_MICROBATCHES} microbatches and "
                   f"{problem.MAX_JOBS:,} actions",
                   f"more than {scene.MAX_BLOCKS:,} steps or {scene.MAX_ROWS} ranks",
                   f"| steps in a trace (`sim --trace`) | {chrome_trace.MAX_TRACE_STEPS:,} |"):
        assert phrase in text, f"docs/limits.md should say: {phrase}"


def test_every_page_is_in_the_nav():
    nav = (ROOT / "mkdocs.yml").read_text(encoding="utf-8")
    for page in sorted((ROOT / "docs").glob("*.md")):
        assert re.search(rf":\s*{re.escape(page.name)}\s*$", nav, re.M), f"{page.name} is not in mkdocs.yml's nav"


# ---- the site: pictures shown, wide outputs wrapped ----
def test_the_pictures_page_shows_the_gallerys_pictures():
    """Each picture a page embeds from docs/images/ is there (mkdocs serves docs/ only) and is the
    gallery's own (viz/), so it is regenerated with it: copy it again when this fails."""
    shown = {page.name: re.findall(r"!\[[^\]]+\]\(images/([^)]+)\)", page.read_text(encoding="utf-8"))
             for page in PAGES[1:]}
    assert len(shown["pictures.md"]) >= 4, shown["pictures.md"]
    for page, names in shown.items():
        for name in names:
            copy, drawn = ROOT / "docs" / "images" / name, ROOT / "viz" / name
            assert copy.is_file(), f"docs/{page} shows images/{name}, which is not there"
            assert copy.read_bytes() == drawn.read_bytes(), f"docs/images/{name} differs from viz/{name}: cp viz/{name} docs/images/"


def test_wide_outputs_wrap_on_the_site():
    site = (ROOT / "mkdocs.yml").read_text(encoding="utf-8")
    assert re.search(r"^extra_css:\n  - css/wrap\.css$", site, re.M), "mkdocs.yml does not load docs/css/wrap.css"
    css = (ROOT / "docs" / "css" / "wrap.css").read_text(encoding="utf-8")
    rule = re.search(r"(?s)pre, pre code[^{]*\{(.*?)\}", css)
    assert rule is not None and "white-space: pre-wrap" in rule.group(1) and "overflow-wrap: anywhere" in rule.group(1)
