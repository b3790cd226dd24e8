"""Shared helpers for the tests: compile source text, run the CLI with in-memory streams."""
from __future__ import annotations

import io
import os
import signal

import pytest

# A suite started in the background by a script inherits SIGINT ignored (POSIX: an asynchronous list
# without job control), and every process the tests start would too, so the tests of Ctrl-C would
# find it ignored. They need it as a terminal gives it: a process started from here gets the default
# action again (a handled signal resets at exec; an ignored one stays ignored).
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)

os.environ.setdefault("OMP_NUM_THREADS", "1")

try:  # no Hypothesis test has a deadline: a busy machine's slow example is not a failure
    from hypothesis import settings as _settings
    _settings.register_profile("schedc", deadline=None)
    _settings.load_profile("schedc")
except ImportError:  # (the test extra brings it; a run without it fails where a test imports it)
    pass


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


@pytest.fixture
def noisy_highs(monkeypatch):
    """scipy's `milp` made to print at the C level on every call, as HiGHS does for some messages
    whatever its options say: one line written straight to file descriptor 1, one left in C stdio's
    buffer. Returns the list of calls."""
    import ctypes

    import scipy.optimize
    real, calls = scipy.optimize.milp, []

    def milp(*args, **kwargs):
        calls.append(1)
        os.write(1, b"HiGHS: a raw line\n")
        ctypes.CDLL(None).printf(b"HiGHS: a buffered line\n")
        return real(*args, **kwargs)
    monkeypatch.setattr(scipy.optimize, "milp", milp)
    return calls
