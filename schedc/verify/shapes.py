"""A blocking shape exchange before every communication step (`nccl+shapes`, `gloo+shapes`).

Megatron with variable sequence lengths sends each step's tensor shapes first, in one
`batch_isend_irecv` it waits for at once, then posts the data (`_communicate_shapes`): a rank stops
at each communication step until its partners reach theirs, so its runs are the program's runs
under `rendezvous`. This finds the deadlock of that exchange; docs/semantics.md, "Shape exchange".
"""
from __future__ import annotations

from ..ir import Program
from ..rules.semantics import RENDEZVOUS, Semantics
from .channels import as_paired
from .deadlock import Deadlock, find_deadlock
from .mesh import job, joins_ranks
from .symmetry import Classes, real_deadlock

MEGATRON = ("Megatron exchanges shapes this way with variable_seq_lengths=True "
            "(megatron/core/pipeline_parallel/p2p_communication.py, _communicate_shapes; NVIDIA/Megatron-LM#5100)")


def shape_exchange_deadlock(program: Program, semantics: Semantics, cls: Classes | None = None) -> Deadlock | None:
    """The deadlock the shape exchange adds to `program` under a backend with `shapes`, or None.
    The shapes of a step pair as its data do (the k-th on a channel with the k-th), so the ranks
    progress as under rendezvous; the data posted after them adds no wait rendezvous lacks. With
    `cls`, `program` is a job reduced to one replica per class, and the deadlock is the real job's."""
    if not semantics.shapes:
        return None
    paired, _ = as_paired(program, semantics)
    if cls is not None:
        flat, cons = job(paired, RENDEZVOUS)
        found = find_deadlock(flat, RENDEZVOUS, cons=cons)
        if found is None:
            return None
        return real_deadlock(found, cls, cons)
    if joins_ranks(paired):
        flat, cons = job(paired, RENDEZVOUS)
        return find_deadlock(flat, RENDEZVOUS, cons=cons)
    return find_deadlock(paired, RENDEZVOUS)


def shape_cause(deadlock: Deadlock, semantics: Semantics) -> str:
    """The finding's sentence: the exchange, then the wait cycle it closes."""
    return (f"deadlock under {semantics.base} with a blocking shape exchange before each communication step: each "
            f"rank waits there for its partners' shapes before it posts its data, so {deadlock.cause}")
