"""`schedc prove`: arguments in, the proof (or refutation, or unknown) out, as text or JSON.

Exit codes: 0 proved, 1 refuted, 3 unknown, 2 bad input. `--json` prints `Proof.to_dict()`, whose
`certificate` re-checks with `--certificate FILE` (no search: Z3 checks the given functions).
"""
from __future__ import annotations

import sys

from ..errors import EXIT_FAIL, EXIT_OK, EXIT_UNKNOWN
from ..options import clock_limit, solver_limits, units
from ..outputs import dumps_json
from ..progress import progress
from ..solver import ctrl_c


def add_arguments(q) -> None:
    q.add_argument("input", metavar="FILE|NAME", help="a .pp schedule or a built-in name")
    q.add_argument("--assume", action="append", default=[], metavar="COND",
                   help="an assumption on the parameters, e.g. 'P >= 2' (repeatable; the schedule's own "
                        "`require`s are assumed too)")
    q.add_argument("--memory", metavar="EXPR",
                   help="the live-activation bound to prove, in the parameters, the rank variable and the lets "
                        "at the top of the rank body, e.g. 'min(P - r, M)' (default: the simplest closed form "
                        "that fits small settings)")
    q.add_argument("--certificate", metavar="FILE",
                   help="re-check a saved certificate (the JSON of `--json`, or its `certificate`) instead of "
                        "searching for one")
    from .prover import PROOF_UNITS
    solver_limits(q, "the proof's", PROOF_UNITS, "--timeout", "give up with `unknown (time limit)`")
    q.add_argument("--json", action="store_true", help="print one JSON object")
    q.add_argument("-q", "--quiet", action="store_true",
                   help="no progress lines (they go to standard error, and only when it is a terminal)")


def run(args, stdout, stderr) -> int:
    from .prover import prove, read_certificate
    clock_limit(args.timeout, "--timeout")
    units(args.budget, "--budget")
    certificate = read_certificate(args.certificate) if args.certificate else None
    log = progress(stderr, quiet=args.quiet or args.json)
    with ctrl_c():
        proof = prove(args.input, assumptions=tuple(args.assume), memory=args.memory, timeout=args.timeout,
                      budget=args.budget, certificate=certificate, log=log)
    if args.json:
        stdout.write(dumps_json(as_json(proof, args.input)) + "\n")
    else:
        stdout.write(render(proof) + "\n")
    return {"proved": EXIT_OK, "refuted": EXIT_FAIL}.get(proof.verdict, EXIT_UNKNOWN)


def as_json(proof, given: str) -> dict:
    """`prove --json`'s object: the command's `file` (the input as given), `ok` (true proved, false
    refuted, null unknown) and `errors` (docs/cli.md, "JSON"), then `Proof.to_dict()`. A refutation's
    errors are `check`'s at the failing setting (the compile error there, if it fails to compile); a
    memory bound that the counted peaks pass, one `memory` error saying so."""
    ok = {"proved": True, "refuted": False}.get(proof.verdict)
    return {"file": given, **proof.to_dict(), "ok": ok, "errors": _refutation_errors(proof, given)}


def _refutation_errors(proof, given: str) -> list[dict]:
    from .. import api
    from ..errors import SchedcError
    cex = proof.counterexample
    if proof.verdict != "refuted" or cex is None:
        return []
    if cex.get("property") == "memory":
        error = {"code": "memory", "message": cex.get("summary") or "the memory bound fails"}
        return [{**error, "rank": cex["rank"]} if "rank" in cex else error]
    try:  # (the setting check failed at, checked again: its findings as `check --json` gives them)
        report = api.check(api.load(given, cex["params"]))
    except SchedcError as exc:
        return [d.to_dict() for d in exc.diagnostics]
    errors: list[dict] = report.to_dict()["errors"]
    return errors


def render(proof) -> str:
    from .search import setting_text
    assumed = ", ".join(proof.assumptions) or "no assumptions"
    if proof.verdict == "refuted":
        cex = proof.counterexample
        setting = setting_text(cex["params"])
        within = f" with {cex['within']}" if cex.get("within") else ""
        which = "smallest failing setting" if cex.get("smallest", True) else \
            "a failing setting, not shown to be the smallest: the search for a smaller one ran out of its budget"
        if not cex["params"]:  # nothing smaller to look for
            lines = [f"{proof.schedule}: refuted at its one setting (it has no parameters{within}; {cex['property']})"]
        else:
            lines = [f"{proof.schedule}: refuted at {setting} ({which}{within}; {cex['property']})"]
        if cex.get("summary"):
            lines.append("  " + cex["summary"])
        if cex.get("report"):
            lines += ["  " + ln for ln in cex["report"].splitlines()]
        return "\n".join(lines)
    every = bool((proof.bounded or {}).get("every_setting"))
    proved = f"{proof.schedule}: proved for every setting with {assumed} (and the schedule's requires)"
    if every:
        proved = (f"{proof.schedule}: proved at its one setting (it has no parameters), by checking it"
                  if not proof.bounded["parameters"] else f"{proved}, by checking each of them")
    head = {"proved": proved, "unknown": f"{proof.schedule}: unknown: {proof.reason}"}[proof.verdict]
    lines = [head]
    for part in proof.parts:
        lines.append(f"  {part.name:<14} {part.status:<8} {part.detail}")
    cert = proof.certificate
    if proof.verdict == "proved" and cert:
        lines.append("  certificate (`--json` writes it; `--certificate FILE` re-checks it):")
        lines.append("    timing, per action: increases along every rank's order and every dependency"
                     + (" (checked in Z3's nonlinear integer arithmetic)" if cert.get("arithmetic") == "nonlinear"
                        else ""))
        for k, st in cert["statements"].items():
            lines.append(f"      line {st['line']:<4} {st['action']:<28} t = {affine(cert['timing'].get(k, {}))}")
        how = {"capacity": "a rank never holds more than (its stages) x (microbatches) activations, and the "
                           "bound is at least that",
               "rank order": "the forwards up to each forward less the frees before it, counted in the rank's "
                             "order"}.get(cert["memory"].get("argument"),
                                          "forwards and frees in microbatch order per stage, counted exactly")
        lines.append(f"    memory: the bound {cert['memory']['bound']} needs no certificate ({how})")
    if proof.bounded:
        lines.append("  " + bounded_text(proof.bounded, proof.verdict))
    lines.append(f"  {proof.seconds:.1f} s, {proof.units:,} Z3 resource units")
    return "\n".join(lines)


def bounded_text(b: dict, verdict: str) -> str:
    """The line on the settings the sweep checked concretely: how many and how large, or that the
    schedule has one (no parameters), or that none of the sweep's box is inside the assumptions."""
    from ..ir import count_of
    from .prover import BOUNDED_MAX
    from .search import ONE_SETTING
    params, n = b.get("parameters", ()), b["settings"]
    label = ("checked concretely, every setting there is" if b.get("every_setting") else
             "also checked concretely" if verdict == "proved" else "bounded check, not a proof")
    if not params:
        return f"{label}: {ONE_SETTING}, clean" if n else \
            f"{label}: none: {ONE_SETTING} is outside its requires"
    if not n:
        return (f"{label}: none: no setting with each parameter at most {BOUNDED_MAX} satisfies the "
                "assumptions and requires")
    largest = ", ".join(f"{k} <= {v}" for k, v in b["largest"].items())
    return f"{label}: {count_of(n, 'setting')} ({largest}), {'clean' if n == 1 else 'all clean'}"


def affine(coeffs: dict) -> str:
    """`{"1": -2, "P": 1, "m": 2}` as `P + 2*m - 2`."""
    parts: list[str] = []
    const = coeffs.get("1", 0)
    for name, c in coeffs.items():
        if name == "1" or not c:
            continue
        term = name if abs(c) == 1 else f"{abs(c)}*{name}"
        parts.append((" - " if c < 0 else " + ") + term if parts else ("-" if c < 0 else "") + term)
    if const or not parts:
        parts.append((" - " if const < 0 else " + ") + str(abs(const)) if parts else str(const))
    return "".join(parts)


if __name__ == "__main__":  # pragma: no cover
    sys.exit("use `schedc prove`")
