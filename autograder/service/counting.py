"""What counts: which attempt is a student's grade, recorded as `autograder grade` records it.

By default the last attempt handed in before the cutoff counts (`[service] counts = "best"`:
the best, after its late penalty). An attempt handed in after the due date whose answers are
the same as an on-time attempt's (the same answers key) is never counted as late: the on-time
one counts. The late policy is the assignment's `[late]`, with the time the service received
the notebook, which no student can forge.

The attempt that counts is copied to
`service/counted/<assignment>/<student>/<assignment>/<assignment>.ipynb` (nbgrader's
submitted/ layout) with nbgrader's `timestamp.txt`, and its result is recorded in `graded/<assignment>/` and
nbgrader's gradebook by the very outputs `autograder grade` uses: result file (a replaced
one goes to history/), feedback page, autograded notebook, gradebook; grades.csv and the
class report once the queue is quiet. So `autograder grade ASSIGNMENT service/counted/`,
`export`, `similarity` and regrades (service/regrade.py) all work on what counts, unchanged.
"""
import shutil
import threading
import time
from datetime import datetime, timedelta
from pathlib import Path

from autograder.course import write_atomically
from autograder.grading.notebook import grade_cells, read_notebook, sanitize
from autograder.outputs.autograded import AutogradedNotebooks
from autograder.outputs.feedback import FeedbackPages, layout_of
from autograder.outputs.gradebook import GradebookSync
from autograder.outputs.results import GradesCsv, ResultFiles
from autograder.record import read_result
from autograder.runs.batch import class_report, graded_folder, read_release, read_source
from autograder.runs.late import LateWork, assignment_policy, extensions
from autograder.service.store import GRADED as ROW_GRADED


def received(row):
    return datetime.fromisoformat(row.received_at)


class AssignmentRecord:
    """One assignment's outputs, opened once for the service's life (the gradebook again after a
    regrade, which writes it from another process)."""

    def __init__(self, assignment, roster, counted_root):
        self.assignment, self.roster, self.counted_root = assignment, roster, Path(counted_root)
        self.folder = graded_folder(assignment).make()
        self.source, self.release = read_source(assignment), read_release(assignment)
        layout = layout_of(self.source)
        self.policy = assignment_policy(assignment, self.source)
        self.counts = assignment.config.service.counts
        self.extensions = extensions(roster)
        self.outputs = [ResultFiles(self.folder), FeedbackPages(self.folder, layout),
                        AutogradedNotebooks(assignment.course.autograded, assignment.name)]
        self.finishing = [GradesCsv(self.folder, grade_cells(self.source)),
                          class_report(assignment, self.folder, self.source)]
        self.gradebook = None  # opened in the recorder's thread, on first use
        self.reopen = False  # set by a regrade: the gradebook's scores changed under this connection
        self.dirty, self.changed = False, 0.0

    def due_for(self, student_id):
        """The student's due date, their extension (the roster's) included; None without a late policy."""
        return self.policy.due + self.extensions.get(student_id, timedelta(0)) if self.policy else None

    def cutoff_for(self, student_id):
        """The student's cutoff, their extension included; None when there is none."""
        if self.policy is None or self.policy.cutoff is None:
            return None
        return self.policy.cutoff + self.extensions.get(student_id, timedelta(0))

    def choose(self, rows, results):
        """The row that counts of one student's graded attempts (`results`: {id: raw Result})."""
        graded = [row for row in rows if row.status == ROW_GRADED and row.attempt and row.id in results]
        if not graded:
            return None
        student = graded[0].student_id
        cutoff, due = self.cutoff_for(student), self.due_for(student)
        eligible = [row for row in graded if cutoff is None or received(row) <= cutoff] or graded
        if self.counts == "best":
            return max(eligible, key=lambda row: (self.late(row).apply(results[row.id]).score, -row.seq))
        last = max(eligible, key=lambda row: row.seq)
        if due is not None and received(last) > due and last.answers_key:
            same = [row for row in eligible if row.answers_key == last.answers_key and received(row) <= due]
            if same:  # the same answers were in on time: never late
                return min(same, key=lambda row: row.seq)
        return last

    def late(self, row):
        """The late policy as it applies to the attempt `row`: the time the service received it."""
        return LateWork(self.policy, {row.student_id: received(row)}, self.roster)

    def counted_result(self, row, raw):
        """The attempt's result as it counts: its late penalty from the time the service received it,
        and its path the counted copy's (so a batch over service/counted/ finds it graded)."""
        copy = self.counted_copy(row)
        result = self.late(row).apply(raw)
        if result is raw:
            from autograder.record import Result

            result = Result.from_json(raw.to_json())
        result.path = str(copy)
        return result

    def counted_copy(self, row):
        """service/counted/<assignment>/<student>/<assignment>/<assignment>.ipynb and its timestamp.txt."""
        root = self.counted_root / self.assignment.name / row.student_id / self.assignment.name
        root.mkdir(parents=True, exist_ok=True)
        target = root / f"{self.assignment.name}.ipynb"
        shutil.copyfile(row.path, target.with_suffix(".partial"))
        target.with_suffix(".partial").replace(target)
        write_atomically(root / "timestamp.txt", row.received_at)
        return target

    def record(self, result, notebook):
        if notebook is None:  # answered from another result, or finished after a restart: read it again
            try:
                notebook = sanitize(read_notebook(result.path), self.source, self.release).notebook
            except Exception:  # noqa: BLE001 (no autograded notebook then; the grade is recorded all the same)
                notebook = None
        result.graded_notebook = notebook
        for output in self.outputs:
            output.add(result)
        result.graded_notebook = None
        if self.reopen and self.gradebook is not None:
            self.gradebook.close()
            self.gradebook = None
        self.reopen = False
        if self.gradebook is None:
            self.gradebook = GradebookSync(self.assignment.course.root, self.assignment.name)
        self.gradebook.write([result])
        self.changed = time.monotonic()
        self.dirty = True

    def flush(self, quiet=0.0):
        """grades.csv and the class report, when a result changed and none came for `quiet` seconds."""
        if not self.dirty or time.monotonic() - self.changed < quiet:
            return
        self.dirty = False
        results = self.folder.results()
        for output in self.finishing:
            output.finish(results)


class Counting:
    """Decides and records what counts, for every assignment the service grades. grades.csv and the
    class report are written by a thread of their own, two quiet seconds after the last change, so
    that writing them (seconds, for a large class) never holds back a student's result."""

    QUIET = 2.0

    def __init__(self, service, roster=None):
        self.service = service
        self.records = {a.name: AssignmentRecord(a, roster, service.root / "counted") for a in service.assignments}
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self._flushing, name="report", daemon=True)

    def start(self):
        self.thread.start()
        return self

    def _flushing(self):
        while not self.stopping.wait(self.QUIET / 2):
            self.flush(self.QUIET)

    def graded(self, row, result, key, notebook=None):
        """`row` (a submission) was just graded into `result`: record the attempt that counts now
        if it changed, and return its id (None when it did not change)."""
        record = self.records[row.assignment]
        lane = self.service.lanes[row.assignment]
        rows = self.service.store.of_student(row.assignment, row.student_id)
        for other in rows:
            if other.id == row.id:  # as it will be once graded
                other.status, other.answers_key = ROW_GRADED, key
        results = {other.id: found for other in rows if other.status == ROW_GRADED
                   and (found := result if other.id == row.id else
                        read_result(None, None, lane.result_path(other.id))) is not None}
        chosen = record.choose(rows, results)
        if chosen is None or chosen.counted:
            return None
        counted = record.counted_result(chosen, results[chosen.id])
        record.record(counted, notebook if chosen.id == row.id else None)
        return chosen.id

    def flush(self, quiet=0.0):
        for record in self.records.values():
            try:
                record.flush(quiet)
            except Exception:  # noqa: BLE001 (grades.csv and the report: the next flush writes them)
                record.dirty = True

    def close(self):
        self.stopping.set()
        if self.thread.is_alive():
            self.thread.join(timeout=120)
        self.flush()
        for record in self.records.values():
            if record.gradebook is not None:
                record.gradebook.close()
