"""FSDP's gathered parameters, as torch's runtime tracks them for a stage under FSDP.

UNSHARD(s) posts the all-gather of stage s's parameters, waited for at the stage's next compute;
RESHARD(s) frees them. For a stage under FSDP torch's `_PipelineScheduleRuntime` asserts each
transition: no compute on a sharded stage, no second UNSHARD, no RESHARD of a stage not gathered or
whose gather no compute has waited for, and no gather left unused at the end of the step; and since
it keeps which stages are gathered from one step to the next, a step must end as it began, every
stage sharded. So on its rank a stage's actions, each run of computations read as one, go
UNSHARD, compute, RESHARD, and again (`CYCLE`). schedc's runtime runs UNSHARD and RESHARD as no-ops
and its checks take them as collectives anywhere (docs/semantics.md, "Collectives"); the rule is
asked where torch's runtime runs a stage under FSDP: `schedc.torch.schedule` (schedc/torch.py).

A stage whose FSDP modules nest (each block wrapped, then the stage: FSDP2's usual wrapping, and
torchtitan's) has its inner modules resharded by FSDP's own hook after every forward; torch's
BACKWARD_INPUT then hands those sharded parameters to the input-gradient pass, they are not in its
autograd graph, and the BACKWARD_WEIGHT after it adds nothing: the weights' gradients come back None
or wrong, silently. So on such a stage an I needs an UNSHARD of its stage since the stage's last
forward (`regathered`); a B (one pass) does not.
"""
from __future__ import annotations

from collections.abc import Collection, Iterable, Iterator

from ..ir import COMPUTE, Action, Op, Step

GATHER, COMPUTES, FREE = 0, 1, 2  # a stage's events, in the order `CYCLE` asks for them
CYCLE = (GATHER, COMPUTES, FREE)
EVENT = {Op.UNSHARD: GATHER, Op.RESHARD: FREE, **{op: COMPUTES for op in COMPUTE}}

# why each event breaks the cycle, in the state before it (the next event expected)
_BREAKS = {
    (GATHER, COMPUTES): "computes on stage {s} while its parameters are sharded (no UNSHARD({s}) before it since "
                        "the step began or the last RESHARD({s})): torch asserts \"Attempted to compute on sharded\"",
    (GATHER, FREE): "reshards stage {s}, whose parameters are not gathered: torch asserts \"Resharding ... without "
                    "unsharding\"",
    (COMPUTES, GATHER): "gathers stage {s} again before any compute of it waits for the last UNSHARD({s}): torch "
                        "asserts \"Unsharding the same stage twice\"",
    (COMPUTES, FREE): "reshards stage {s} before any compute of it has waited for its UNSHARD({s}): torch asserts "
                      "\"Resharding ... before finishing unshard\"",
    (FREE, GATHER): "gathers stage {s} while its parameters are gathered already: torch asserts \"Unsharding the "
                    "same stage twice\"",
}
_ENDS = {
    COMPUTES: "gathers stage {s} and never computes it before the step ends: torch asserts \"Unused unshard "
              "operations\"",
    FREE: "leaves stage {s} gathered at the end of the step: torch keeps it so, and the next step's UNSHARD({s}) "
          "gathers it twice (add RESHARD({s}) after its last compute)",
}


def breaks(ranks: Iterable[Iterable[Step | None]], fsdp: Collection[int]) -> Iterator[tuple[int, int, Action, str]]:
    """Each break of the cycle by a stage of `fsdp` (the stages under FSDP) in `ranks` (a program's
    steps, rank by rank; None: an idle cell of a CSV row), as (rank, step, action, why): the action
    that breaks it, or, for a stage left mid-cycle, its last action on its rank."""
    wanted = set(fsdp)
    for rank, steps in enumerate(ranks):
        events: dict[int, list[tuple[int, Action]]] = {}
        for x, st in enumerate(steps):
            for a in () if st is None else st.parts:
                if a.op in EVENT and a.stage in wanted:
                    events.setdefault(a.stage, []).append((x, a))
        for s in sorted(events):
            yield from _stage_breaks(rank, s, events[s])


def _stage_breaks(rank: int, s: int, events: list[tuple[int, Action]]) -> Iterator[tuple[int, int, Action, str]]:
    expected = GATHER
    for x, a in events:
        kind = EVENT[a.op]
        if kind == COMPUTES and expected == FREE:
            continue  # (a run of computations is one event)
        if kind != expected:
            yield rank, x, a, _BREAKS[(expected, kind)].format(s=s)
            return  # (the state after a break is torch's error: one finding per stage)
        expected = CYCLE[(CYCLE.index(kind) + 1) % len(CYCLE)]
    if expected != GATHER:
        x, a = events[-1]
        yield rank, x, a, _ENDS[expected].format(s=s)


_STALE = ("takes the input gradient of stage {s} after a forward of it with no UNSHARD({s}) between: stage {s}'s "
          "FSDP modules nest, and FSDP reshards the inner ones after every forward, so torch's I computes with "
          "sharded weights outside its autograd graph and the W after it adds nothing: the weights' gradients "
          "come back None or wrong, silently (RESHARD({s}) and UNSHARD({s}) before the I gather them again; a B "
          "instead of the I and W is not affected)")


def regathered(ranks: Iterable[Iterable[Step | None]], nested: Collection[int],
               outer: Collection[int] = ()) -> Iterator[tuple[int, int, Action, str]]:
    """Each first I of a stage of `nested` (stages whose FSDP modules nest and reshard after forward)
    that follows a forward of its stage with no UNSHARD of it between, as (rank, step, action, why),
    one per stage. An UNSHARD gathers again only a stage of `outer` (its own module under FSDP too:
    torch's runtime runs UNSHARD for no other). (The first stage of the model computes no input
    gradient, and is not asked.)"""
    wanted, gathers = set(nested) - {0}, set(outer)
    for rank, steps in enumerate(ranks):
        forwarded: dict[int, bool] = {}  # stage -> a forward since its last UNSHARD
        told: set[int] = set()
        for x, st in enumerate(steps):
            for a in () if st is None else st.parts:
                if a.stage not in wanted:
                    continue
                if a.op is Op.UNSHARD and a.stage in gathers:
                    forwarded[a.stage] = False
                elif a.op is Op.F:
                    forwarded[a.stage] = True
                elif a.op is Op.I and forwarded.get(a.stage) and a.stage not in told:
                    told.add(a.stage)
                    yield rank, x, a, _STALE.format(s=a.stage)
