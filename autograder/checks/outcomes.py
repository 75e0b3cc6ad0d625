"""What one check's run becomes: a `CheckResult` with the student's message (never a traceback or
the check's code), and what is done with a cell's results before anyone reads them: their order,
the failures that would only repeat a cause, and fixed-inputs credit withheld until it is earned."""
import contextlib
import re
from dataclasses import dataclass
from pathlib import Path

import pytest

from autograder.checks.verdict import bounded, hint_for
from autograder.wire import StudentError


@dataclass
class CheckResult:
    grade_id: str
    name: str
    description: str
    weight: float
    passed: bool
    message: str = ""
    needs: tuple = ()  # checks (by function name) it earns its credit with; see `withhold_unearned`
    named: bool = False  # its failure names the mistake (verdict.NamedMistake)
    diagnosis: bool = False  # the error model's diagnosis of the cell (checklib.diagnosis)
    after: tuple = ()  # checks (by function name) whose failure explains this one's; see `quiet_consequences`
    crash: str = ""  # for the instructor, never the student: where and why it could not run (`crash_of`)
    because: str = ""  # it fails as a consequence of a mistake the page names: "above", or "Exercise 3"
    order: int = 0  # its place among the collected checks (each view lists them in this order)
    # A diagnosis: the error model's mutants it named (their names), whose code the grader can run.
    cause: tuple = ()
    # Code with only the named mistake passes this check (errormodel.mark_unexplained): the named mistake
    # does not explain its failure, so it keeps its own words (checks/rootcause.py).
    unexplained: bool = False
    # Nothing ran to show whether the named mistake explains this failure (a mistake named in a check's
    # own words, which no repair run can undo): a consequence of it is then said as "fails too", not
    # "fails because of" (errormodel.mark_unexplained, rootcause.consequences).
    untested: bool = False
    # Its own comparison shows its failure is a mistake of its own, not another one's consequence
    # (verdict.MistakeApart): errormodel.mark_unexplained marks it unexplained.
    apart: bool = False


def grade_id_of(item):
    return item.module.__name__.rsplit(".", 1)[-1].removeprefix("test_")


def message_of(excinfo):
    """What the student reads about a failed check: bounded (verdict.bounded), since it may quote
    anything the student's code reported."""
    return bounded(_message_of(excinfo))


def message_of_text(text):
    """A message said without an exception (a diagnosis whose what-ifs ran later), bounded alike."""
    return bounded(text)


COULD_NOT_RUN = "This check could not run"  # how a student's message about a crashed check starts


def _message_of(excinfo):
    if crashed(excinfo):
        return f"{COULD_NOT_RUN} ({excinfo.typename}). Please tell your instructor."
    error = excinfo.value
    if isinstance(error, StudentError):
        text = str(error)
        hint = hint_for(text)
        return f"Your code failed: {text}" + (f" {hint}" if hint else "")
    return str(error.msg) if excinfo.errisinstance(pytest.fail.Exception) else str(error)


def crashed(excinfo):
    """Whether the check itself broke (a typo, a wrong call), rather than failing on the answer
    (pytest's fail, the student's own error, or an assertion with a message): the student then
    reads only that it could not run."""
    error = excinfo.value
    return not (excinfo.errisinstance(pytest.fail.Exception) or isinstance(error, StudentError)
                or (isinstance(error, AssertionError) and str(error)))


def crash_of(item, excinfo, root):
    """For the instructor: "<check file>:<line>: <exception>" of a check that broke, the line the
    deepest one in the check's own folder (its file, or a helper next to it), the file relative to
    the course folder `root`. Never shown to students: it may quote the check's code."""
    folder = Path(str(item.path)).parent
    own = [entry for entry in excinfo.traceback if Path(str(entry.path)).parent == folder]
    path, line = (Path(str(own[-1].path)), own[-1].lineno + 1) if own else (Path(str(item.path)), "?")
    with contextlib.suppress(ValueError):
        path = path.relative_to(root)
    return bounded(f"{path}:{line}: {excinfo.typename}: {excinfo.value}")


def in_view_order(checks):
    """A cell's checks as every view lists them: its diagnosis first, then the checks in the order
    they were collected (hidden checks run last, but are listed where they stand)."""
    return sorted(checks, key=lambda check: (not check.diagnosis, check.order))


def quiet_consequences(checks):
    """A failing check that uses what a failing check before it tests (its `after`, and a
    fixed-inputs check's `needs`) says nothing more: that check's message names the cause, and
    this one's would only repeat it in other words, or point elsewhere. Its points stay lost."""
    failed = {check.name.split("[")[0] for check in checks if not check.passed}
    for check in checks:
        # (a mistake apart is not what a fixed-inputs check's needed checks test: only `after` quiets it)
        needs = () if getattr(check, "apart", False) else check.needs
        if not check.passed and set(check.after + needs) & failed:
            # (an error raised at a line of the student's own here, and in no check it needs, is not what
            # that check found: no repair ran to show it goes away, so it is said; the same error twice is
            # not. One raised in library code, on what the student's code made, may well be that check's
            # mistake showing again: a collate of windows of different lengths)
            raised = raised_error(check.message) if at_own_line(check.message) else ""
            if not raised or _raised_elsewhere(check, checks, raised):
                check.message = ""
    return checks


def raised_error(message):
    """The exception in a check's message about the student's code raising ("... raised
    RuntimeError: ...", without the student's line), or "" for any other message."""
    found = re.search(r" raised (\w+(?:Error|Exception|Interrupt)\b.*?)(?: \(your line \d+:|$)", message or "")
    return found.group(1).strip().rstrip(".") if found else ""


def at_own_line(message):
    """Whether the student's error reached a line of their own code ("(your line N: ...)")."""
    return re.search(r"\(your line \d+:", message or "") is not None


def _raised_elsewhere(check, checks, raised):
    """Whether a failing check that `check` needs says the same error."""
    needed = set(check.after + check.needs)
    return any(not other.passed and other.name.split("[")[0] in needed and raised_error(other.message) == raised
               for other in checks)


def withhold_unearned(checks):
    """A check on the notebook's fixed inputs passes only if the checks it `needs` pass.

    The notebook prints the values a right answer gives on its inputs, so code
    can recognise those inputs and return the printed numbers. Such a check keeps
    its place (students like to see the book's numbers) but earns its credit only
    when the same code is also right on the run's random inputs.
    """
    failed = {}
    for check in checks:
        if not check.passed:
            failed.setdefault(check.name.split("[")[0], check)
    for check in checks:
        missing = [failed[name] for name in check.needs if name in failed]
        if check.passed and missing:
            check.passed = False
            check.message = (f"Your code gives the notebook's values here, but this check counts only once the"
                             f" same code is also right on other inputs (\u201c{missing[0].description}\u201d).")
    return checks
