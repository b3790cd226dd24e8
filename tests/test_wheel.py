"""The wheel ships grammar/ and schedules/: an installed, non-editable copy finds both."""
from __future__ import annotations

import os
import site
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
                    "-w", str(out), str(ROOT)], check=True, capture_output=True, timeout=300)
    (found,) = out.glob("schedc-*.whl")
    return found


def test_wheel_contains_the_grammar_and_schedules(wheel):
    names = zipfile.ZipFile(wheel).namelist()
    assert "schedc/grammar/schedc.lark" in names
    assert "schedc/grammar/schedc.lark.json" in names  # the parser's tables, read instead of built
    builtins = {Path(n).name for n in names if n.startswith("schedc/schedules/")}
    assert {p.name for p in (ROOT / "schedules").glob("*.pp")} <= builtins
    assert "schedc/cli.py" in names and any(n.endswith("entry_points.txt") for n in names)
    # every subpackage of the source tree ships (pyproject lists them one by one)
    packages = {p.parent.relative_to(ROOT).as_posix() for p in (ROOT / "schedc").rglob("__init__.py")}
    assert {f"{p}/__init__.py" for p in packages} <= set(names)


def test_installed_copy_finds_grammar_and_schedules(wheel, tmp_path):
    target = tmp_path / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "-q", "--target", str(target),
                    str(wheel)], check=True, capture_output=True, timeout=300)
    probe = (
        "import schedc, schedc.resources as r\n"
        "print(schedc.__file__)\n"
        "print(r.grammar_path(), r.grammar_path().is_file())\n"
        "print(sorted(r.builtin_schedules()))\n"
        "p = schedc.load('interleaved_1f1b', {'P': 2, 'V': 2, 'M': 4})\n"
        "print(schedc.check(p).ok, p.num_stages)\n"
        "import io; from schedc.cli import main; out = io.StringIO()\n"
        "print(main(['prove', '1f1b', '-q'], out, io.StringIO()), out.getvalue().splitlines()[0])\n"
        "import schedc.parser_table as t\n"
        "print(t.read(t.table_path(), t.key(r.grammar_path().read_text())) is not None, t.table_path())\n"
    )
    # -S: no site-packages .pth files, so the editable install of the checkout is not seen;
    # the dependencies come from site-packages on PYTHONPATH, after the installed wheel.
    # (every site-packages directory, so a virtualenv with system site packages works too)
    dirs = [str(target), *site.getsitepackages(), sysconfig.get_paths()["purelib"]]
    cache = tmp_path / "cache"
    env = {"PYTHONPATH": os.pathsep.join(dirs), "PATH": "/usr/bin:/bin", "XDG_CACHE_HOME": str(cache)}
    grammar_dir = target / "schedc" / "grammar"
    grammar_dir.chmod(0o555)  # a read-only site-packages: the shipped tables are read, nothing is written
    try:
        res = subprocess.run([sys.executable, "-S", "-c", probe], cwd=tmp_path, env=env, capture_output=True,
                             text=True, timeout=120)
    finally:
        grammar_dir.chmod(0o755)
    assert res.returncode == 0, res.stderr
    module, grammar, names, verdict, proved, table = res.stdout.splitlines()
    assert table == f"True {grammar_dir / 'schedc.lark.json'}" and not cache.exists()
    assert module.startswith(str(target))
    assert grammar.startswith(str(target)) and grammar.endswith("schedc.lark True")
    assert "1f1b" in names and "looped_bfs" in names
    assert verdict == "True 4"
    assert proved.startswith("0 1f1b: proved for every setting")  # the command modules are installed too
