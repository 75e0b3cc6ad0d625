"""graded/<assignment>/: the folder a batch writes, and the one place that knows its layout.

    <student>.json           each student's result (`record.Result`, in Gradescope's schema)
    feedback/<student>.html  each student's feedback page
    report.html              the class report
    grades.csv, changes.csv  the grades, and whose score a regrade moved
    intake.csv               every file the last run was handed, whose it is and what became of it
    removed.json             students a TA removed (`autograder remove`): never graded again until put back
    similarity.csv, .html    `autograder similarity`
    history/<run>/           results (and changes.csv) a regrade replaced
    .answers/<key>.json      results identical answers may be given (see runs/identical.py)
    .batch.json              the batch's seed and its last wall time

Dot-names hold the batch's own files: no student id can collide with them (see untrusted.py).
"""
import csv
import io
import json
import secrets
from pathlib import Path

from autograder.course import write_atomically
from autograder.record import all_results, read_result, write_result
from autograder.untrusted import for_spreadsheet, visible

INTAKE_COLUMNS = ("student_id", "file", "from", "lms_id", "lms_name", "outcome")


class GradedFolder:
    def __init__(self, root):
        self.root = Path(root)

    def __repr__(self):
        return f"GradedFolder({str(self.root)!r})"

    def make(self):
        self.root.mkdir(parents=True, exist_ok=True)
        self.answers.mkdir(exist_ok=True)
        return self

    # -- results ----------------------------------------------------------------------
    def result(self, student_id):
        """The student's result, or None when there is none or it cannot be read."""
        return read_result(self.root, student_id)

    def results(self):
        """Every result in the folder, by student id."""
        return all_results(self.root)

    def write(self, result):
        return write_result(self.root, result)

    def earlier(self, student_id, sha):
        """The student's finished result for this very file (sha: its SHA-256), or None: a changed
        notebook is graded again."""
        result = self.result(student_id)
        return result if result is not None and result.finished and result.notebook_sha256 == sha else None

    # -- where each output goes ------------------------------------------------------------
    feedback = property(lambda self: self.root / "feedback")
    report = property(lambda self: self.root / "report.html")
    grades_csv = property(lambda self: self.root / "grades.csv")
    changes_csv = property(lambda self: self.root / "changes.csv")
    similarity_csv = property(lambda self: self.root / "similarity.csv")
    similarity_html = property(lambda self: self.root / "similarity.html")
    answers = property(lambda self: self.root / ".answers")
    intake_csv = property(lambda self: self.root / "intake.csv")

    def feedback_page(self, student_id):
        return self.feedback / f"{student_id}.html"

    def history(self, run):
        """history/<run>/: what the run `run` (its start time) replaced."""
        return self.root / "history" / run

    # -- what the last run was handed ------------------------------------------------------------
    def write_intake(self, rows):
        """intake.csv from runs/intake's Rows: one line per file, whose it is and what became of it."""
        handle = io.StringIO(newline="")
        writer = csv.writer(handle)
        writer.writerow(INTAKE_COLUMNS)
        for row in sorted(rows, key=lambda row: (row.student_id == "", row.student_id, row.file)):
            writer.writerow([for_spreadsheet(visible(value, None)) for value in  # file names are the students'
                             (row.student_id, row.file, row.layout, row.lms_id, row.name, row.outcome)])
        write_atomically(self.intake_csv, handle.getvalue())

    def intake(self):
        """intake.csv's rows as dicts ([] before any run wrote one)."""
        try:
            with open(self.intake_csv, newline="", encoding="utf-8") as handle:
                return list(csv.DictReader(handle))
        except (OSError, csv.Error, UnicodeDecodeError):
            return []

    # -- students a TA removed -----------------------------------------------------------------
    removed_json = property(lambda self: self.root / "removed.json")

    def removed(self):
        """{student id: when and why they were removed}, from removed.json ({} when none are)."""
        try:
            found = json.loads(self.removed_json.read_text())
            return {str(k): str(v) for k, v in found.items()} if isinstance(found, dict) else {}
        except (OSError, ValueError):
            return {}

    def set_removed(self, removed):
        write_atomically(self.removed_json, json.dumps(dict(sorted(removed.items())), indent=1))

    # -- the batch's own file ------------------------------------------------------------
    _batch_file = property(lambda self: self.root / ".batch.json")

    def _batch(self):
        try:
            return json.loads(self._batch_file.read_text())
        except (OSError, json.JSONDecodeError):
            return {}

    def _write_batch(self, data):
        write_atomically(self._batch_file, json.dumps(data))  # a kill -9 never leaves half a seed

    def seed(self, seed=None, force=False):
        """The batch's seed: kept across interrupted runs so a resumed batch grades alike."""
        if seed is None and not force:
            try:
                return int(self._batch()["seed"])
            except (ValueError, KeyError, TypeError):
                pass
        seed = secrets.randbits(31) if seed is None else int(seed)
        self._write_batch({"seed": seed})
        return seed

    @property
    def wall_time(self):
        """The last batch's wall seconds, for the class report (None before any)."""
        return self._batch().get("last_wall_time")

    def record_wall_time(self, seconds):
        self._write_batch({**self._batch(), "last_wall_time": round(seconds, 2)})
