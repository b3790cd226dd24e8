"""What the importers share: the frameworks' supported versions, importing them quietly with a clear
error when missing, and writing a listing (one schedc schedule of literal per-rank lists)."""
from __future__ import annotations

import contextlib
from typing import Iterator, Mapping

from ..errors import SchedcError

class Refused(SchedcError):
    """The framework's own code refused the settings it was asked for (code `importer`, as every
    importer error): the framework is there and works, only not at these P and M, so `plan` passes
    over the layout that asked (a missing or unsupported framework stops it)."""

    def __init__(self, message: str, where: str):
        super().__init__("importer", message, where=where)


INSTALL = "pip install 'schedc[importers]'"
# framework prefix -> (its distribution, the versions the importer is tested with, their description)
SUPPORTED = {"deepspeed": ("deepspeed", ("0.19.",), "0.19.x"),
             "megatron": ("megatron-core", ("0.16.",), "0.16.x"),
             "torchtitan": ("torchtitan", ("0.3.",), "0.3.x")}


def require(framework: str, *modules: str) -> list:
    """The framework's `modules`, imported; an `importer` error when its package is
    missing or is a version the importer is not tested with."""
    from importlib import metadata  # (here: its import is 10 ms, and only an importer needs it)
    dist, prefixes, described = SUPPORTED[framework]
    where = framework
    try:
        version = metadata.version(dist)
    except metadata.PackageNotFoundError:
        raise SchedcError("importer", f"schedc's {framework} importer needs {dist} {described}, which is not "
                          f"installed: {INSTALL}", where=where) from None
    if not version.startswith(prefixes):
        raise SchedcError("importer", f"{dist} {version} is installed; schedc's {framework} importer is tested "
                          f"with {described} only: {INSTALL}", where=where)
    import importlib
    with quiet():
        try:
            return [importlib.import_module(module) for module in modules]
        except Exception as exc:  # noqa: BLE001 - a broken install says so, not with a traceback
            raise SchedcError("importer", f"{dist} {version} does not import ({type(exc).__name__}: {exc}): "
                              f"{INSTALL}", where=where) from None


@contextlib.contextmanager
def quiet() -> Iterator[None]:
    """No warnings and no log records below errors while a framework imports or is traced (DeepSpeed
    logs that it found no GPU; Megatron warns that Apex and Transformer Engine are missing)."""
    import logging
    import warnings
    before = logging.root.manager.disable
    logging.disable(logging.WARNING)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield
    finally:
        logging.disable(before)


def version(framework: str) -> str:
    from importlib import metadata
    return metadata.version(SUPPORTED[framework][0])


def write(title: str, comment: str, params: Mapping[str, int], ranks: list[list[list[str]]],
          forward_only: bool = False, placement: str | None = None, stages: int | None = None) -> str:
    """The listing: a comment, `schedule title(params)`, and each rank's steps, one line per step
    with anything to do."""
    head = ", ".join(f"{k} = {v}" for k, v in params.items())
    lines = [f"# {comment}", f"schedule {title}({head}) {{"]
    if forward_only:
        lines.append("  forward only")
    if placement is not None:
        lines += [f"  stages {stages}", f"  place {placement}"]
    for rank, steps in enumerate(ranks):
        lines.append(f"  rank {rank}:")
        lines.extend("    " + " ".join(step) for step in steps if step)
    lines.append("}")
    return "\n".join(lines) + "\n"
