"""The runtime a lowered program runs on: torch.distributed point-to-point, one handler per action.

`table` (pure Python) reads and validates a program's action table; `interpreter` runs one rank's
table for a training step; `watchdog` stops a stuck run with a report; `trace` records each rank's
events for `schedc run --trace`; `entry` is the `main()` a generated program calls; `launch` starts
local ranks for `schedc run` and `backends` says whether a backend can run here (both pure Python,
torch only to ask about NCCL). Submodules load lazily: importing this package does not import torch.
"""
from __future__ import annotations

_LAZY = {
    "PipelineInterpreter": ("schedc.runtime.interpreter", "PipelineInterpreter"),
    "StepFailure": ("schedc.runtime.interpreter", "StepFailure"),
    "Watchdog": ("schedc.runtime.watchdog", "Watchdog"),
    "Table": ("schedc.runtime.table", "Table"),
    "load_table": ("schedc.runtime.table", "load_table"),
    "main": ("schedc.runtime.entry", "main"),
}

__all__ = sorted(_LAZY)


def __getattr__(name: str):
    if name in _LAZY:
        import importlib
        module, attr = _LAZY[name]
        value = getattr(importlib.import_module(module), attr)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'schedc.runtime' has no attribute {name!r}")
