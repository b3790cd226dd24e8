"""DeepSeek's DualPipe order, as dualpipe.py's `DualPipe.step` issues its computation (read from
deepseek-ai/DualPipe, dualpipe/dualpipe.py at 3da1bbe; its control flow retraced here, no code of it
kept): per rank, the steps of its eight phases, each forward, backward and weight step named as
schedc names them.

Rank r holds `module[0]` and `module[1]`; a *phase* 0 or 1 picks one, swapped on the second half of
the ranks (`phase ^= is_in_second_half`): module 0 runs direction 0 (stage r, the first half of the
microbatches, which enter at rank 0), module 1 direction 1 (stage 2P-1-r, the second half, which
enter at rank P-1). Each module counts its forwards and its backwards: the k-th is its direction's
k-th microbatch. A backward with `enable_zb` leaves its weight gradient in `WeightGradStore`, a FIFO
that `_weight_chunk` pops; `_forward_backward_chunk` runs a forward and a full backward as one
overlapped step, except the middle ranks' first one in step 4, which runs them one after the other.
"""
from __future__ import annotations

from collections import deque


def deepseek_order(P: int, M: int) -> list[list[str]]:
    """Each rank's steps in schedc's compact notation: `2F0`, `2B1`, `2I1`, `2W1`, `(0F3;7B0)OVERLAP_F_B`."""
    assert P % 2 == 0 and M % 2 == 0 and M >= 2 * P  # dualpipe.py's own assertions
    return [_rank(r, P, M) for r in range(P)]


def _rank(rank: int, P: int, M: int) -> list[str]:  # noqa: C901
    H, N = P // 2, M // 2
    half_rank = min(rank, P - 1 - rank)
    second = rank >= H
    middle = half_rank == H - 1
    f_count, b_count = [0, 0], [0, 0]  # per module
    weights: deque = deque()
    out: list[str] = []

    def module(phase: int) -> int:
        return phase ^ second

    def where(mod: int, count: list[int]) -> tuple[int, int]:
        stage = rank if mod == 0 else 2 * P - 1 - rank
        k = count[mod]
        count[mod] += 1
        return stage, k if mod == 0 else N + k

    def forward(phase: int) -> str:
        s, m = where(module(phase), f_count)
        return f"{s}F{m}"

    def backward(phase: int, zb: bool = False) -> str:
        s, m = where(module(phase), b_count)
        if zb:
            weights.append(f"{s}W{m}")
            return f"{s}I{m}"
        return f"{s}B{m}"

    def pair(phase0: int, phase1: int) -> str:
        return f"({forward(phase0)};{backward(phase1)})OVERLAP_F_B"

    for _ in range((H - half_rank - 1) * 2):  # step 1: nF0
        out.append(forward(0))
    for _ in range(half_rank + 1):  # step 2: nF0F1
        out.append(forward(0))
        out.append(forward(1))
    for _ in range(H - half_rank - 1):  # step 3: nB1W1F1
        out.append(backward(1, zb=True))
        out.append(weights.popleft())
        out.append(forward(1))
    for i in range(N - P + half_rank + 1):  # step 4: nF0B1F1B0
        if i == 0 and middle:
            out.append(forward(0))
            out.append(backward(1))
        else:
            out.append(pair(0, 1))
        out.append(pair(1, 0))
    for _ in range(H - half_rank - 1):  # step 5: nB1F1B0
        out.append(backward(1))
        out.append(pair(1, 0))
    zb = False
    step_6 = half_rank + 1
    for i in range(step_6):  # step 6: nB1B0, the second half with zero bubble
        if i == step_6 // 2 and half_rank % 2 == 1:
            zb = True
        out.append(backward(1, zb))
        if i == step_6 // 2 and half_rank % 2 == 0:
            zb = True
        out.append(backward(0, zb))
    for _ in range(H - half_rank - 1):  # step 7: nWB0
        out.append(weights.popleft())
        out.append(backward(0, zb=True))
    for _ in range(half_rank + 1):  # step 8: nW
        out.append(weights.popleft())
    assert not weights and f_count == [N, N] and b_count == [N, N]
    return out
