"""Colours of the pictures: Okabe and Ito's colour-blind-safe palette, one colour per action kind.

A rank's later chunks (its second stage and beyond, in stage order) are drawn in a lighter shade of
the same colour with an outline in the full colour; text on a block is black or white, whichever
reads better on it.
"""
from __future__ import annotations

# Okabe & Ito (2008), "Color Universal Design": distinguishable under every common colour-vision deficiency.
OKABE_ITO = {
    "orange": "#E69F00", "sky_blue": "#56B4E9", "bluish_green": "#009E73", "yellow": "#F0E442",
    "blue": "#0072B2", "vermillion": "#D55E00", "reddish_purple": "#CC79A7", "black": "#000000",
}

KIND_COLOUR = {
    "F": OKABE_ITO["blue"],  # forward
    "B": OKABE_ITO["vermillion"],  # full backward
    "I": OKABE_ITO["orange"],  # backward for inputs
    "W": OKABE_ITO["bluish_green"],  # backward for weights
    "OVERLAP": OKABE_ITO["reddish_purple"],  # OVERLAP_F_B: a forward and a backward as one action
    "COMM": "#6E6E6E",  # SEND/RECV and groups
    "STAGE": OKABE_ITO["yellow"],  # UNSHARD, RESHARD, REDUCE_GRAD
}
KIND_NAME = {"F": "forward F", "B": "backward B", "I": "input grad I", "W": "weight grad W",
             "OVERLAP": "overlapped F+B", "COMM": "send / receive", "STAGE": "unshard / reshard / reduce"}

IDLE = "#E4E4E4"  # the row background shows through where a rank is idle (hatched)
IDLE_HATCH = "#C8C8C8"
ALARM = OKABE_ITO["vermillion"]  # the wait-for cycle, blocked steps, crossed pairs, memory violations
ALARM_DARK = "#8B1A00"
MEMORY = OKABE_ITO["sky_blue"]
NOT_RUN = "#BBBBBB"

LIGHTEN = 0.55  # how far a later chunk's shade moves towards white


def _rgb(colour: str) -> tuple[int, int, int]:
    return int(colour[1:3], 16), int(colour[3:5], 16), int(colour[5:7], 16)


def mix(colour: str, towards: str, t: float) -> str:
    a, b = _rgb(colour), _rgb(towards)
    return "#" + "".join(f"{round(x + (y - x) * t):02X}" for x, y in zip(a, b))


def fill(kind: str, chunk: int = 0, chunks: int = 1) -> str:
    """The fill of a block: the kind's colour, lighter for later chunks (chunk 0 is full colour)."""
    base = KIND_COLOUR[kind]
    if chunk <= 0 or chunks <= 1:
        return base
    return mix(base, "#FFFFFF", LIGHTEN * chunk / (chunks - 1))


def text_colour(background: str) -> str:
    """Black or white text, by the WCAG relative luminance of the background."""
    def channel(c: int) -> float:
        v = c / 255
        return v / 12.92 if v <= 0.03928 else ((v + 0.055) / 1.055) ** 2.4
    r, g, b = (channel(c) for c in _rgb(background))
    lum = 0.2126 * r + 0.7152 * g + 0.0722 * b
    return "#000000" if (lum + 0.05) / 0.05 >= 1.05 / (lum + 0.05) else "#FFFFFF"
