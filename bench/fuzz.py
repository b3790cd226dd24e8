"""Fuzz schedc's inputs: the parser, the compiler and checks, the PyTorch CSV reader, and the CLI.

Inputs are generated (schedule text from the grammar via schedc.strategies.sources, literal-form
schedules and CSVs of random valid programs, the built-in schedules and their CSVs) and mutated
(characters and tokens inserted, deleted, repeated, swapped). A crash is anything but a SchedcError
whose every diagnostic has a location (file:line:col): another exception, an unlocated SchedcError,
a check that raises, or a CLI run that exits 4 or prints a traceback. Prints the count of inputs per
target, crashes (each kept under --crashes DIR), inputs per second, and the slowest inputs.

    python bench/fuzz.py                          # 100,000 inputs, seeded random mutations
    python bench/fuzz.py --examples 2000 --seed 3
    python bench/fuzz.py --engine atheris         # libFuzzer's coverage-guided mutations

Exit code 0 when nothing crashed, 1 otherwise.
"""
from __future__ import annotations

import argparse
import io
import json
import os
import random
import re
import signal
import sys
import tempfile
import time
import traceback
from collections import Counter
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")

TARGETS = ("parse", "pp", "csv", "cli")
WEIGHTS = (30, 30, 30, 10)  # the CLI writes a file and runs a process's worth of wiring: fewer
MAX_CELLS = 100_000  # check programs of at most this many actions and (stage, microbatch) pairs
SLOW_S = 30.0  # an input that takes longer is stopped and reported as a hang
TOKEN = re.compile(r"[A-Za-z_0-9]+|\.\.|//|[<>=!]=|->|\S")
CELL = re.compile(r"[^,\r\n]+|,|\r?\n")
EXTRA_TOKENS = ["0", "-1", "999999", "4611686018427387904", "1.5", "overlap", "group", "SEND_F", '"', "#",
                "{", "}", "(", ")", ";", "rank", "0:", "0F0", "(0F0;0B0)OVERLAP_F_B", "next", "order", "greedy"]
EXTRA_CELLS = ["", '"', ",", "\n", "0BW0", "0F", "F0", "-1F0", "0X0", "(0F0;)GROUP", "((0F0))GROUP", "0F0 ",
               " 1B0", "00F00", "0UNSHARD0", "(0SEND_F0;1RECV_F0)GROUP", "9F9"]
CHARS = list("{}()[],;:=+-*/%<>!?.#\"\\ \n\t\r0123456789FBIWrmPMV_") + ["\x00", "\u00e9", "\u2028", "\ufeff"]


class Hang(Exception):
    """An input ran past SLOW_S seconds."""


# ---------------------------------------------------------------------------------------------
# Seed inputs
# ---------------------------------------------------------------------------------------------
def _draw(strategy, n: int, seed: int) -> list:
    """n examples of a strategy, drawn by Hypothesis (generation only, no database)."""
    from hypothesis import HealthCheck, Phase, given, seed as hseed, settings
    out: list = []
    if n < 1:
        return out

    @hseed(seed)
    @settings(max_examples=n, phases=[Phase.generate], database=None, deadline=None,
              suppress_health_check=list(HealthCheck))
    @given(strategy)
    def collect(x):
        out.append(x)
    collect()
    return out


def literal_text(p) -> str:
    """A program in the literal form (`rank 0: 0F0 ...`), as a .pp file."""
    from schedc.ir import format_step
    lines = [f"schedule {p.name} {{", f"  stages {p.num_stages}", f"  microbatches {p.num_microbatches}",
             "  place [" + ", ".join(map(str, p.placement)) + "]"]
    lines += [f"  rank {r}: " + " ".join(format_step(s) for s in steps) for r, steps in enumerate(p.ranks)]
    return "\n".join(lines + ["}"]) + "\n"


def seeds(seed: int, n: int = 150) -> dict[str, list[str]]:
    """Valid and grammar-derived texts to start from: {"pp": [...], "csv": [...]}."""
    from schedc.api import load
    from schedc.interop.torch_csv import to_torch_csv
    from schedc.resources import builtin_schedules
    from schedc.strategies import lowered_programs, programs, sources
    pp = [path.read_text(encoding="utf-8") for path in builtin_schedules().values()]
    csv = []
    for name, params in [("1f1b", {"P": 2, "M": 3}), ("gpipe", {"P": 3, "M": 2}), ("zbv", {"P": 2, "M": 4}),
                         ("interleaved_1f1b", {"P": 2, "V": 2, "M": 2}), ("dualpipev", {"P": 2, "M": 4})]:
        p = load(name, params)
        csv += [to_torch_csv(p, "compute").dumps(), to_torch_csv(p, "comms").dumps()]
    csv += ["0F0,,0B0\r\n,1F0,1B0\r\n", '"(0F0;1B1)OVERLAP_F_B",0UNSHARD,0F1,0B0,0B1,0RESHARD\r\n']
    generated = _draw(programs(overlap=True, placements=("loop", "vshape", "table")), n, seed)
    lowered = _draw(lowered_programs(placements=("loop", "vshape", "table")), n // 2, seed + 1)
    pp += [literal_text(p) for p in generated + lowered]
    csv += [to_torch_csv(p, "compute").dumps() for p in generated[: n // 2]]
    csv += [to_torch_csv(p, "comms").dumps() for p in lowered]
    # from_lark takes ~0.1 s a text: a few dozen are enough to start from (mutations do the rest)
    pp += _draw(sources(), n // 4, seed + 2) + _draw(sources(literals="any"), n // 10, seed + 3)
    return {"pp": pp, "csv": csv}


# ---------------------------------------------------------------------------------------------
# Mutations
# ---------------------------------------------------------------------------------------------
def mutate(text: str, rng: random.Random, tokens: re.Pattern, vocab: list[str], max_edits: int = 4) -> str:
    """1..max_edits random edits of characters and tokens."""
    for _ in range(rng.randint(1, max_edits)):
        if not text:
            text = rng.choice(CHARS)
            continue
        kind = rng.choice(("del_char", "ins_char", "rep_char", "del_range", "del_token", "dup_token",
                           "swap_tokens", "rep_token", "ins_token"))
        i = rng.randrange(len(text))
        if kind == "del_char":
            text = text[:i] + text[i + 1:]
        elif kind == "ins_char":
            text = text[:i] + rng.choice(CHARS) + text[i:]
        elif kind == "rep_char":
            text = text[:i] + rng.choice(CHARS) + text[i + 1:]
        elif kind == "del_range":
            text = text[:i] + text[min(len(text), i + rng.randint(1, 40)):]
        else:
            spans = [m.span() for m in tokens.finditer(text)]
            if not spans:
                continue
            a, b = rng.choice(spans)
            if kind == "del_token":
                text = text[:a] + text[b:]
            elif kind == "dup_token":
                text = text[:b] + " " + text[a:b] + text[b:]
            elif kind == "rep_token":
                text = text[:a] + rng.choice(vocab) + text[b:]
            elif kind == "ins_token":
                text = text[:a] + rng.choice(vocab) + " " + text[a:]
            else:
                (a, b), (c, d) = sorted([(a, b), rng.choice(spans)])
                if b <= c:
                    text = text[:a] + text[c:d] + text[b:c] + text[a:b] + text[d:]
    return text


# ---------------------------------------------------------------------------------------------
# Targets: each returns an outcome name, or raises (a crash)
# ---------------------------------------------------------------------------------------------
def _located(err, name: str) -> None:
    for d in err.diagnostics:
        if d.span is None:
            raise AssertionError(f"a SchedcError without a location: {d.render()}")
        if d.span.file != name:
            raise AssertionError(f"a diagnostic names {d.span.file!r}, not {name!r}")
    err.render()
    json.dumps([d.to_dict() for d in err.diagnostics])


def _exercise(p) -> str:
    """Check a loaded program (when small): check must not raise, and its report must render."""
    import schedc
    if p.num_actions > MAX_CELLS or p.num_stages * p.num_microbatches > MAX_CELLS:
        return "loaded (too big to check)"
    report = schedc.check(p)
    report.render()
    report.summary()
    json.dumps(report.to_dict())
    return "checks ok" if report.ok else "checks fail"


def run_parse(text: str) -> str:
    from schedc.errors import SchedcError
    from schedc.parse import parse
    try:
        parse(text, "fuzz.pp")
    except SchedcError as err:
        _located(err, "fuzz.pp")
        return f"error {err.code}"
    return "parsed"


def run_pp(text: str) -> str:
    from schedc.api import load_text
    from schedc.errors import SchedcError
    try:
        p = load_text(text, "fuzz.pp")
    except SchedcError as err:
        _located(err, "fuzz.pp")
        return f"error {err.code}"
    return _exercise(p)


def run_csv(text: str) -> str:
    from schedc.errors import SchedcError
    from schedc.interop.torch_csv import read_torch_csv
    try:
        table = read_torch_csv(text, "fuzz.csv")
        again = read_torch_csv(table.dumps(), "fuzz.csv")
        if again.rows != table.rows:
            raise AssertionError("a CSV written back does not read as the same cells")
        p = table.to_program()
    except SchedcError as err:
        _located(err, "fuzz.csv")
        return f"error {err.code}"
    return _exercise(p)


class Cli:
    """`schedc check FILE` in process, on a file in one scratch folder."""

    def __init__(self):
        self.dir = Path(tempfile.mkdtemp(prefix="schedc-fuzz-"))

    def __call__(self, text: str, fmt: str) -> str:
        from schedc.api import load_text
        from schedc.cli import main
        from schedc.errors import SchedcError
        try:  # the CLI would check a huge program in full: leave those to the API targets
            p = load_text(text, "x." + fmt, {"pp": "pp", "csv": "torch-csv"}[fmt])
            if p.num_actions > MAX_CELLS or p.num_stages * p.num_microbatches > MAX_CELLS:
                return "cli skipped (too big)"
        except SchedcError:
            pass
        path = self.dir / f"input.{fmt}"
        path.write_bytes(text.encode("utf-8", "surrogatepass"))
        out, err = io.StringIO(), io.StringIO()
        code = main(["check", "--json", str(path)], out, err)
        errors = err.getvalue()
        if code not in (0, 1, 2, 3) or "Traceback" in errors or "internal error" in errors:
            raise AssertionError(f"schedc check exited {code}:\n{errors}")
        rows = [json.loads(line) for line in out.getvalue().splitlines()]
        if len(rows) != 1 or rows[0]["ok"] is not (code == 0 if code != 3 else None):
            raise AssertionError(f"--json says {rows!r} but the exit code is {code}")
        return f"cli exit {code}"


# ---------------------------------------------------------------------------------------------
# The driver
# ---------------------------------------------------------------------------------------------
class Fuzzer:
    def __init__(self, corpus: dict[str, list[str]], crashes: Path, seed: int):
        self.corpus = corpus
        self.vocab = {"pp": sorted({m.group() for t in corpus["pp"][:40] for m in TOKEN.finditer(t)} | set(EXTRA_TOKENS)),
                      "csv": sorted({m.group() for t in corpus["csv"] for m in CELL.finditer(t)} | set(EXTRA_CELLS))}
        self.crash_dir = crashes
        self.cli = Cli()
        self.rng = random.Random(seed)
        self.count = 0
        self.per_target = Counter()
        self.outcomes = Counter()
        self.crashes: dict[str, tuple[str, str, str]] = {}  # signature -> (target, input, traceback)
        self.crash_count = 0
        self.hangs: list[tuple[float, str, str]] = []
        self.slowest: list[tuple[float, str, str]] = []

    def one(self, target: str, text: str, fmt: str = "pp") -> None:
        """Run one input; `fmt` is the CLI input's kind (pp or csv)."""
        run = {"parse": run_parse, "pp": run_pp, "csv": run_csv, "cli": lambda t: self.cli(t, fmt)}[target]
        self.count += 1
        self.per_target[target] += 1
        t0 = time.perf_counter()
        signal.setitimer(signal.ITIMER_REAL, SLOW_S)
        try:
            outcome = run(text)
            self.outcomes[f"{target}: {outcome}"] += 1
        except Hang:
            self.hangs.append((time.perf_counter() - t0, target, text))
            self.outcomes[f"{target}: HANG"] += 1
        except Exception as exc:  # noqa: BLE001 - a crash: anything but a located SchedcError
            self.crash(target, text, exc)
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
        took = time.perf_counter() - t0
        if len(self.slowest) < 5 or took > self.slowest[-1][0]:
            self.slowest = sorted(self.slowest + [(took, target, text)], key=lambda x: -x[0])[:5]

    def crash(self, target: str, text: str, exc: BaseException) -> None:
        self.crash_count += 1
        self.outcomes[f"{target}: CRASH"] += 1
        tb = traceback.extract_tb(exc.__traceback__)
        where = next((f"{Path(f.filename).name}:{f.lineno}" for f in reversed(tb) if "schedc" in f.filename), "?")
        signature = f"{target} {type(exc).__name__} at {where}"
        if signature not in self.crashes:
            self.crashes[signature] = (target, text, "".join(traceback.format_exception(exc)))
            self.crash_dir.mkdir(parents=True, exist_ok=True)
            stem = re.sub(r"[^A-Za-z0-9_.-]", "_", signature)
            (self.crash_dir / f"{stem}.input").write_bytes(text.encode("utf-8", "surrogatepass"))
            (self.crash_dir / f"{stem}.txt").write_text(self.crashes[signature][2], encoding="utf-8")

    def random_input(self) -> tuple[str, str]:
        rng = self.rng
        target = rng.choices(TARGETS, WEIGHTS)[0]
        kind = "csv" if target == "csv" or (target == "cli" and rng.random() < 0.5) else "pp"
        text = rng.choice(self.corpus[kind])
        if rng.random() < 0.85:  # mostly mutated, some as generated
            text = mutate(text, rng, CELL if kind == "csv" else TOKEN, self.vocab[kind])
        return target, text, kind

    def report(self, seconds: float, engine: str) -> dict:
        return {"engine": engine, "inputs": self.count, "seconds": round(seconds, 2),
                "inputs_per_second": round(self.count / seconds, 1) if seconds else None,
                "crashes": self.crash_count, "distinct_crashes": sorted(self.crashes),
                "hangs": len(self.hangs), "per_target": dict(self.per_target),
                "outcomes": dict(sorted(self.outcomes.items())),
                "slowest": [{"seconds": round(t, 3), "target": tg, "input": x[:120]} for t, tg, x in self.slowest]}


def _alarm(signum, frame):
    raise Hang()


def print_report(rep: dict, crash_dir: Path, stream=sys.stdout) -> None:
    w = stream.write
    w(f"schedc fuzz ({rep['engine']}): {rep['inputs']:,} inputs in {rep['seconds']:.1f} s "
      f"({rep['inputs_per_second']:,.0f} inputs/s); {rep['crashes']} crash(es), {rep['hangs']} hang(s)\n")
    w("  per target: " + ", ".join(f"{k} {v:,}" for k, v in sorted(rep["per_target"].items())) + "\n")
    for k, v in rep["outcomes"].items():
        w(f"    {k:42} {v:>8,}\n")
    for sig in rep["distinct_crashes"]:
        w(f"  CRASH {sig} (input and traceback in {crash_dir})\n")
    w("  slowest: " + "; ".join(f"{s['target']} {s['seconds']} s" for s in rep["slowest"]) + "\n")


def run_random(args, corpus) -> Fuzzer:
    fz = Fuzzer(corpus, Path(args.crashes), args.seed)
    for _ in range(args.examples):
        fz.one(*fz.random_input())
    return fz


def instrumented_imports() -> None:
    """Import schedc's modules under atheris's coverage instrumentation (before anything else
    imports them): everything but the runtime and lowering (torch) and the strategies."""
    import importlib
    import pkgutil

    import atheris
    with atheris.instrument_imports(include=["schedc"]):
        import schedc
        for info in pkgutil.walk_packages(schedc.__path__, "schedc."):
            if not info.name.startswith(("schedc.runtime", "schedc.lower", "schedc.strategies", "schedc.viz")):
                importlib.import_module(info.name)


def run_atheris(args, corpus) -> None:
    """libFuzzer drives: the first byte picks the target (parse, pp, csv, the CLI on a .pp or a
    .csv), the rest is the text (UTF-8, errors replaced). The seed corpus is every seed text under
    each target's byte. After --examples inputs (seeds included) the report is printed and the
    process ends (libFuzzer itself would exit without returning)."""
    import atheris
    fz = Fuzzer(corpus, Path(args.crashes), args.seed)
    seed_dir = Path(tempfile.mkdtemp(prefix="schedc-fuzz-seeds-"))
    lanes = [("parse", "pp"), ("pp", "pp"), ("csv", "csv"), ("cli", "pp"), ("cli", "csv")]
    k = 0
    for t, (target, kind) in enumerate(lanes):
        for text in corpus[kind][:: 1 if target != "cli" else 4]:
            (seed_dir / f"{k:05d}").write_bytes(bytes([t]) + text.encode("utf-8", "surrogatepass"))
            k += 1
    start = time.perf_counter()

    def one(data: bytes) -> None:
        if data:
            target, kind = lanes[data[0] % len(lanes)]
            fz.one(target, data[1:].decode("utf-8", "replace"), kind)
        if fz.count >= args.examples:
            rep = fz.report(time.perf_counter() - start, "atheris")
            sys.stdout.flush()
            print_report(rep, Path(args.crashes))
            if args.json:
                print(json.dumps(rep))
            sys.stdout.flush()
            os._exit(1 if fz.crash_count else 0)

    atheris.Setup([sys.argv[0], f"-runs={args.examples + k + 10}", "-max_len=16384", f"-seed={args.seed + 1}",
                   "-print_final_stats=0", "-close_fd_mask=0", str(seed_dir)], one)
    atheris.Fuzz()


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--examples", type=int, default=100_000, metavar="N", help="inputs to run (default 100,000)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--seeds", type=int, default=150, metavar="K",
                   help="generated programs to start from (and K/4 grammar texts; default 150)")
    p.add_argument("--engine", choices=["random", "atheris"], default="random",
                   help="seeded random mutations (default) or atheris/libFuzzer (pip install atheris)")
    p.add_argument("--crashes", default=str(Path(tempfile.gettempdir()) / "schedc-fuzz-crashes"), metavar="DIR",
                   help="where each distinct crash's input and traceback go")
    p.add_argument("--json", action="store_true", help="also print the report as one JSON line")
    args = p.parse_args(argv)
    if args.examples < 1 or args.seeds < 4:
        p.error("--examples must be at least 1 and --seeds at least 4")
    previous = signal.signal(signal.SIGALRM, _alarm)
    try:
        return _run(p, args)
    finally:
        signal.signal(signal.SIGALRM, previous)


def _run(p, args) -> int:
    if args.engine == "atheris":
        try:
            instrumented_imports()
        except ImportError:
            p.error("atheris is not installed (pip install atheris); use --engine random")
        run_atheris(args, seeds(args.seed, args.seeds))
        return 0  # not reached: libFuzzer exits
    corpus = seeds(args.seed, args.seeds)
    start = time.perf_counter()
    fz = run_random(args, corpus)
    rep = fz.report(time.perf_counter() - start, "random")
    print_report(rep, Path(args.crashes))
    if args.json:
        print(json.dumps(rep))
    return 1 if fz.crash_count else 0


if __name__ == "__main__":
    sys.exit(main())
