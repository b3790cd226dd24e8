"""numpy, imported where it is first used: a small program is checked in plain Python, and a
process that checks one (`schedc check NAME`, a pre-commit hook) does not pay numpy's import.

`from .lazy_numpy import np` in place of `import numpy as np`; module-level arrays become functions.
"""
from __future__ import annotations

from typing import Any


class _Numpy:
    """Stands for the numpy module: the first attribute asked for imports it, and from then on its
    names are this object's own (looked up as fast as a module's)."""

    def __getattr__(self, name: str) -> Any:
        import numpy
        self.__dict__.update(vars(numpy))
        return getattr(numpy, name)


np: Any = _Numpy()
