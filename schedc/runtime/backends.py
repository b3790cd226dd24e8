"""Whether a torch.distributed backend can run `nproc` local ranks here, asked before any rank starts.

`problem(backend, nproc)` is None when it can, or one line saying why not: torch missing, a build
without distributed support, NCCL without CUDA or with fewer GPUs than local ranks. `schedc run`
asks it in the launching process (torch is imported only for nccl) and each rank asks it again, so
a torchrun launch fails the same way, with one line instead of a traceback. `vouches(semantics,
backend)` says whether a verdict under a semantics holds for a run on a backend.
"""
from __future__ import annotations

import importlib.util


def problem(backend: str, nproc: int) -> str | None:
    """Why `backend` cannot run `nproc` ranks on this machine, or None."""
    if importlib.util.find_spec("torch") is None:
        return "schedc run needs PyTorch, which is not installed here (pip install torch)"
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
    posts and awaits as the backends do, and the semantics nest (docs/semantics.md): rendezvous =>
    nccl => gloo, bounded:K => eager => gloo. So every verdict holds on gloo, and on nccl only one
    under rendezvous or nccl (eager's and gloo's sends need not wait for their stream). (rendezvous
    => nccl asks that each message be grouped on both ends or on neither: a grouped operation and a
    single one are on different NCCL communicators, which only the nccl verdict checks.)"""
    return backend != "nccl" or semantics.split("+")[0] in ("rendezvous", "nccl")  # (nccl+shapes: stricter)


def not_vouched(semantics: str, backend: str) -> str:
    """Why a verdict under `semantics` says nothing about a run on `backend` (see `vouches`)."""
    return (f"a program that completes under {semantics} can hang on {backend}, which runs a rank's "
            "operations with one peer in issue order on one stream; verify under nccl or rendezvous")
