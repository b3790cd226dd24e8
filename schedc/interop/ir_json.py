"""The IR as JSON (`schedc compile` writes DIR/<name>.json), and back.

Actions are in compact text per rank, with the source line of each where known, so the file is
readable and diffable; `read_ir_json` rebuilds the same Program.
"""
from __future__ import annotations

import json

from ..errors import SchedcError
from ..ir import ActionSyntaxError, Annotations, Program, StageCost, StageMemory, format_step, parse_step
from ..span import Source, Span

FORMAT = "schedc-ir"
VERSION = 1


def ir_to_dict(program: Program) -> dict:
    ann = program.annotations
    return {
        "format": FORMAT,
        "version": VERSION,
        "schedule": program.name,
        "source": program.source,
        "params": dict(program.params),
        "ranks": program.num_ranks,
        "stages": program.num_stages,
        "microbatches": program.num_microbatches,
        "placement": list(program.placement),
        "level": program.level,
        "annotations": {
            "stage_costs": [vars(c) for c in ann.stage_costs],
            "stage_memory": [vars(m) for m in ann.stage_memory],
            "rank_speed": list(ann.rank_speed),
            "memory_limit": {str(r): v for r, v in ann.memory_limit},
            "latency": ann.latency,
            "bandwidth": ann.bandwidth,
        },
        "actions": [[format_step(st) for st in steps] for steps in program.ranks],
        "lines": [[st.span.line if st.span is not None else None for st in steps] for steps in program.ranks],
    }


def dumps_ir(program: Program) -> str:
    return json.dumps(ir_to_dict(program), indent=1) + "\n"


def read_ir_json(text: str, name: str = "<ir>") -> Program:
    source = Source(name, text)
    try:
        data = json.loads(text)
        if data.get("format") != FORMAT:
            raise ValueError(f"not a schedc IR file (format is {data.get('format')!r})")
        ranks = tuple(tuple(parse_step(t) for t in row) for row in data["actions"])
        ann = data.get("annotations", {})
        notes = Annotations(
            tuple(StageCost(**c) for c in ann.get("stage_costs", [])),
            tuple(StageMemory(**m) for m in ann.get("stage_memory", [])),
            tuple(ann.get("rank_speed", [])),
            tuple(sorted((int(r), v) for r, v in ann.get("memory_limit", {}).items())),
            ann.get("latency", 0.0), ann.get("bandwidth", 0.0))
        return Program(data["schedule"], data["ranks"], data["stages"], data["microbatches"],
                       tuple(data["placement"]), ranks, tuple(data.get("params", {}).items()), notes,
                       data.get("source"))
    except (ValueError, KeyError, TypeError, ActionSyntaxError) as exc:
        raise SchedcError("ir-json", f"cannot read schedc IR JSON: {exc}", Span.point(source, 1, 1)) from None
