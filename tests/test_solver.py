"""schedc/solver.py owns Z3: the one `import z3` in the package, loaded only when a query is made."""
import ast
import subprocess
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "schedc"
KNOWN_EXCEPTIONS: set = set()  # every module takes z3 from schedc/solver.py


def _z3_imports(path: Path) -> int:
    """How many `import z3` / `from z3 import ...` statements the file has, wherever they stand."""
    def imports_z3(node) -> bool:
        if isinstance(node, ast.Import):
            return any(a.name.split(".")[0] == "z3" for a in node.names)
        return isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").split(".")[0] == "z3"
    return sum(imports_z3(node) for node in ast.walk(ast.parse(path.read_text(), str(path))))


def test_the_package_imports_z3_once_in_schedc_solver():
    found = {str(p.relative_to(PACKAGE)): n for p in sorted(PACKAGE.rglob("*.py")) if (n := _z3_imports(p))}
    assert {k: n for k, n in found.items() if k not in KNOWN_EXCEPTIONS} == {"solver.py": 1}


QUERY = """
from schedc.parse import parse
from schedc.prove.model import model
from schedc.resources import builtin_schedules
path = builtin_schedules()["1f1b"]
enc = smt.Encoding(model(parse(path.read_text(), str(path))), ())
from schedc.solver import Deadline
print(type(enc.run(enc.R < 1, Deadline.after(30))).__name__, 'z3' in sys.modules)
"""


def test_the_prover_loads_z3_when_a_query_runs_not_when_imported():
    probe = "import sys\nfrom schedc.prove import smt\nprint('z3' in sys.modules)\n" + QUERY
    res = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    assert res.stdout.split() == ["False", "Proved", "True"]


@pytest.mark.parametrize("module", ["schedc.solver", "schedc.synth.solver", "schedc.synth.search"])
def test_importing_a_solver_module_loads_no_z3(module):
    probe = f"import sys\nimport {module}\nprint('z3' in sys.modules)\n"
    res = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    assert res.stdout.split() == ["False"]
