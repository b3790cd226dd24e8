"""How long `schedc plan` takes to rank a real search, against issue #34's goal of 10 s for 1,024
GPUs and a 70B-class model: CPU seconds, layouts, configurations (layout and schedule), and how many
were simulated and checked.

    python bench/plan.py            # llama3-8b on 64 GPUs and llama3-70b on 1,024
    python bench/plan.py --quick    # the first only
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from schedc.commands.plan import DEFAULT_SCHEDULES  # noqa: E402
from schedc.hardware import describe  # noqa: E402
from schedc.plan import plan  # noqa: E402

GOAL_S = 10.0
CASES = [("llama3-8b", 64, 256), ("llama3-70b", 1024, 1024)]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="the first case only")
    cases = CASES[:1] if p.parse_args().quick else CASES
    print(f"{'model':12} {'GPUs':>5} {'batch':>5} {'CPU s':>7} {'layouts':>7} {'configs':>7} {'simulated':>9}"
          f" {'checked':>7} {'/ goal':>7}  best")
    for model, gpus, batch in cases:
        setup = describe(model=model, hardware="h100-80gb")
        start = time.process_time()
        result = plan(setup, gpus, batch, list(DEFAULT_SCHEDULES), top=5)
        cpu = time.process_time() - start
        best = result.choices[0] if result.choices else None
        shown = (f"pp {best.layout.pp} tp {best.layout.tp} cp {best.layout.cp} dp {best.layout.dp} "
                 f"{best.row.name} {best.step:.3f} s") if best else "none fits"
        print(f"{model:12} {gpus:5} {batch:5} {cpu:7.2f} {result.layouts:7} {result.configurations:7}"
              f" {result.simulated:9} {result.checked:7} {cpu / GOAL_S:7.2f}  {shown}")


if __name__ == "__main__":
    main()
