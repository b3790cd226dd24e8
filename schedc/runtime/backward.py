"""Split backward: `I` computes the stage's input gradient now, `W` its weight gradients later.

`backward_input` runs autograd only towards the stage input. On the way it records, at each
autograd node where a weight's branch leaves that path (an "intermediate"), the gradient flowing
in (a pre-hook), so `backward_weight` can start from those nodes and compute only the weight
gradients, instead of running the backward a second time from the output (the same idea as
torch.distributed.pipelining's `stage_backward_input` / `stage_backward_weight`). Parameters that
hang off no intermediate (and every parameter of a stage whose input needs no gradient, stage 0)
get theirs from the output in `backward_weight`.
"""
from __future__ import annotations

from collections import defaultdict, deque

import torch
from torch.autograd.graph import GradientEdge


def _node(t: torch.Tensor):
    """The autograd node of a tensor: its grad_fn, or its AccumulateGrad if it is a leaf."""
    if t.grad_fn is not None:
        return t.grad_fn
    if t.requires_grad:
        return t.view_as(t).grad_fn.next_functions[0][0]  # type: ignore[union-attr]  # (a view of a tensor that requires grad has a grad_fn)
    return None


def _reverse_edges(root) -> dict:
    """child -> the nodes that feed gradient into it (towards the output)."""
    rev: dict = defaultdict(list)
    seen, queue = {root}, deque([root])
    while queue:
        node = queue.popleft()
        for child, _ in node.next_functions:
            if child is None:
                continue
            rev[child].append(node)
            if child not in seen:
                seen.add(child)
                queue.append(child)
    return rev


def _towards_output(roots, stop: set, rev: dict) -> tuple[set, set]:
    """Nodes reachable from `roots` walking towards the output, not entering `stop`; and the nodes
    of `stop` where the walk was stopped."""
    closure, hit = set(), set()
    queue: deque = deque()
    for node in roots:
        if node is not None and node not in closure:
            closure.add(node)
            queue.append(node)
    while queue:
        for parent in rev.get(queue.popleft(), ()):
            if parent in closure:
                continue
            if parent in stop:
                hit.add(parent)
                continue
            closure.add(parent)
            queue.append(parent)
    return closure, hit


class _Group:
    __slots__ = ("params", "intermediates", "grads")

    def __init__(self, params, intermediates):
        self.params = params  # AccumulateGrad nodes
        self.intermediates = intermediates  # nodes on the input path that weight branches hang off
        self.grads: list = []


class WeightWork:
    """What `backward_weight` needs: the recorded groups, and the output for the rest."""

    __slots__ = ("groups", "rest", "out", "grad", "param_of")

    def __init__(self, groups, rest, out, grad, param_of):
        self.groups, self.rest, self.out, self.grad, self.param_of = groups, rest, out, grad, param_of


def backward_input(out: torch.Tensor, grad: torch.Tensor, leaf: torch.Tensor | None,  # noqa: C901
                   params: list[torch.Tensor]) -> tuple[torch.Tensor | None, WeightWork]:
    """The gradient of the stage input (None without one), and the work left for W."""
    if leaf is None or not params:
        return None, WeightWork([], list(params), out, grad, {})
    root, start = _node(out), _node(leaf)
    rev = _reverse_edges(root)
    on_path, _ = _towards_output([start], set(), rev)
    param_of = {}
    groups: list[_Group] = []
    by_intermediate: dict = {}  # intermediate -> its group
    rest = []
    for p in params:
        node = _node(p)
        param_of[node] = p
        _, hit = _towards_output([node], on_path, rev)
        if not hit:
            rest.append(p)
            continue
        group = _Group({node}, set(hit))
        for other in {id(g): g for g in (by_intermediate.get(i) for i in hit) if g is not None}.values():
            group.params |= other.params  # weights that share an intermediate form one group
            group.intermediates |= other.intermediates
            groups.remove(other)
        groups.append(group)
        for inter in group.intermediates:
            by_intermediate[inter] = group
    for group in groups:
        group.intermediates = list(group.intermediates)
        group.grads = [None] * len(group.intermediates)
    handles = []
    try:
        for group in groups:
            for i, inter in enumerate(group.intermediates):
                def record(grad_outputs, group=group, i=i):
                    group.grads[i] = grad_outputs
                handles.append(inter.register_prehook(record))
        (g,) = torch.autograd.grad(out, (leaf,), grad, retain_graph=True)
    finally:
        for h in handles:
            h.remove()
    keep = out if rest else None
    return g, WeightWork(groups, rest, keep, grad if rest else None, param_of)


def backward_weight(work: WeightWork) -> None:  # noqa: C901
    """Accumulate the weight gradients into `.grad`."""
    for group in work.groups:
        edges, seeds = [], []
        for grads, inter in zip(group.grads, group.intermediates):
            for i, g in enumerate(grads or ()):
                if g is not None:
                    edges.append(GradientEdge(inter, i))
                    seeds.append(g)
        if not edges:
            continue
        handles = []
        try:
            if len(group.intermediates) > 1:  # an intermediate below another would count twice
                for grads, inter in zip(group.grads, group.intermediates):
                    handles.append(inter.register_prehook(lambda _, saved=grads: saved))
            nodes = list(group.params)
            dws = torch.autograd.grad(edges, [GradientEdge(n, 0) for n in nodes], grad_outputs=seeds,
                                      retain_graph=True, allow_unused=True)
        finally:
            for h in handles:
                h.remove()
        for node, dw in zip(nodes, dws):
            if dw is not None:
                _accumulate(work.param_of[node], dw)
    if work.rest:
        dws = torch.autograd.grad(work.out, work.rest, work.grad, allow_unused=True)
        for p, dw in zip(work.rest, dws):
            if dw is not None:
                _accumulate(p, dw)
    work.groups, work.rest, work.out, work.grad = [], [], None, None


def _accumulate(p: torch.Tensor, g: torch.Tensor) -> None:
    if p.grad is None:
        p.grad = g
    else:
        p.grad.add_(g)
