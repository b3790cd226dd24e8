"""schedc: a compiler and verifier for pipeline-parallel training schedules.

Public API: `load(path_or_name, params=None) -> Program`, `check(program, ...) -> Report`,
`to_torch_csv(program, level=...) -> str`, `from_torch_csv(path) -> Program`, and the IR types;
`schedc.torch.schedule(...)` gives torch's pipeline runtime (imported on its own: it needs torch).
Submodules load lazily so `import schedc` stays fast.
"""
from __future__ import annotations

__version__ = "0.1.0"

_LAZY = {
    "load": ("schedc.api", "load"),
    "check": ("schedc.api", "check"),
    "to_torch_csv": ("schedc.api", "to_torch_csv"),
    "from_torch_csv": ("schedc.api", "from_torch_csv"),
    "Report": ("schedc.report", "Report"),
    "Program": ("schedc.ir", "Program"),
    "Action": ("schedc.ir", "Action"),
    "Compound": ("schedc.ir", "Compound"),
    "Op": ("schedc.ir", "Op"),
    "SchedcError": ("schedc.errors", "SchedcError"),
}

__all__ = sorted(_LAZY)


def __getattr__(name: str):
    if name in _LAZY:
        import importlib
        module, attr = _LAZY[name]
        value = getattr(importlib.import_module(module), attr)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'schedc' has no attribute {name!r}")
