"""rules/sharding.py: FSDP's gather (UNSHARD), computations and free (RESHARD) of a stage, in the
order torch's `_PipelineScheduleRuntime` asserts for a stage under FSDP; each way to break it is
told with torch's own assertion."""
from __future__ import annotations

import pytest

from schedc.ir import parse_step
from schedc.rules.sharding import breaks


def rows(*texts: str):
    return [[parse_step(cell) for cell in text.split()] for text in texts]


@pytest.mark.parametrize("text", [
    "0UNSHARD 0F0 0F1 0B0 0B1 0RESHARD 0REDUCE_GRAD",
    "0UNSHARD 0F0 0RESHARD 0UNSHARD 0B0 0RESHARD",  # gathered again for the backward
    "0UNSHARD 0F0 0SEND_F0 1F0 0I0 0W0 0RESHARD",  # stage 1 is not under FSDP: anything goes
    "(0F0;0B0)OVERLAP_F_B",  # (a stage not under FSDP)
])
def test_a_stage_gathered_around_its_computations_step_after_step_passes(text):
    assert list(breaks(rows(text), [0] if "UNSHARD" in text else [])) == []


@pytest.mark.parametrize("text, at, words", [
    ("0F0 0UNSHARD 0B0 0RESHARD", 0, "Attempted to compute on sharded"),
    ("0RESHARD 0UNSHARD 0F0 0RESHARD", 0, "without unsharding"),
    ("0UNSHARD 0UNSHARD 0F0 0RESHARD", 1, "Unsharding the same stage twice"),
    ("0UNSHARD 0F0 0UNSHARD 0B0 0RESHARD", 2, "Unsharding the same stage twice"),
    ("0UNSHARD 0RESHARD", 1, "before finishing unshard"),
    ("0UNSHARD 0F0 0B0 0RESHARD 0UNSHARD", 4, "Unused unshard operations"),
    ("0UNSHARD 0F0 0B0", 2, "gathers it twice"),
    ("0F0 0B0", 0, "Attempted to compute on sharded"),  # under FSDP, never gathered
])
def test_each_break_is_told_at_its_action_with_torchs_assertion(text, at, words):
    found = list(breaks(rows("", text), [0]))
    assert len(found) == 1
    rank, step, action, why = found[0]
    assert (rank, step) == (1, at) and words in why
    assert str(action) == text.split()[at]
