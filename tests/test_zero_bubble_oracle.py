"""Zero-bubble schedules and DualPipeV against torch 2.13's own generators (per-rank compute order).

torch is the oracle: ScheduleInterleavedZeroBubble (loop placement, V chunks), ScheduleZBVZeroBubble
and ScheduleDualPipeV (V-shape placement, two chunks). Settings torch refuses must be refused by
our `require` too.
"""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
from torch.distributed.pipelining import schedules as S  # noqa: E402

import schedc  # noqa: E402
from schedc.errors import SchedcError  # noqa: E402
from test_torch_oracle import assert_same_order, looped_stages, our_order, torch_compute_order  # noqa: E402
from test_torch_oracle import vshape_stages as v_stages  # noqa: E402


def _compare(name, make, params, P, stages):
    try:
        schedule = make()
    except ValueError:  # torch refuses this setting: so must we
        with pytest.raises(SchedcError) as info:
            schedc.load(name, params)
        assert info.value.code == "require", info.value.render()
        return False
    program, ours = our_order(name, params)
    assert program.num_stages == stages and program.num_microbatches == params["M"]
    assert program.placement == tuple(schedule.stage_index_to_group_rank[s] for s in range(stages))
    assert_same_order(ours, torch_compute_order(schedule.pipeline_order, P), f"{name} {params}")
    assert schedc.check(program).ok
    return True


@pytest.mark.parametrize("P", [2, 4, 8])
@pytest.mark.parametrize("V", [1, 2, 4])
@pytest.mark.parametrize("M", [1, 3, 4, 5, 8, 10, 16, 32])
def test_interleaved_zero_bubble_matches_torch(P, V, M):
    params = {"P": P, "V": V, "M": M}
    _compare("interleaved_zero_bubble", lambda: S.ScheduleInterleavedZeroBubble(looped_stages(P, V), M),
             params, P, V * P)


@pytest.mark.parametrize("P", [1, 2, 3, 4, 8])
@pytest.mark.parametrize("M", [1, 2, 3, 4, 7, 8, 9, 16, 33])
def test_zbv_matches_torch(P, M):
    _compare("zbv", lambda: S.ScheduleZBVZeroBubble(v_stages(P), M), {"P": P, "M": M}, P, 2 * P)


@pytest.mark.parametrize("P", [1, 2, 3, 4, 8])
@pytest.mark.parametrize("M", [1, 2, 4, 7, 8, 10, 16, 17, 33])
def test_dualpipev_matches_torch(P, M):
    _compare("dualpipev", lambda: S.ScheduleDualPipeV(v_stages(P), M), {"P": P, "M": M}, P, 2 * P)


def test_the_grid_exercises_accepted_and_refused_settings():
    accepted = refused = 0
    for P in (2, 4):
        for M in (1, 4, 8, 10):
            try:
                S.ScheduleDualPipeV(v_stages(P), M)
                accepted += 1
            except ValueError:
                refused += 1
    assert accepted and refused


def test_dualpipev_equals_torchs_reference_artifact():
    from pathlib import Path
    ref = schedc.from_torch_csv(str(Path(__file__).parent / "data" / "pytorch-artifacts" / "dualpipev_4rank_10mb.csv"))
    ours = schedc.load("dualpipev", {"P": 4, "M": 10})
    assert ours.ranks == ref.ranks and ours.placement == ref.placement
