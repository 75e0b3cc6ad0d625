"""The trust boundary is in the imports, and import-linter keeps it there."""
import shutil
import subprocess
import sys
import tomllib

from helpers import ROOT

CONTRACTS = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"]


def lint_imports(root):
    return subprocess.run([sys.executable, "-c", "import sys; from importlinter.cli import lint_imports_command;"
                           " sys.exit(lint_imports_command())"], cwd=root, capture_output=True, text=True,
                          env={"PYTHONPATH": str(root), "PATH": "/usr/bin:/bin"})


def test_the_import_contracts_hold():
    done = lint_imports(ROOT)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "2 kept, 0 broken" in done.stdout


def test_every_engine_module_is_on_one_side_of_the_boundary():
    boundary = CONTRACTS[0]
    sides = [*boundary["source_modules"], *boundary["forbidden_modules"]]
    modules = {f"autograder.{p.stem}" for p in (ROOT / "autograder").glob("*.py") if p.stem != "__init__"}
    assert modules == set(sides) and len(sides) == len(set(sides))


def test_a_forbidden_import_breaks_the_contract(tmp_path):
    shutil.copytree(ROOT / "autograder", tmp_path / "autograder", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", tmp_path)
    student = tmp_path / "autograder" / "student.py"
    student.write_text(student.read_text() + "\nfrom autograder import grading  # noqa: a check would leak\n")
    done = lint_imports(tmp_path)
    assert done.returncode != 0 and "BROKEN" in done.stdout
    assert "autograder.student -> autograder.grading" in done.stdout
