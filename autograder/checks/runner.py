"""Run the hidden checks of grade cells against one submission.

The checks are the assignment's `checks/` package in the course's exercises
folder (`exercises/<assignment>/checks/test_<cell>.py`), collected by pytest as
`<assignment>.checks.test_<cell>`.
"""
import contextlib
import dataclasses
import os
import queue
import secrets
import sys
import threading
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from autograder.checks.outcomes import in_view_order, quiet_consequences, withhold_unearned
from autograder.checks.plugin import GradingPlugin

CHECKS_INI = Path(__file__).resolve().parent / "checks_pytest.ini"


class ChecksBroken(RuntimeError):
    """The hidden checks themselves failed to load (an instructor's problem)."""


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


def _check_files(assignment, cells):
    files = [assignment.checks / f"test_{cell}.py" for cell in cells]
    missing = [str(f) for f in files if not f.exists()]
    if missing:
        raise ChecksBroken(f"no hidden checks for {missing}")
    _this_course_first(assignment)
    return files


def _this_course_first(assignment):
    """Import `<assignment>.checks` from this course, not from another course with an
    assignment of the same name that this process graded before (pytest would refuse
    the second as an import file mismatch)."""
    exercises = str(assignment.folder.parent)
    stale = [name for name, module in list(sys.modules.items())
             if (name == assignment.name or name.startswith(assignment.name + "."))
             and not str(getattr(module, "__file__", "") or "").startswith(exercises + os.sep)]
    for name in stale:
        del sys.modules[name]
    if exercises in sys.path:
        sys.path.remove(exercises)
    sys.path.insert(0, exercises)


def _pytest_args(assignment, files):
    return [*map(str, files), "-c", str(CHECKS_INI), "--rootdir", str(assignment.folder.parent),
            "-p", "no:cacheprovider", "-p", "no:faulthandler", "-p", "no:stepwise",
            "-p", "no:unraisableexception", "-p", "no:threadexception",
            "-p", "no:terminal", "--assert=plain", "--capture=sys", "-W", "ignore"]


def by_cell(cells, checks):
    """{grade id: CellResult} of one view's CheckResults: copies (each view judges its own), in
    view order, fixed-inputs checks withheld and consequences quieted from this view's outcomes."""
    results = {cell: CellResult(cell) for cell in cells}
    for check in in_view_order(checks):
        results[check.grade_id].checks.append(dataclasses.replace(check))
    for result in results.values():
        withhold_unearned(quiet_consequences(result.checks))  # quiet first: a withheld check says why
    return results


@dataclass
class Views:
    """One submission's check outcomes: `cells` the whole result ({grade id: CellResult}), and for
    each level below the highest present (course/visibility.py) `levels[level]` = (its cells, the
    submission's state then: checks/plugin.py `run_views`). With nothing hidden, `levels` is empty.
    `repaired` ({grade id: (kind, {check name: passed})}) is what the repair runs showed for the whole
    result, `repaired_levels[level]` for that level's view (checks/plugin.py `run_repairs`)."""
    cells: dict
    levels: dict = field(default_factory=dict)
    repaired: dict = field(default_factory=dict)
    repaired_levels: dict = field(default_factory=dict)
    repair_seconds: float = 0.0  # what the repair runs took


def run_checks(assignment, student, cells=None, seed=None):
    """{grade_id: CellResult} for the given grade cells (default: all), from a session of its own."""
    seed = secrets.randbits(31) if seed is None else seed
    session = CheckSession(assignment, cells)
    try:
        return session.run(student, seed)
    finally:
        session.close()


class CheckSession:
    """The hidden checks of one assignment, collected once and run for many students.

    `run_checks` starts pytest afresh every time: configuration, plugins and
    collection cost about a third of a submission's checks. Here, as in a
    pytest-xdist worker, one pytest session lives on in a helper thread and its
    run-test loop runs the collected checks again for each `run(student, seed)`.
    Results are the same as `run_checks` gives.
    """

    def __init__(self, assignment, cells=None):
        self.assignment = assignment
        self.cells = list(cells) if cells is not None else assignment.grade_ids()
        self._args = _pytest_args(assignment, _check_files(assignment, self.cells))
        self._thread = None
        self._start()

    def _start(self):
        # Fresh queues per session: nothing from an ended session can reach the next.
        self.plugin = GradingPlugin(self.assignment)
        self._jobs, self._done = queue.Queue(), queue.Queue()
        self._thread = threading.Thread(target=self._session, name="checks", daemon=True)
        self._thread.start()
        kind, detail = self._done.get()
        if kind != "collected":
            self._thread.join()
            self._thread = None
            raise ChecksBroken(f"the hidden checks did not load: {detail}")

    def run(self, student, seed):
        """{grade_id: CellResult}, like `run_checks(assignment, student, seed=seed)`."""
        return self.run_views(student, seed).cells

    def run_views(self, student, seed, levels=None, cells=None, diagnoses=True):
        """The Views of `student`'s outcomes; `levels(grade id, check name)` is each check's level
        (course/visibility.py; None: all are shown), see plugin.GradingPlugin.run_views. `cells`:
        only those graded cells' checks; `diagnoses=False`: the checks alone."""
        if self._thread is None:
            raise ChecksBroken("the check session is closed")
        if not self._thread.is_alive():  # the last run failed and ended its session
            self._start()
        self._jobs.put((student, seed, levels, cells, diagnoses))
        kind, detail = self._done.get()
        if kind != "ran":
            self._thread.join()  # pytest tears everything down; the next run starts afresh
            raise ChecksBroken(f"the hidden checks failed to run: {detail}")
        results, views, repaired, repaired_levels, repair_seconds = detail
        return Views(by_cell(self.cells, results),
                     {level: (by_cell(self.cells, checks), state) for level, (checks, state) in views.items()},
                     repaired, repaired_levels, repair_seconds)

    def close(self):
        if self._thread is not None and self._thread.is_alive():
            self._jobs.put(None)
            self._thread.join()
        self._thread = None

    # -- the helper thread --------------------------------------------------
    def _session(self):
        try:
            with _no_plugin_autoload():
                code = pytest.main(self._args, plugins=[self.plugin, _Loop(self)])
            detail = f"pytest exit {int(code)}"
        except BaseException as error:  # noqa: B036 (reported to the waiting thread)
            detail = f"{type(error).__name__}: {error}"
        errors = "\n".join(self.plugin.collect_errors)[-3000:]
        self._done.put(("ended", f"{detail}{chr(10) + errors if errors else ''}"))

    def _serve(self, session):
        if session.testsfailed or not session.items or self.plugin.collect_errors:  # an instructor's mistake
            if not session.items:
                self.plugin.collect_errors.append("no checks were collected")
            return
        self._done.put(("collected", None))
        items = session.items
        while (job := self._jobs.get()) is not None:
            self.plugin.begin(*job)
            try:
                self.plugin.run_views(items, lambda item, following: item.config.hook.pytest_runtest_protocol(
                    item=item, nextitem=following))
            except BaseException as error:  # noqa: B036 (this session ends; the next run starts a new one)
                self.plugin.begin(None, 0)
                self._done.put(("failed", f"{type(error).__name__}: {error}"))
                return
            self._done.put(("ran", (self.plugin.results, self.plugin.views, self.plugin.repaired,
                                    self.plugin.repaired_views, self.plugin.repair_seconds)))
            self.plugin.begin(None, 0)  # drop the student: its sandbox is finished


class _Loop:
    """Replaces pytest's run-test loop by `CheckSession._serve`."""

    def __init__(self, owner):
        self.owner = owner

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtestloop(self, session):
        self.owner._serve(session)
        return True


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
    """The cell's feedback as text: one line per check (see record.grouped_checks)."""
    from autograder.record import grouped_checks

    lines = [f"{result.grade_id}: {result.score(points):g} / {points:g} points"]
    for group in grouped_checks(result.checks):
        mark = "NOTE" if group["note"] else "FAIL" if group["failed"] else "PASS"
        cases = f" ({group['failed']} of {group['cases']} cases failed)" if group["failed"] and group["cases"] > 1 else ""
        if group["because"]:
            lines.append(f"  [ -> ] {group['description']}: {group['because_text']}")
            continue
        lines.append(f"  [{mark}] {group['description']}{cases}")
        if group["message"]:
            lines.append(f"         {group['message']}")
    return lines
