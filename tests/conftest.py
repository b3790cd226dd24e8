"""Shared helpers for the tests: compile source text, run the CLI with in-memory streams."""
from __future__ import annotations

import io
import os

import pytest

os.environ.setdefault("OMP_NUM_THREADS", "1")


def compile_text(text: str, params=None, name: str = "test.pp"):
    from schedc.api import load_text
    return load_text(text, name, "pp", params)


@pytest.fixture
def run_cli():
    from schedc.cli import main

    def run(*argv):
        out, err = io.StringIO(), io.StringIO()
        code = main(list(argv), out, err)
        return code, out.getvalue(), err.getvalue()
    return run
