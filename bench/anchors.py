"""schedc's per-rank memory beside the anchors of the field: Megatron-LM's theoretical memory (its
formulas re-derived in tests/anchor_models.py), Korthikanti et al. 2022's closed forms, DeepSpeed's
ZeRO estimators, llm-analysis and Calculon (called live where they import), and a real torch layer
measured. Prints the two tables of docs/units.md, "Anchors" (tests/test_anchors.py holds the page to
this output).

    python bench/anchors.py [--calculon PATH] [--site PATH] [--no-measure]

--calculon: a checkout of github.com/calculon-ai/calculon (its PyPI name belongs to another project);
--site: a folder on sys.path first, e.g. one with `pip install --no-deps --target DIR llm-analysis==0.2.2
fire==0.5.0` (llm-analysis needs fire at import and pins an old transformers it does not use here);
--no-measure: skip the measured layer (about 20 s on a 2-core machine).
"""
from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--calculon", help="a checkout of Calculon")
    ap.add_argument("--site", action="append", default=[], help="a folder to import anchors from (repeatable)")
    ap.add_argument("--no-measure", action="store_true", help="leave the measured layer out")
    args = ap.parse_args(argv)
    sys.path[:0] = [str(ROOT), str(ROOT / "tests"), *args.site]
    if args.calculon:
        os.environ["CALCULON_PATH"] = args.calculon
    import anchor_models as A
    layer_columns = dict(A.LAYER_COLUMNS)
    if args.no_measure:
        layer_columns.pop("measured")
    print(states_table(A))
    print(layers_table(A, layer_columns))
    return 0


def states_table(A) -> str:
    """Model states on one rank (its first pipeline stage), GiB."""
    rows = []
    for job in A.JOBS:
        cells = A.state_cells(job)
        rows.append([job.label] + [c if c is not None else "(not run)" for c in cells.values()])
    return A.markdown(["job (bf16, Adam)"] + list(A.STATE_COLUMNS), rows)


def layers_table(A, columns) -> str:
    """One layer's activations for one microbatch (s = 8192, b = 1, bf16, sdpa), MiB."""
    rows = []
    for case in A.LAYERS:
        cells = A.layer_cells(case, columns)
        rows.append([case.label] + [c if c is not None else "(not run)" for c in cells.values()])
    return A.markdown(["layer (s 8192, b 1)"] + list(columns), rows)


if __name__ == "__main__":
    sys.exit(main())
