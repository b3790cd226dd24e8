"""Findings of a user trial of `schedc prove`: fixed inputs refused plainly, proofs by checking
every setting of a finite domain, settings and counts told in words, bounds named."""
from __future__ import annotations

import pytest

from schedc.api import load
from schedc.interop.formats import writer


@pytest.mark.parametrize("fmt, suffix", [("torch-csv", ".csv"), ("ir-json", ".json")])
def test_a_fixed_program_is_a_usage_error_pointing_to_check(fmt, suffix, tmp_path, run_cli):
    # a CSV or an IR file is one compiled program at one setting: not the parser's complaint that
    # its text is no schedule ("unexpected '0UNSHARD'; expected 'schedule'"), but what prove takes
    path = tmp_path / f"x{suffix}"
    path.write_text(writer(fmt)(load("1f1b")))
    code, out, err = run_cli("prove", str(path))
    assert code == 2 and out == "" and "error[usage]" in err and "error[syntax]" not in err
    assert "prove takes a .pp schedule or a built-in name" in err and f"schedc check {path}" in err
