"""schedc/collection.py: the collector paused inside, as it was after, nested or not."""
from __future__ import annotations

import gc

import pytest

from schedc.collection import PAUSED


@pytest.mark.parametrize("enabled", [True, False])
def test_the_collector_is_paused_inside_and_as_it_was_after(enabled):
    was = gc.isenabled()
    (gc.enable if enabled else gc.disable)()
    try:
        with PAUSED:
            assert not gc.isenabled()
            with PAUSED:
                assert not gc.isenabled()
            assert not gc.isenabled()  # (the outer pause holds)
        assert gc.isenabled() is enabled
        with pytest.raises(KeyError):
            with PAUSED:
                raise KeyError("x")
        assert gc.isenabled() is enabled
    finally:
        (gc.enable if was else gc.disable)()


def test_a_wide_lowering_wakes_ranks_without_making_a_list_per_wait():
    # gpipe over many ranks stops every rank once (its backward waits for the next rank's): a list
    # per waiting rank made the collector run over and over (a fifth of a 65,536-rank lowering)
    import schedc
    from schedc.passes import lower
    program = schedc.load("gpipe", {"P": 4096, "M": 2})
    lower(schedc.load("gpipe", {"P": 64, "M": 4}))  # (the array path's imports and first runs)
    runs = []

    def count(phase, info):
        if phase == "start":
            runs.append(info["generation"])
    gc.collect()
    gc.callbacks.append(count)
    try:
        lower(program)
    finally:
        gc.callbacks.remove(count)
    assert len(runs) <= 1, runs  # (a list per wait: 5 runs here)
