"""Grading as submissions arrive: one lane per assignment, warm workers, one recorder.

A lane keeps its assignment's workers and sandboxes warm (grading/scheduler.py WarmPool)
and grades its queue `jobs` at a time, students taking turns (service/fairqueue.py). Before
anything runs, a submission's answers key (runs/identical.py) is looked up: answers the same
student had graded before are answered from that result at once. Answers another student had
graded wait their turn and arrive as late as a fresh grading would (the time that grading took,
from when a worker would have started), without running: a quick answer would tell a student
that someone handed in exactly these answers. Every result goes to one recorder thread,
which writes it (the attempt's result file, then its database row, so a crash between the
two is finished on restart without grading again) and, when the attempt is the one that
counts, records it in graded/<assignment>/ and nbgrader's gradebook (service/counting.py).

A grader fault (a worker killed, a sandbox that would not start) is never the student's: the
submission is graded again, up to MAX_TRIES times, and then stays an error the TA sees,
without costing the student an attempt.
"""
import queue
import threading
import traceback
from dataclasses import dataclass
from pathlib import Path

from autograder.grading.notebook import InvalidNotebook, Submission
from autograder.grading.scheduler import REFUSALS
from autograder.grading.submission import BatchSpec
from autograder.record import ERROR as RESULT_ERROR
from autograder.record import read_result, write_result
from autograder.runs.recording import graded_folder, read_release, read_source
from autograder.runs.identical import IdenticalAnswers
from autograder.service.fairqueue import FairQueue
from autograder.service.store import ERROR, GRADED, QUEUED, REPLACED, RUNNING, stamp

MAX_TRIES = 3


@dataclass
class Prepared:
    """A submission read and sanitized once, with its answers key, on its way to a lane."""

    key: str
    clean: object  # grading/notebook.py Sanitized
    sha: str  # of the bytes read
    by: object  # the IdenticalAnswers that made the key (a regrade makes a new one: keys change)


@dataclass
class Done:
    """A result on its way to the recorder."""

    submission_id: str
    result: object  # record.Result
    notebook: object = None  # the sanitized notebook, for autograded/
    key: str = ""  # its answers key ("" for a file that could not be read)


class Lane:
    """One assignment's queue, warm workers and identical answers."""

    def __init__(self, service, assignment, jobs, isolation):
        self.service, self.assignment = service, assignment
        self.folder = graded_folder(assignment).make()
        self.spec = BatchSpec(assignment=assignment.name, course=str(assignment.course.root), seed=self.folder.seed(),
                              limits=assignment.limits, isolation=isolation, keep_notebook=True)
        self.identical = IdenticalAnswers(assignment, self.spec, self.folder, read_source(assignment),
                                          read_release(assignment))
        self.jobs = jobs
        self.pool = service.make_pool(self.spec, jobs)
        self.width = self.slots = None  # submissions in flight at once: a cluster's size is known once started
        self.queue = FairQueue()  # students take turns: one student's many never hold up the rest
        self.thread = threading.Thread(target=self._run, name=f"lane-{assignment.name}", daemon=True)
        self.results = service.root / "results" / assignment.name
        self.results.mkdir(parents=True, exist_ok=True)
        self.running = threading.Event()  # cleared while a regrade holds the lane
        self.running.set()

    def pause(self):
        """Stop taking submissions from the queue, and wait for those being graded."""
        self.running.clear()
        for _ in range(self.width):
            self.slots.acquire()
        for _ in range(self.width):
            self.slots.release()

    def resume(self):
        """Go on with fresh workers, which read the checks, settings and solutions as they are now."""
        self.pool.close()
        self.identical = IdenticalAnswers(self.assignment, self.spec, self.folder, read_source(self.assignment),
                                          read_release(self.assignment))
        self.pool = self.service.make_pool(self.spec, self.jobs).start()
        self.running.set()

    def start(self):
        self.pool.start()
        self.width = self.pool.jobs
        self.slots = threading.Semaphore(self.width)
        self.thread.start()
        return self

    def read(self, path, student_id):
        """A Prepared of the notebook at `path`; InvalidNotebook (saying why) or OSError when it cannot
        be graded."""
        clean, sha = self.identical.read(path)
        return Prepared(self.identical.key_of(clean, Submission(student_id, Path(path))), clean, sha, self.identical)

    def take(self, row, prepared=None):
        """Grade the submission `row` (its notebook read already, as `prepared`, or not): answers graded
        before get their result at once, the others wait in the queue, in the place of whatever
        their student still had waiting there (marked replaced: never graded, no attempt spent)."""
        done = self._answered_at_once(row, prepared) if prepared is not None else None
        if done is not None:
            self.service.recorder.put(done)
            return
        replaced = [item[0] for item in self.queue.put(row.student_id, (row.id, prepared), replace=True)]
        if replaced:
            self.service.store.replace(replaced, row.id)
            for old in map(self.service.store.get, replaced):  # never graded, never counting: its upload
                if old is not None and old.status == REPLACED:  # is needed by nothing (the disk stays bounded)
                    Path(old.path).unlink(missing_ok=True)

    def put(self, submission_id):
        """Grade the submission `submission_id` (acknowledged before, or to try again) in its student's turn."""
        row = self.service.store.get(submission_id)
        if row is not None:
            self.queue.put(row.student_id, (submission_id, None))

    def position(self, row):
        """The submission `row`'s place in the queue: 1 when running or next; None when done."""
        if row.status not in (QUEUED, RUNNING):
            return None
        ahead = self.queue.ahead(row.id) if row.status == QUEUED else None
        if ahead is None:  # running, or on its way to a worker
            return 1
        return self.service.store.running(row.assignment) + ahead + 1

    def busy(self):
        """Whether submissions of this lane wait or are being graded."""
        return len(self.queue) > 0 or self.queue.running() > 0

    def result_path(self, submission_id):
        return self.results / f"{submission_id}.json"

    def _answered_at_once(self, row, prepared):
        """A Done for a submission whose answers its own student had graded before (None otherwise)."""
        cached = self.identical.cached(prepared.key)
        if cached is None or cached.student_id != row.student_id:
            return None
        return self._from(cached, row, prepared)

    @staticmethod
    def _from(cached, row, prepared):
        return Done(row.id, cached.copy_for(row.student_id, row.path, prepared.sha), prepared.clean.notebook,
                    prepared.key)

    def _answer_later(self, cached, row, prepared):
        """Answer `row` from another student's result of the same answers once a fresh grading would
        have ended: that grading's time from now (a worker was free just now). The checks changed
        meanwhile (a regrade): it goes back in the queue instead."""
        def answer():
            try:
                if prepared.by is self.identical:
                    self.service.recorder.put(self._from(cached, row, prepared))
                else:
                    self.put(row.id)
            finally:
                self.queue.done(row.id)

        self.service.store.set_status(row.id, RUNNING)
        timer = threading.Timer(max(cached.execution_time, 0.0), answer)
        timer.daemon = True  # stopped with the service: the row, still running, is taken again on restart
        timer.start()

    def _run(self):
        while True:
            item = self.queue.get()
            if item is None:
                return
            self.running.wait()
            later = False
            try:
                later = self._dispatch(*item)
            except Exception:  # noqa: BLE001 (one submission's trouble must not stop the lane)
                self.service.recorder.failed(item[0], traceback.format_exc(limit=3))
            if not later:  # else the grading's callback or the timed answer says it is done
                self.queue.done(item[0])

    def _dispatch(self, submission_id, prepared):
        """Start grading one submission; True when what was started ends later (a worker's
        grading, or an answer timed as one), and says then that it is done."""
        store = self.service.store
        row = store.get(submission_id)
        if row is None or row.status not in (QUEUED, RUNNING):
            return
        written = read_result(None, None, self.result_path(row.id))
        if written is not None:  # graded before a crash, its row not yet updated: finish it, never twice
            self.service.recorder.put(Done(row.id, written, None, written.answers_key))
            return
        if prepared is None or prepared.by is not self.identical:  # after a restart, or keys of older checks
            try:
                prepared = self.read(row.path, row.student_id)
            except (InvalidNotebook, OSError):  # gone unreadable since it was taken: graded as it is, invalid
                prepared = None
        done = self._answered_at_once(row, prepared) if prepared is not None else None
        if done is not None:
            self.service.recorder.put(done)
            return
        submission = Submission(row.student_id, Path(row.path))
        key = prepared.key if prepared is not None else None
        if prepared is not None:
            submission.sha256, submission.clean = prepared.sha, prepared.clean
        elsewhere = self.identical.cached(key) if key else None  # another student's result of these answers
        while True:  # a slot, while no regrade holds the lane (see pause)
            self.running.wait()
            self.slots.acquire()
            if self.running.is_set():
                break
            self.slots.release()
        if elsewhere is not None:
            self.slots.release()  # nothing runs: the slot only times the answer as a fresh grading's
            self._answer_later(elsewhere, row, prepared)
            return True
        store.set_status(row.id, RUNNING)
        try:
            future = self.pool.submit(submission)
        except BaseException:
            self.slots.release()
            raise
        future.add_done_callback(lambda f: self._graded(row.id, key or "", f))
        return True

    def _graded(self, submission_id, key, future):
        self.slots.release()
        try:
            result = future.result()
        except REFUSALS as refusal:  # the machine may no longer grade: every submission waits
            self.service.recorder.failed(submission_id, f"grading refused: {refusal}", retry=False)
            return
        finally:
            self.queue.done(submission_id)
        notebook, result.graded_notebook = result.graded_notebook, None
        self.service.recorder.put(Done(submission_id, result, notebook, key))

    def close(self):
        self.queue.close()
        self.thread.join(timeout=60)
        self.pool.close()


class Recorder:
    """The one thread that writes results: files, rows, and what counts (service/counting.py)."""

    def __init__(self, service):
        self.service = service
        self.queue = queue.Queue()
        self.thread = threading.Thread(target=self._run, name="recorder", daemon=True)

    def start(self):
        self.thread.start()
        return self

    def put(self, done):
        self.queue.put(done)

    def failed(self, submission_id, why, retry=True):
        self.put(("failed", submission_id, why, retry))

    def _run(self):
        while True:
            item = self.queue.get()
            if item is None:
                return
            try:
                if isinstance(item, tuple):
                    self._failed(*item[1:])
                else:
                    self._record(item)
            except Exception:  # noqa: BLE001 (said in the row; the next restart tries again)
                submission_id = item[1] if isinstance(item, tuple) else item.submission_id
                self._failed(submission_id, traceback.format_exc(limit=3), retry=True)

    def _record(self, done):
        store, result = self.service.store, done.result
        row = store.get(done.submission_id)
        if row is None or row.status == GRADED:
            return
        if result.status == RESULT_ERROR:
            self._failed(row.id, "; ".join(result.notes) or "grader error", retry=True)
            return
        lane = self.service.lanes[row.assignment]
        if done.key and not result.reused:  # the graded result, with its time and student, never a copy's
            lane.identical.keep(done.key, result)
        write_result(None, result, lane.result_path(row.id))
        counted = self.service.counting.graded(row, result, done.key or result.answers_key, done.notebook)
        store.finish(row, result.score, done.key or result.answers_key, counted)

    def _failed(self, submission_id, why, retry=True):
        store = self.service.store
        row = store.get(submission_id)
        if row is None:
            return
        tries = row.tries + 1
        if retry and tries < MAX_TRIES:
            store.set_status(row.id, QUEUED, tries=tries, detail=why[-2000:])
            self.service.lanes[row.assignment].put(row.id)
        else:  # the grader's fault, not the student's: it costs no attempt
            store.set_status(row.id, ERROR, tries=tries, attempt=0, detail=why[-2000:], graded_at=stamp())

    def close(self):
        self.queue.put(None)
        self.thread.join(timeout=60)
