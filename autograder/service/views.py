"""What a student may see of a result before the due date, and after it.

Each check has a visibility, in Gradescope's words: `visible` (always shown), `after_due_date`
(shown once the due date has passed) and `hidden` (never shown to students). The
assignment's `[service] visibility` is the default; `[visibility]` sets it for a graded cell
("ex3") or one check ("ex3::test_structure", its name without the case in brackets).

Before the due date a student's view is built from the shown checks alone: their
descriptions, messages and points, and how many checks are hidden until when. Nothing of a
hidden check (its title, message, values, points, or a total that would reveal them) is in
it: the cell's own feedback text and the result's total are left out, since both are made
from every check. After the due date the view is the whole result, as `autograder grade`'s
feedback page shows it.
"""
from dataclasses import dataclass, field

from autograder.record import grouped_checks

VISIBLE, AFTER_DUE, HIDDEN = "visible", "after_due_date", "hidden"


def check_base(name):
    """A check's name without its case: "test_output_shape[1-10]" -> "test_output_shape"."""
    return name.split("[", 1)[0]


class Visibility:
    """Which checks a student may see, from an assignment's settings."""

    def __init__(self, default=VISIBLE, table=None):
        self.default, self.table = default, dict(table or {})

    @classmethod
    def of(cls, assignment):
        config = assignment.config
        return cls(config.service.visibility, config.visibility)

    def of_check(self, cell, check):
        return self.table.get(f"{cell}::{check_base(check)}", self.table.get(cell, self.default))

    def shown(self, cell, check, due_passed):
        word = self.of_check(cell, check)
        return word == VISIBLE or (word == AFTER_DUE and due_passed)


@dataclass
class CellView:
    name: str
    title: str
    points: float  # earned on the shown checks
    max_points: float  # the shown checks' share of the cell
    checks: list = field(default_factory=list)  # grouped_checks() of the shown checks
    hidden: int = 0  # checks (grouped by description) not shown
    errors: list = field(default_factory=list)  # (cell, error) the student's own cells of this exercise raised


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
                               "hidden_checks": c.hidden,
                               "checks": [{"description": g["description"], "passed": not g["failed"],
                                           "message": g["message"]} for g in c.checks]}
                              for c in self.cells]}


def student_view(result, visibility, due_passed, titles=None, owners=None):
    """The StudentView of `result` (a record.Result) with `visibility`, before or after the due date.
    `titles`: {cell: title}; `owners`: {a cell's name: the graded cell it belongs to}, to put each
    error the student's code raised under its exercise (outputs/feedback.py's Layout)."""
    titles, owners = titles or {}, owners or {}
    cells, hidden, until_due = [], 0, 0
    for cell in result.cells:
        shown = [check for check in cell.checks if visibility.shown(cell.name, check.name, due_passed)]
        total = sum(check.weight for check in cell.checks)
        if len(shown) == len(cell.checks):
            points, max_points = cell.score, cell.max_score
        else:
            share = (lambda checks: round(cell.max_score * sum(c.weight for c in checks) / total, 2) if total else 0.0)
            points, max_points = share([c for c in shown if c.passed]), share(shown)
        unseen = {c.description for c in cell.checks} - {c.description for c in shown}
        hidden_here = len(unseen)
        hidden += hidden_here
        until_due += len({c.description for c in cell.checks if c.description in unseen
                          and visibility.of_check(cell.name, c.name) == AFTER_DUE})
        cells.append(CellView(cell.name, titles.get(cell.name, cell.name), points, max_points, grouped_checks(shown),
                              hidden_here))
    by_cell = {cell.name: cell for cell in cells}
    loose = []
    for error in result.cell_errors:
        owner = by_cell.get(owners.get(error.cell))
        (owner.errors if owner else loose).append((error.cell, error.error))
    complete = hidden == 0
    score = result.score if complete else round(sum(c.points for c in cells), 2)
    max_score = result.max_score if complete else round(sum(c.max_points for c in cells), 2)
    return StudentView(complete, result.status, cells, score, max_score, hidden, list(result.notes), loose,
                       result.late_note, until_due)
