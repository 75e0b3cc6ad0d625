"""What a student may see of a result before the due date, and after it.

Each check has a visibility, in Gradescope's words: `visible` (always shown), `after_due_date`
(shown once the due date has passed) and `hidden` (never shown to students), kept by
course/visibility.py, which gives each check a level (0, 1, 2).

A view is never a filter of words over the whole result: grading ran the checks of each level
after every check below it, and recorded what a student may read at each level below the highest
as if the higher ones never ran (record.View: its messages, diagnoses, consequences, withheld
points and notes; checks/plugin.py). Before the due date a student sees the view at level 0,
after it the view at level 1 (the whole result, unless some checks are the TA's alone), and how
many checks are not shown yet. A result graded with another split into levels than the
assignment's now (the settings changed) shows no feedback at all until it is graded again.
"""
from dataclasses import dataclass, field

from autograder.course.visibility import AFTER_DUE, HIDDEN, LEVELS, VISIBLE, Visibility, check_base  # noqa: F401
from autograder.record import grouped_checks

STALE = ("This attempt was graded before your course changed which checks it shows before the due date,"
         " so its feedback cannot be shown now: hand it in again, or ask your TA to grade it again.")


@dataclass
class CellView:
    name: str
    title: str
    points: float  # earned on the shown checks
    max_points: float  # the shown checks' share of the cell
    checks: list = field(default_factory=list)  # grouped_checks() of the shown checks
    hidden: int = 0  # checks (grouped by description) not shown
    errors: list = field(default_factory=list)  # (cell, error) the student's own cells of this exercise raised
    unanswered: bool = False  # left as released: one line, no checks (record.CellScore.unanswered)


@dataclass
class StudentView:
    """A result as one student may see it now."""

    complete: bool  # every check shown: the whole result
    status: str
    cells: list  # CellView
    score: float  # of the shown checks
    max_score: float
    hidden: int  # checks not shown, in all
    notes: list
    cell_errors: list
    late_note: str = ""
    hidden_until_due: int = 0  # of `hidden`, those shown once the due date has passed

    def to_json(self):
        return {"complete": self.complete, "score": self.score, "max_score": self.max_score,
                "hidden_checks": self.hidden, "hidden_until_due": self.hidden_until_due, "notes": list(self.notes),
                "late_note": self.late_note,
                "exercises": [{"cell": c.name, "title": c.title, "points": c.points, "max_points": c.max_points,
                               "hidden_checks": c.hidden, "unanswered": c.unanswered,
                               "checks": [{"description": g["description"], "passed": not g["failed"],
                                           "message": g["message"]} for g in c.checks]}
                              for c in self.cells]}


def first_level(result, cell, description):
    """The lowest level whose view of `result` holds a check of `cell` with `description` (the
    whole result is the highest level's view)."""
    for view in sorted(result.views, key=lambda found: found.level):
        if any(c.description == description for here in view.cells if here.name == cell for c in here.checks):
            return view.level
    return max(result.levels, default=0)


def student_view(result, visibility, due_passed, titles=None, owners=None):
    """The StudentView of `result` (a record.Result) with `visibility`, before or after the due date.
    `titles`: {cell: title}; `owners`: {a cell's name: the graded cell it belongs to}, to put each
    error the student's code raised under its exercise (outputs/feedback.py's Layout)."""
    titles, owners = titles or {}, owners or {}
    hiding = visibility.hides_any()
    allowed = LEVELS[AFTER_DUE] if due_passed else LEVELS[VISIBLE]  # the highest level shown now
    stale = hiding and result.visibility != visibility.key()
    if stale:
        seen, notes = {}, [STALE]
    elif not hiding or max(result.levels, default=0) <= allowed:  # nothing above it ran: the whole result
        seen, notes = {cell.name: cell for cell in result.cells}, list(result.notes)
    else:
        lower = [view for view in result.views if view.level <= allowed]
        view = max(lower, key=lambda found: found.level) if lower else None  # none: nothing is shown yet
        seen = {cell.name: cell for cell in view.cells} if view else {}
        notes = list(view.notes) if view else []
    cells, hidden, until_due = [], 0, 0
    for cell in result.cells:
        here = seen.get(cell.name)
        shown = [check for check in (here.checks if here else [])
                 if not hiding or visibility.level(cell.name, check.name) <= allowed]
        unseen = {c.description for c in cell.checks} - {c.description for c in shown}
        hidden += len(unseen)
        # A check is shown from the first level whose view holds it: its own level, or for a
        # judgement made from a hidden check (a diagnosis), that check's.
        until_due += sum(first_level(result, cell.name, description) <= LEVELS[AFTER_DUE] for description in unseen)
        points, max_points = (min(here.score, here.max_score), here.max_score) if here else (0.0, 0.0)
        untouched = cell.unanswered
        cells.append(CellView(cell.name, titles.get(cell.name, cell.name), points, max_points,
                              [] if untouched else grouped_checks(shown), len(unseen), unanswered=untouched))
    by_cell = {cell.name: cell for cell in cells}
    loose = []
    for error in result.cell_errors:
        owner = by_cell.get(owners.get(error.cell))
        (owner.errors if owner else loose).append((error.cell, error.error))
    complete = hidden == 0 and not stale
    score = result.score if complete else round(sum(c.points for c in cells), 2)
    max_score = result.max_score if complete else round(sum(c.max_points for c in cells), 2)
    return StudentView(complete, result.status, cells, score, max_score, hidden, notes, loose,
                       result.late_note, until_due)
