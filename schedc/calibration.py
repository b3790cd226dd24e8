"""A model and hardware description calibrated by a run's profile (`--profile FILE`; docs/units.md,
"Calibrating from a run"): the activation model scaled to the bytes each stage saved for its
backward, and each pass's efficiency (the forward; the backward, input and weight gradients alike)
set to what the model's FLOPs reached in the seconds the run measured (rules/time.py
`achieved_efficiency`). It reads the profile `schedc run --profile` writes (schedc/runtime/profile.py).
"""
from __future__ import annotations

import math
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from .errors import SchedcError
from .rules import time as time_rules

if TYPE_CHECKING:
    from .hardware import Setup

MAX_BYTES = 2 ** 63  # no measured byte count is larger (a profile's activations)
MAX_SECONDS = 1e9  # no measured pass takes longer (about 30 years): a profile's stage times
# what each group of measured passes is called in messages; "B": the backward as one (I and W at its efficiency)
PASS_NAMES = {"F": "forward (F)", "B": "backward (B = I + W)"}


def calibrate(setup: Setup, profile: Any, where: str) -> Setup:
    """`setup` calibrated by `profile` (the JSON a run wrote): its `activations` become `[model]
    activation_scale` (`activation_scale`), its `stages` `[hardware] efficiency` per pass
    (`pass_efficiency`); either alone calibrates what it measured, and a profile with neither is
    an error."""
    if not isinstance(profile, dict) or not ("activations" in profile or "stages" in profile):
        raise SchedcError("usage", "the profile has no measured activations (\"activations\") or stage times "
                          "(\"stages\"): `schedc run --profile FILE` writes both", where=where)
    out = setup
    if "activations" in profile:
        out = replace(out, model=replace(out.model, activation_scale=activation_scale(setup, profile["activations"],
                                                                                       where)))
    if "stages" in profile:
        out = replace(out, hardware=replace(out.hardware, efficiency=pass_efficiency(setup, profile, where)))
    return out


def activation_scale(setup: Setup, measured: Any, where: str) -> float:
    """The bytes each stage's forward saved for its backward, as `schedc run --profile` measures
    them (the profile's `activations`), over what the model (unscaled) counts for the same stages
    of the described model cut into as many."""
    if not isinstance(measured, dict) or not measured:
        raise SchedcError("usage", "the profile has no measured activations (\"activations\"): "
                          "`schedc run --profile FILE` writes them", where=where)
    stages = _stage_numbers(measured, "activations", "bytes", where)
    sizes = [measured[str(s)] for s in stages]
    if any(isinstance(b, bool) or not isinstance(b, (int, float)) or not 0 < b < MAX_BYTES for b in sizes):
        raise SchedcError("usage", "the profile's \"activations\" must be positive byte counts below 2^63 of "
                          "stages 0, 1, ...", where=where)
    plain = replace(setup, model=replace(setup.model, activation_scale=1.0))
    modelled = sum(plain.estimates(stages[-1] + 1)[s].activation_bytes for s in stages)
    scale = sum(float(b) for b in sizes) / modelled
    if not scale > 0:  # (a few bytes against a model's billions: no scale a float holds)
        raise SchedcError("usage", f"the profile's \"activations\" ({max(sizes):.4g} bytes a stage at most) are "
                          f"out of range for {setup.model.name}, which counts {modelled:.4g} for those stages",
                          where=where)
    return scale


def pass_efficiency(setup: Setup, profile: dict[str, Any], where: str) -> tuple[tuple[str, float], ...]:
    """The efficiency of each pass at which the described model, cut into the profile's stages,
    takes the seconds the run measured: the stages' FLOPs over the peak's work in their measured
    seconds less the communication the description puts inside them (tensor, context and expert
    parallelism's), for the forward (F) and for the backward as one pass (B = I + W: I and W get
    its efficiency; how a run splits a stage's backward says how the runtime cut the work, as
    rules/time.py `split_backward` does for the first stage, not how fast the hardware did it)."""
    times = _stage_times(profile.get("stages"), where)
    estimates = setup.estimates(len(times))
    groups: dict[str, list[tuple[float, float, float]]] = {"F": [], "B": []}
    for t, e, (Fc, Ic) in zip(times, estimates, setup.stage_comm(estimates)):  # (FLOPs, seconds, comm)
        groups["F"].append((e.flops_F, t["F"], Fc))
        groups["B"].append((e.flops_I + e.flops_W, t["B"] if "B" in t else t["I"] + t["W"], Ic))
    forward, backward = (_efficiency(setup, name, group, where) for name, group in groups.items())
    return (("F", forward), ("I", backward), ("W", backward))


def _efficiency(setup: Setup, name: str, group: list[tuple[float, float, float]], where: str) -> float:
    """One pass's efficiency from its stages' (FLOPs, measured seconds, communication inside)."""
    hw, dtype = setup.hardware, setup.model.dtype
    peak = hw.flops_at(dtype)
    what = PASS_NAMES[name]
    measured, comm = sum(t for _, t, _ in group), sum(c for _, _, c in group)
    if not measured - comm > 0:
        raise SchedcError("usage", f"the profile's {what} seconds ({measured:.4g}) are no more than the "
                          f"communication the description puts inside them ({comm:.4g} s of tensor-, context- and "
                          "expert-parallel collectives): describe the layout the profile ran", where=where)
    e = time_rules.achieved_efficiency([f for f, _, _ in group], [t - c for _, t, c in group], peak)
    if e > 1:
        raise SchedcError("usage", f"the profile's {what} passes ran at {e * peak:.4g} FLOP/s, {e:.3g} times the "
                          f"peak {hw.name} gives for {dtype} ({peak:.4g}): describe the accelerator the profile ran "
                          "on ([hardware] flops)", where=where)
    if not (math.isfinite(e) and e > 0):
        raise SchedcError("usage", f"the profile's {what} seconds ({measured:.4g}) are out of range for "
                          f"{setup.model.name} on {hw.name}: no efficiency a float holds", where=where)
    return e


def _stage_numbers(table: dict, key: str, what: str, where: str) -> list[int]:
    """The stage numbers a profile's table is keyed by (`"0"`, `"1"`, ...), sorted."""
    odd = next((k for k in table if not (isinstance(k, str) and k.isascii() and k.isdigit() and str(int(k)) == k)),
               None)
    if odd is not None:
        raise SchedcError("usage", f"the profile's \"{key}\" must map stage numbers to {what}: {odd!r} is not a "
                          "stage number (0, 1, ...)", where=where)
    return sorted(int(s) for s in table)


def _stage_times(stages: Any, where: str) -> list[dict[str, float]]:
    """Each stage's measured seconds, stages 0 to n - 1 of the run: F, and B or I and W."""
    shape = "(\"stages\": {\"0\": {\"F\": seconds, \"B\": seconds}, ...}, as `schedc run --profile` writes)"
    if not isinstance(stages, dict) or not stages:
        raise SchedcError("usage", f"the profile's \"stages\" must give each stage's measured seconds {shape}",
                          where=where)
    numbers = _stage_numbers(stages, "stages", "their measured seconds", where)
    if numbers != list(range(len(numbers))):
        missing = next(s for s in range(numbers[-1] + 1) if s not in numbers)
        raise SchedcError("usage", f"the profile's \"stages\" must be every stage of the run, 0 to {numbers[-1]}: "
                          f"stage {missing} is missing", where=where)
    out = []
    for s in numbers:
        table = stages[str(s)]
        if not isinstance(table, dict):
            raise SchedcError("usage", f"the profile's stage {s} must be a table of seconds {shape}", where=where)
        t = {op: table[op] for op in ("F", "B", "I", "W") if op in table}
        bad = next((op for op, v in t.items() if isinstance(v, bool) or not isinstance(v, (int, float))
                    or not 0 < v < MAX_SECONDS), None)
        if bad is not None:
            shown = repr(t[bad]) if len(repr(t[bad])) < 40 else repr(t[bad])[:37] + "..."
            raise SchedcError("usage", f"the profile's stage {s} {bad} must be a positive number of seconds below "
                              f"{MAX_SECONDS:g}, not {shown}", where=where)
        if "F" not in t or not ("B" in t or ("I" in t and "W" in t)):
            raise SchedcError("usage", f"the profile's stage {s} needs F, and B or I and W {shape}", where=where)
        out.append({op: float(v) for op, v in t.items()})
    return out
