"""What counts: which attempt is a student's grade, recorded as `autograder grade` records it.

By default the last attempt handed in before the cutoff counts (`[service] counts = "best"`:
the best, after its late penalty). An attempt handed in after the due date whose answers are
the same as an on-time attempt's (the same answers key) is never counted as late: the on-time
one counts. The late policy is the assignment's `[late]`, with the time the service received
the notebook, which no student can forge.

The attempt that counts is copied to
`service/counted/<assignment>/<student>/<assignment>/<assignment>.ipynb` (nbgrader's
submitted/ layout) with nbgrader's `timestamp.txt`, and its result is recorded in
`graded/<assignment>/` and nbgrader's gradebook the one way `autograder grade` records it
(runs/recording.py): the same outputs and recorder, each result added as it counts, every
output finished once the queue is quiet (grades.csv, the class report, changes.csv, the
gradebook's run). An output that fails costs that output only and is listed on the TA's page;
a busy gradebook is waited for in its own thread, never by a student. So `autograder grade
ASSIGNMENT service/counted/`, `export`, `similarity` and regrades (service/regrade.py) all
work on what counts, unchanged.
"""
import dataclasses
import logging
import shutil
import threading
import time
from collections import deque
from datetime import datetime, timedelta, timezone
from pathlib import Path

from autograder.course import write_atomically
from autograder.grading.notebook import grade_cells, manual_cells, read_notebook, sanitize
from autograder.outputs.gradebook import Gradebook
from autograder.record import read_result
from autograder.runs.late import LateWork, assignment_policy, extensions
from autograder.runs.recording import Recorder, graded_folder, read_release, read_source, standard_outputs
from autograder.service.passback import LtiScores
from autograder.service.store import GRADED as ROW_GRADED

# How long a quiet-time finish waits for a gradebook another process holds locked; the next
# finish, seconds later, tries again, so a long lock only postpones the gradebook.
GRADEBOOK_PATIENCE = 5.0
GRADEBOOK_REOPEN = 300.0  # seconds a quiet-time finish keeps the gradebook's connection open
LOG = logging.getLogger("autograder.service")
PROBLEMS_KEPT = 50
BUSY_FINISH = 60.0  # seconds between finishes while submissions wait or are graded  # the latest recording problems per assignment, for the TA's page


def received(row):
    return datetime.fromisoformat(row.received_at)


class AssignmentRecord:
    """One assignment's outputs, opened once for the service's life (the gradebook again after a
    regrade, which writes it from another process)."""

    def __init__(self, assignment, roster, counted_root):
        self.assignment, self.roster, self.counted_root = assignment, roster, Path(counted_root)
        self.folder = graded_folder(assignment).make()
        self.source, self.release = read_source(assignment), read_release(assignment)
        self.policy = assignment_policy(assignment, self.source)
        self.counts = assignment.config.service.counts
        self.extensions = extensions(roster)
        self.recorder = Recorder(standard_outputs(assignment, self.folder, source=self.source))
        for output in self.recorder.outputs:
            if isinstance(output, Gradebook):
                output.patience, output.reopen_after = GRADEBOOK_PATIENCE, GRADEBOOK_REOPEN
        self.problems = deque(maxlen=PROBLEMS_KEPT)  # (when, student, what): recording problems, for the TA
        self.dirty, self.changed, self.finished = False, 0.0, time.monotonic()
        # Every graded cell's points, written answers too, as the LMS's column and the export count them
        auto, self.written = grade_cells(self.source), manual_cells(self.source)
        self.points_possible = round(sum(auto.values()) + sum(self.written.values()), 2)
        self.lms = None  # the output that queues counted scores for the LMS (passback.py), where LTI is set up

    def send_to_lms(self, service):
        """Queue this assignment's counted scores for the LMS columns they were launched from, from now on."""
        self.lms = LtiScores(service.store, service.passback, out_of=self.points_possible, written=bool(self.written))
        self.recorder.outputs.append(self.lms)

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
        if Path(row.path).exists() or not target.exists():
            shutil.copyfile(row.path, target.with_suffix(".partial"))
            target.with_suffix(".partial").replace(target)
        write_atomically(root / "timestamp.txt", row.received_at)
        return target

    def record(self, result, notebook):
        """The counted `result` into every output. Raises only when its result file could not be
        written (then nothing else shows it, and the attempt is recorded again)."""
        if notebook is None:  # answered from another result, or finished after a restart: read it again
            try:
                notebook = sanitize(read_notebook(result.path), self.source, self.release).notebook
            except Exception:  # noqa: BLE001 (no autograded notebook then; the grade is recorded all the same)
                notebook = None
        result.graded_notebook = notebook
        try:
            recorded, problems = self.recorder.add(result)
        finally:
            result.graded_notebook = None
        self.changed = time.monotonic()
        self.dirty = True
        self.tell(problems)
        if not recorded:
            raise OSError(problems[-1][1])

    def flush(self, quiet=0.0, busy=False):
        """Finish every output (grades.csv, the class report, changes.csv, the gradebook's run)
        when a result changed and none came for `quiet` seconds; while the assignment's queue is
        `busy`, at most every BUSY_FINISH seconds (the report of a large class costs the service a
        second or two of the CPU its workers grade with). A problem leaves it to the next."""
        now = time.monotonic()
        if not self.dirty or now - self.changed < quiet or (busy and now - self.finished < BUSY_FINISH):
            return
        self.dirty, self.finished = False, now
        problems = self.recorder.finish(self.folder.results())
        self.tell(problems)
        if problems:
            self.dirty = True

    def tell(self, problems):
        """Keep the latest problems for the TA's page: one line each, the newest replacing an
        equal older one (a gradebook locked for an hour is one line, not 700)."""
        now = datetime.now(timezone.utc).isoformat()
        for student, what in problems:
            LOG.warning("%s%s: %s", self.assignment.name, f" {student}" if student else "", what)
            for old in [p for p in self.problems if p[1:] == (student, what)]:
                self.problems.remove(old)
            self.problems.append((now, student, what))


class Counting:
    """Decides and records what counts, for every assignment the service grades. grades.csv and the
    class report are written by a thread of their own, two quiet seconds after the last change, so
    that writing them (seconds, for a large class) never holds back a student's result."""

    QUIET = 2.0

    def __init__(self, service, roster=None):
        self.service = service
        self.records = {a.name: AssignmentRecord(a, roster, service.root / "counted") for a in service.assignments}
        if service.passback is not None:  # each counted score also goes to the LMS columns it was launched from
            for record in self.records.values():
                record.send_to_lms(service)
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
        if not Path(chosen.path).exists() and chosen.id != row.id:  # pruned (service/prune.py)
            if chosen.answers_key and chosen.answers_key == key:
                chosen = dataclasses.replace(chosen, path=row.path)  # the same answers, uploaded again just now
            else:
                record.tell([(row.student_id, f"the upload of the attempt that counts ({chosen.id}) was pruned;"
                                              " its counted copy is the older one")])
        counted = record.counted_result(chosen, results[chosen.id])
        record.record(counted, notebook if chosen.id == row.id else None)
        return chosen.id

    def flush(self, quiet=0.0):
        for name, record in self.records.items():
            try:
                record.flush(quiet, busy=bool(quiet) and self.service.lanes[name].busy())
            except Exception as error:  # noqa: BLE001 (the folder could not be read: the next flush)
                record.dirty = True
                record.tell([("", f"the graded folder could not be read ({error})")])

    def close(self):
        self.stopping.set()
        if self.thread.is_alive():
            self.thread.join(timeout=120)
        self.flush()  # every output's run ends: the gradebook's writer closes its connection
