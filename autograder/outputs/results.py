"""Result files, grades.csv and regrades.

The per-student result records (`autograder.record`) are the source of truth.
Each is written the moment its submission is graded, so a batch killed at any
point loses nothing and a rerun grades only what is missing. grades.csv (and the
gradebook, outputs/gradebook.py) are rebuilt from them at the end of every run.
"""
import csv
import io
from datetime import datetime, timezone

from autograder.course import write_atomically
from autograder.outputs.base import Output
from autograder.record import write_result
from autograder.untrusted import for_spreadsheet

def _sandbox_column(result):
    """What grades.csv says about isolation: a plain word, loud when there was none."""
    return "NONE (--unsafe-no-sandbox)" if result.unsandboxed else result.sandbox


def write_grades_csv(path, results, grade_ids):
    """student id, score per graded cell, raw total, late penalty, total, status, notes, the sandbox
    it ran in, and when it was handed in. Text a student chose (their id, notes quoting their
    cells) never starts with a formula a spreadsheet would run."""
    handle = io.StringIO(newline="")
    writer = csv.writer(handle)
    writer.writerow(["student_id", *grade_ids, "raw_total", "late_penalty", "total", "max_score", "status", "notes",
                     "sandbox", "submitted_at"])
    for result in sorted(results, key=lambda r: r.student_id):
        scores = result.scores
        writer.writerow([for_spreadsheet(result.student_id), *[_number(scores.get(g)) for g in grade_ids],
                         _number(result.raw_score), _number(result.late_penalty), _number(result.score),
                         _number(result.max_score), result.status,
                         for_spreadsheet("; ".join([*result.notes, *([result.late_note] if result.late_note else [])])),
                         _sandbox_column(result), for_spreadsheet(result.submitted_at)])
    return write_atomically(path, handle.getvalue())


def _number(value):
    return "" if value is None else f"{value:g}"


# -- regrades: keep what was there, say what changed ---------------------------------------
class Regrade:
    """Keeps every result a batch replaces, and what changed.

    Before a student's result is overwritten, the previous one is copied to
    `history/<run>/<student>.json` (`run` is the batch's start time), so nothing is
    ever lost to a regrade. `write_changes` then lists, in `changes.csv`, each
    student whose score moved: old and new score and the checks that flipped.
    """

    def __init__(self, folder, started):
        self.graded, self.folder = folder, folder.history(started)
        self.changes = []  # (previous, new)

    def keep(self, result):
        previous = self.graded.result(result.student_id)
        if previous is None:
            return
        self.folder.mkdir(parents=True, exist_ok=True)
        write_result(None, previous, self.folder / f"{result.student_id}.json")
        if previous.score != result.score:
            self.changes.append((previous, result))

    def write_changes(self):
        """changes.csv (only when a score moved; an older one is kept in history)."""
        if not self.changes:
            return None
        older = self.graded.changes_csv
        if older.exists():
            self.folder.mkdir(parents=True, exist_ok=True)
            write_atomically(self.folder / "changes.csv", older.read_bytes())
        handle = io.StringIO(newline="")
        writer = csv.writer(handle)
        writer.writerow(["student_id", "old_score", "new_score", "change", "checks_now_failing", "checks_now_passing"])
        for previous, new in sorted(self.changes, key=lambda pair: pair[1].student_id):
            failing, passing = flipped_checks(previous, new)
            writer.writerow([for_spreadsheet(new.student_id), _number(previous.score), _number(new.score),
                             f"{new.score - previous.score:+g}", for_spreadsheet("; ".join(failing)),
                             for_spreadsheet("; ".join(passing))])
        return write_atomically(older, handle.getvalue())


def flipped_checks(previous, new):
    """([checks that passed before and fail now], [the other way round]) as 'cell: check'."""
    before = {(cell.name, check.name): check.passed for cell in previous.cells for check in cell.checks}
    after = {(cell.name, check.name): check.passed for cell in new.cells for check in cell.checks}
    failing = [f"{c}: {n}" for (c, n), ok in after.items() if not ok and before.get((c, n), False)]
    passing = [f"{c}: {n}" for (c, n), ok in after.items() if ok and not before.get((c, n), True)]
    return failing, passing


# -- as outputs ------------------------------------------------------------------------------
class ResultFiles(Output):
    """<student>.json, each written the moment it is graded; a regrade keeps the previous one
    in history/ and lists moved scores in changes.csv. The source of truth for every other
    output, so when it cannot be written nothing else is, and the next run grades again."""

    what, required = "its result", True

    def __init__(self, folder, started=None):
        import threading

        # `started` names the run's history/ folder: the batch's start time
        self.folder, self.regrade = folder, Regrade(folder, started or _now())
        self.lock = threading.Lock()  # add and finish may come from two threads (the service's)

    @property
    def changes(self):
        return self.regrade.changes

    def add(self, result):
        with self.lock:
            self.regrade.keep(result)  # the previous result, if any, goes to history/ first
            self.folder.write(result)

    def finish(self, results):
        """changes.csv; then the next run's history/ folder (the service finishes whenever its
        queue is quiet: what a run kept is written, never held for a term)."""
        with self.lock:
            self.regrade.write_changes()
            self.regrade = Regrade(self.folder, _now())
        return []


def _now():
    return datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%S.%fZ")


class GradesCsv(Output):
    """grades.csv: one row per student, one column per graded cell (see write_grades_csv)."""

    what = "grades.csv"

    def __init__(self, folder, grade_ids):
        self.folder, self.grade_ids = folder, list(grade_ids)

    def finish(self, results):
        write_grades_csv(self.folder.grades_csv, results, self.grade_ids)
        return []
