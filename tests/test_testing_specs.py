"""Where schedc.testing's ranks find the user's functions (`_spec`, `_resolve`): a function of the
script being run is loaded from its file, whatever the file's name. Plain Python, no ranks."""
from __future__ import annotations

import sys

import pytest

from schedc.testing import _resolve


@pytest.mark.parametrize("filename", ["train.py", "train"])
def test_a_script_s_function_is_loaded_from_its_file(tmp_path, monkeypatch, filename):
    """A script run as `python train` (no .py): importlib finds no spec for that file name, and the
    ranks failed with "'NoneType' object has no attribute 'loader'"; it is read as Python source."""
    script = tmp_path / filename
    script.write_text("def build_stages():\n    return 'built'\n")
    name = f"_schedc_main_script_{filename.replace('.', '_')}"
    monkeypatch.delitem(sys.modules, name, raising=False)  # (and removed again after the test)
    fn = _resolve({"module": name, "file": str(script), "name": "build_stages"})
    assert fn() == "built"
    assert sys.modules[name].__file__ == str(script)


def test_a_module_that_is_neither_importable_nor_given_by_file_is_an_import_error():
    with pytest.raises(ImportError):
        _resolve({"module": "no_such_module_anywhere_schedc", "file": None, "name": "f"})
