"""`schedc synth`: the synthesiser's command (schedc/synth/command.py) on the command line, handed
the atomic writer every command writes with."""
from __future__ import annotations

from ..synth.command import add_arguments
from . import common

__all__ = ["add_arguments", "run"]


def run(args, stdout, stderr) -> int:
    from ..synth.command import run as synth
    return synth(args, stdout, stderr, common.write_all)
