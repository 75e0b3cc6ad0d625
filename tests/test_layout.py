"""The trust boundary is in the imports, and import-linter keeps it there."""
import shutil
import subprocess
import sys
import tomllib

import pytest

from helpers import ROOT

CONTRACTS = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"]


def lint_imports(root):
    return subprocess.run([sys.executable, "-c", "import sys; from importlinter.cli import lint_imports_command;"
                           " sys.exit(lint_imports_command())"], cwd=root, capture_output=True, text=True,
                          env={"PYTHONPATH": str(root), "PATH": "/usr/bin:/bin"})


def test_the_import_contracts_hold():
    done = lint_imports(ROOT)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert f"{len(CONTRACTS)} kept, 0 broken" in done.stdout


def test_every_engine_module_is_on_one_side_of_the_boundary():
    """The boundary contract names packages: every module of the engine is in one of them
    (or is wire), so a new module cannot slip past it."""
    boundary = next(c for c in CONTRACTS if c["name"].startswith("Code that runs next to student code"))
    sides = [*boundary["source_modules"], *boundary["forbidden_modules"], "autograder.wire"]
    for path in (ROOT / "autograder").rglob("*.py"):
        module = ".".join(path.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")
        if module != "autograder":
            assert any(module == side or module.startswith(side + ".") for side in sides), module


def lint_with_an_extra_import(tmp_path, module, line):
    """import-linter's verdict on a copy of the package where `module` (a path) also has `line`."""
    shutil.copytree(ROOT / "autograder", tmp_path / "autograder", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", tmp_path)
    changed = tmp_path / "autograder" / module
    changed.write_text(changed.read_text() + f"\n{line}  # noqa: a deliberate breach\n")
    return lint_imports(tmp_path)


@pytest.mark.parametrize("module, line, said", [
    # code next to student code importing the trusted side
    ("inside/student.py", "from autograder import grading", "autograder.inside.student -> autograder.grading"),
    # the trusted side importing the sandbox's code
    ("outputs/report.py", "from autograder.inside.student import to_plain",
     "autograder.outputs.report -> autograder.inside.student"),
    # up a floor: what a result becomes must not depend on who orchestrates
    ("outputs/report.py", "from autograder.runs import batch", "autograder.outputs.report -> autograder.runs.batch"),
    # between the two middle wings, which are siblings: how one submission runs, what a result becomes
    ("grading/submission.py", "from autograder.outputs import autograded",
     "autograder.grading.submission -> autograder.outputs.autograded"),
    # a circle inside a wing
    ("checks/verdict.py", "from autograder.checks import checklib", "No import circles between sibling modules BROKEN"),
])
def test_an_import_against_a_contract_breaks_it(tmp_path, module, line, said):
    done = lint_with_an_extra_import(tmp_path, module, line)
    assert done.returncode != 0 and "BROKEN" in done.stdout
    assert said in done.stdout, done.stdout[-3000:]


def test_hidden_checks_use_the_wire_contract_not_sandbox_code():
    """Checks run on the trusted side: what they share with the sandbox comes from wire."""
    checks = list(ROOT.glob("exercises/*/checks/*.py"))
    assert checks
    for path in checks:
        assert "autograder.inside" not in path.read_text(), path.relative_to(ROOT)


def test_no_engine_function_is_longer_than_a_screen():
    """Each function of the engine fits on a screen (60 lines): longer ones hide more than one job."""
    import ast

    long = []
    for path in (ROOT / "autograder").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.end_lineno - node.lineno >= 60:
                long.append(f"{path.relative_to(ROOT)}:{node.lineno} {node.name}")
    assert long == []
