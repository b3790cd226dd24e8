"""How many examples the heavier Hypothesis tests run: a CI budget, or a nightly one.

`HYPOTHESIS_PROFILE=nightly python -m pytest tests/test_differential.py tests/test_metamorphic.py`
runs every budgeted test with NIGHTLY_FACTOR times the examples; unset (or `ci`), the fast budget.
"""
from __future__ import annotations

import os

from hypothesis import HealthCheck, settings

PROFILES = {"ci": 1, "nightly": 20}
PROFILE = os.environ.get("HYPOTHESIS_PROFILE", "ci") or "ci"
if PROFILE not in PROFILES:  # a typo must not quietly run the CI budget
    raise RuntimeError(f"HYPOTHESIS_PROFILE={PROFILE!r}: expected one of {', '.join(PROFILES)}")
FACTOR = PROFILES[PROFILE]


def budget(examples: int) -> settings:
    """Settings for a test that runs `examples` examples in CI (and FACTOR times as many nightly)."""
    return settings(max_examples=examples * FACTOR, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                           HealthCheck.filter_too_much])
