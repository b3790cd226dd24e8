"""Lower a schedule to a torch.distributed program: source text plus metadata, no files written.

`lower_to_torch(program)` runs the IR passes (`schedc.passes.lower`: communication made explicit),
turns each rank's steps into the data table of `schedc.runtime.table`, and renders a Python program
that holds the table as literals and a `main()` that hands it to `schedc.runtime`. Everything taken
from the schedule is embedded as a checked literal (`repr` of validated ints and strings), never
spliced into code, so a hostile schedule name cannot inject anything.
"""
from __future__ import annotations

from .codegen import LoweredProgram, lower_to_torch, render_program, table_of

__all__ = ["LoweredProgram", "lower_to_torch", "render_program", "table_of"]
