"""Whether a torch.distributed backend can run `nproc` local ranks here, asked before any rank starts.

`problem(backend, nproc)` is None when it can, or one line saying why not: torch missing, a build
without distributed support, NCCL without CUDA or with fewer GPUs than local ranks. `schedc run`
asks it in the launching process (torch is imported only for nccl) and each rank asks it again, so
a torchrun launch fails the same way, with one line instead of a traceback. `vouches(semantics,
backend)` says whether a verdict under a semantics holds for a run on a backend.
"""
from __future__ import annotations

import importlib.util

from ..errors import SchedcError
from ..rules.semantics import Semantics


TORCH_PIN = "2.13.0"  # the torch the test extra pins (pyproject.toml), which the oracle tests compare against
INSTALL_CPU = f"pip install torch=={TORCH_PIN} --index-url https://download.pytorch.org/whl/cpu"


def torch_missing() -> str | None:
    """Why torch cannot be imported here (not installed, or an install whose finder fails), or None."""
    try:
        found = importlib.util.find_spec("torch") is not None
    except (ImportError, ValueError):
        found = False
    if found:
        return None
    return (f"schedc run needs PyTorch, which is not installed here: `{INSTALL_CPU}` installs the CPU build "
            f"schedc is tested with (`pip install 'schedc[torch]'` pulls PyPI's, the CUDA build on Linux)")


def problem(backend: str, nproc: int) -> str | None:
    """Why `backend` cannot run `nproc` ranks on this machine, or None."""
    missing = torch_missing()
    if missing:
        return missing
    if backend != "nccl":  # gloo runs wherever torch.distributed does; the ranks check that
        return None
    import torch
    import torch.distributed as dist
    if not dist.is_available():
        return f"this PyTorch ({torch.__version__}) is built without torch.distributed"
    if not torch.cuda.is_available():
        return (f"--backend nccl needs CUDA GPUs, and this machine has none that PyTorch ({torch.__version__}) "
                "can use; --backend gloo runs on CPUs")
    if not dist.is_nccl_available():
        return f"--backend nccl: this PyTorch ({torch.__version__}) is built without NCCL; use --backend gloo"
    found = torch.cuda.device_count()
    if found < nproc:
        return (f"--backend nccl: {nproc} local rank(s) need one GPU each, and this machine has {found}; "
                "run fewer ranks per node, or --backend gloo")
    return None


def vouches(semantics: str, backend: str) -> bool:
    """Does a program that completes under `semantics` complete when run on `backend`? The runtime
    posts and awaits as the backends do, so this is `Semantics.holds_on` (schedc/rules/semantics.py);
    a verdict under a semantics schedc does not know holds only where every verdict does."""
    on = Semantics.parse(backend)
    try:
        verdict = Semantics.parse(semantics)
    except SchedcError:
        return Semantics.buffered(None).holds_on(on)  # (as the weakest verdict, eager's)
    return verdict.holds_on(on)


def not_vouched(semantics: str, backend: str) -> str:
    """Why a verdict under `semantics` says nothing about a run on `backend` (see `vouches`)."""
    return (f"a program that completes under {semantics} can hang on {backend}, which runs a rank's "
            "operations with one peer in issue order on one stream; verify under nccl or rendezvous")
