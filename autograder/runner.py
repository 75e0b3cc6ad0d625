"""Run the hidden checks of grade cells against one submission."""
import contextlib
import io
import os
import secrets
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from .plugin import GradingPlugin

CHECKS = Path(__file__).resolve().parent / "checks"


class ChecksBroken(RuntimeError):
    """The hidden checks themselves failed to load (an instructor's problem)."""


def checks_dir(assignment):
    return CHECKS / assignment


def grade_ids(assignment):
    return sorted(p.stem.removeprefix("test_") for p in checks_dir(assignment).glob("test_*.py"))


@dataclass
class CellResult:
    grade_id: str
    checks: list = field(default_factory=list)

    @property
    def fraction(self):
        total = sum(c.weight for c in self.checks)
        return sum(c.weight for c in self.checks if c.passed) / total if total else 0.0

    def score(self, points):
        return min(points, round(points * self.fraction, 2))


def run_checks(assignment, student, cells=None, seed=None):
    """{grade_id: CellResult} for the given grade cells (default: all)."""
    cells = list(cells) if cells is not None else grade_ids(assignment)
    seed = secrets.randbits(31) if seed is None else seed
    files = [checks_dir(assignment) / f"test_{cell}.py" for cell in cells]
    missing = [str(f) for f in files if not f.exists()]
    if missing:
        raise ChecksBroken(f"no hidden checks for {missing}")
    plugin = GradingPlugin(assignment, student, seed)
    args = [*map(str, files), "-c", str(CHECKS / "pytest.ini"), "--rootdir", str(CHECKS),
            "-p", "no:cacheprovider", "-p", "no:faulthandler", "-p", "no:stepwise",
            "-p", "no:unraisableexception", "-p", "no:threadexception",
            "--assert=plain", "--capture=sys", "-q", "-W", "ignore"]
    log = io.StringIO()
    with contextlib.redirect_stdout(log), contextlib.redirect_stderr(log), _no_plugin_autoload():
        code = pytest.main(args, plugins=[plugin])
    if code not in (pytest.ExitCode.OK, pytest.ExitCode.TESTS_FAILED):
        raise ChecksBroken(f"the hidden checks did not run (pytest exit {int(code)}):\n{log.getvalue()[-3000:]}")
    results = {cell: CellResult(cell) for cell in cells}
    for check in plugin.results:
        results[check.grade_id].checks.append(check)
    return results


@contextlib.contextmanager
def _no_plugin_autoload():
    """Installed pytest plugins have no business in grading (and cost start-up time)."""
    old = os.environ.get("PYTEST_DISABLE_PLUGIN_AUTOLOAD")
    os.environ["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] = "1"
    try:
        yield
    finally:
        if old is None:
            del os.environ["PYTEST_DISABLE_PLUGIN_AUTOLOAD"]
        else:
            os.environ["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] = old


def feedback_lines(result, points):
    lines = [f"{result.grade_id}: {result.score(points):g} / {points:g} points"]
    for check in result.checks:
        mark = "PASS" if check.passed else "FAIL"
        lines.append(f"  [{mark}] {check.description}")
        if check.message:
            lines.append(f"         {check.message}")
    return lines
