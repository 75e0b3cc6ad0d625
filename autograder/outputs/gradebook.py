"""nbgrader's gradebook: every result's scores, written while the workers grade.

The JSON results stay the source of truth; the gradebook is rebuilt from them at the end
of every run, so formgrader and `nbgrader export` see what grades.csv shows.
"""
import contextlib
from pathlib import Path

from autograder.outputs.base import IMPORTS, Output, brief
from autograder.outputs.gradebook_db import gradebook_url, quiet


def _ensure_assignment(gradebook, db_url, course, assignment):
    """The assignment, its notebook and grade cells, as generate_assignment records them."""
    from nbgrader.api import MissingEntry

    try:
        found = gradebook.find_assignment(assignment)
        if found.notebooks:
            return
    except MissingEntry:
        pass
    import nbformat
    from nbgrader.preprocessors import ComputeChecksums, SaveCells

    source = nbformat.read(Path(course) / "source" / assignment / f"{assignment}.ipynb", as_version=4)
    resources = {"nbgrader": {"db_url": db_url, "assignment": assignment, "notebook": assignment}}
    gradebook.update_or_create_assignment(assignment)
    source, resources = ComputeChecksums().preprocess(source, resources)
    SaveCells().preprocess(source, resources)


class GradebookSync:
    """One open gradebook session that writes results' scores (idempotently).

    It remembers every student's scores, read once when it opens, so results
    whose scores the gradebook already has cost nothing: rerunning a batch, or
    handing it all results at the end, is cheap. Manual scores a TA entered
    (concept questions, overrides) are kept.
    """

    def __init__(self, course, assignment, db_url=None):
        from nbgrader.api import Gradebook

        self.assignment = assignment
        db_url = db_url or gradebook_url(course)
        with quiet():
            self.gradebook = Gradebook(db_url)
            try:
                self._open(course, db_url)
            except BaseException:
                self.gradebook.close()
                raise

    def _open(self, course, db_url):
        if db_url.startswith("sqlite"):
            # nbgrader commits once per new submission; without a disk flush each time,
            # 100 students take a second instead of several. The JSON results stay the
            # source of truth, and every run rebuilds the gradebook from them.
            from sqlalchemy import text

            self.gradebook.db.execute(text("PRAGMA synchronous=OFF"))
        _ensure_assignment(self.gradebook, db_url, course, self.assignment)
        self.known = {}  # student -> {grade cell: auto score}, for students whose notebook is in
        self.submitted = {}  # student -> id of their submission row, with or without its notebook
        self.penalties = {}  # student -> the late penalty on their notebook (None: none), where it is in
        self.stamps = {}  # student -> the hand-in time the gradebook holds (naive UTC), where it is in
        for submission in self.gradebook.assignment_submissions(self.assignment):
            self.submitted[submission.student.id] = submission.id
            if submission.notebooks:
                graded = next((n for n in submission.notebooks if n.name == self.assignment), submission.notebooks[0])
                self.known[submission.student.id] = {g.name: g.auto_score for g in graded.grades}
                self.penalties[submission.student.id] = graded.late_submission_penalty or None
                self.stamps[submission.student.id] = submission.timestamp
        self.layout = None  # assignment_layout(), once a new student needs it
        self.failed = {}  # student -> why their result is not in the gradebook (see write)

    def write(self, results):
        """Write `results` in one commit. When that fails, each result is written in a commit
        of its own, so one that cannot be written (a time the database cannot hold, say)
        never rolls back anyone else's. Returns {student: why} for those that could not be
        written (also kept in `failed` until a later write succeeds); they stay in the JSON
        results, and the next sync tries them again."""
        from sqlalchemy.exc import OperationalError

        results = [result for result in results if result.finished]
        try:
            self._commit(results)
        except OperationalError:  # the database's own trouble (locked, full): no one result's
            raise
        except Exception:  # noqa: BLE001 (one result at a time finds whose it is)
            if len(results) <= 1:
                failed = {result.student_id: _why() for result in results}
            else:
                failed = {}
                for result in results:
                    try:
                        self._commit([result])
                    except Exception:  # noqa: BLE001
                        failed[result.student_id] = _why()
        else:
            failed = {}
        for result in results:
            if result.student_id not in failed:
                self.failed.pop(result.student_id, None)
        self.failed.update(failed)
        return failed

    def _commit(self, results):
        known, submitted, penalties, stamps = dict(self.known), dict(self.submitted), dict(self.penalties), dict(self.stamps)
        try:  # (their values are replaced, never changed)
            with quiet(), _one_commit(self.gradebook.db):
                self._write(results)
        except BaseException:  # rolled back: not in the gradebook after all
            self.known, self.submitted, self.penalties, self.stamps = known, submitted, penalties, stamps
            raise

    def _write(self, results):
        gradebook, assignment = self.gradebook, self.assignment
        new = {}  # student -> result, for students whose notebook is not in the gradebook yet
        for result in results:
            if not result.finished:
                continue
            student, scores = result.student_id, result.scores
            # The penalty is compared too: a late policy changed or removed since (a penalty now
            # 0) must reach nbgrader's gradebook, as it reaches grades.csv.
            stamp = _naive_utc(result.submitted_at) if result.submitted_at else None
            if student in self.known and all(self.known[student].get(n) == v for n, v in scores.items()) \
                    and (result.late_penalty or None) == self.penalties.get(student) \
                    and (stamp is None or stamp == self.stamps.get(student)):
                continue  # the gradebook has it all: a finish handing every result again costs nothing
            if student not in self.known:
                new[student] = result  # (one student twice in one call: the last result counts)
                continue
            submission = gradebook.find_submission_notebook(assignment, assignment, student)  # notebook, assignment, student
            submission.late_submission_penalty = result.late_penalty or None  # nbgrader's own field
            if stamp is not None:
                submission.assignment.timestamp = stamp
                self.stamps[student] = stamp
            with gradebook.db.no_autoflush:  # one flush at the commit, not one per grade read
                for grade in submission.grades:
                    if grade.name in scores:
                        grade.auto_score = scores[grade.name]
                        grade.needs_manual_grade = grade.manual_score is not None
                    elif grade.manual_score is None:
                        grade.needs_manual_grade = True  # a written answer for formgrader
            self.known[student] = {**self.known[student], **scores}
            self.penalties[student] = result.late_penalty or None
        if new:
            if self.layout is None:  # read once: the assignment's cells do not change during a batch
                self.layout = assignment_layout(gradebook, assignment)
            self.submitted.update(_add_graded_submissions(gradebook, self.layout, new.values(), self.submitted))
            for student, result in new.items():
                self.known[student] = dict(result.scores)
                self.penalties[student] = result.late_penalty or None
                self.stamps[student] = _naive_utc(result.submitted_at) if result.submitted_at else None
        gradebook.db.commit()

    def close(self):
        with quiet():
            self.gradebook.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def assignment_layout(gradebook, assignment):
    """What a new submission of `assignment` is made of, as plain data: (assignment id,
    id of the notebook named after the assignment (the one we grade), [(notebook id,
    {grade and task cell id: name}, [solution and task cell ids])] for every notebook)."""
    from nbgrader.api import MissingEntry

    found = gradebook.find_assignment(assignment)
    notebooks = [(notebook.id, {cell.id: cell.name for cell in [*notebook.grade_cells, *notebook.task_cells]},
                  [cell.id for cell in [*notebook.solution_cells, *notebook.task_cells]])
                 for notebook in found.notebooks]
    graded = next((notebook.id for notebook in found.notebooks if notebook.name == assignment), None)
    if graded is None:  # as nbgrader's find_submission_notebook would say
        raise MissingEntry(f"the gradebook's assignment {assignment} has no notebook named {assignment}")
    return found.id, graded, notebooks


def _add_graded_submissions(gradebook, layout, results, submitted):
    """For students whose notebook is not in the gradebook yet: what nbgrader's
    `add_submission` creates (the submission, its notebooks, one grade per graded and task
    cell, one comment per solution and task cell), with the scores and late penalty on the
    notebook we grade, in a few bulk inserts. nbgrader's own calls took about 9 ms per
    student on the grader's process, CPU that the workers grading next to it then lack.
    `layout`: assignment_layout(); `submitted`: {student: id of a submission row that
    already exists}, which is kept. Returns {student: submission id}; the caller commits."""
    from nbgrader.api import Comment, Grade, Student, SubmittedAssignment, SubmittedNotebook, new_uuid
    from sqlalchemy import insert, select, update

    results = list(results)
    session = gradebook.db
    assignment_id, graded_notebook, notebooks = layout
    ids = [result.student_id for result in results]
    existing = set(session.scalars(select(Student.id).where(Student.id.in_(ids))))
    students = [{"id": student} for student in dict.fromkeys(ids) if student not in existing]
    written, submissions, submitted_notebooks, grades, comments = {}, [], [], [], []
    for result in results:
        stamp = _naive_utc(result.submitted_at) if result.submitted_at else None
        submission_id = submitted.get(result.student_id)
        if submission_id is None:
            submission_id = new_uuid()
            submissions.append({"id": submission_id, "assignment_id": assignment_id,
                                "student_id": result.student_id, "timestamp": stamp})
        elif stamp is not None:
            session.execute(update(SubmittedAssignment.__table__)
                            .where(SubmittedAssignment.__table__.c.id == submission_id).values(timestamp=stamp))
        written[result.student_id] = submission_id
        for notebook, graded_cells, commented_cells in notebooks:
            notebook_id = new_uuid()
            scores = result.scores if notebook == graded_notebook else {}
            penalty = (result.late_penalty or None) if notebook == graded_notebook else None
            submitted_notebooks.append({"id": notebook_id, "assignment_id": submission_id, "notebook_id": notebook,
                                        "flagged": False, "late_submission_penalty": penalty})
            for cell_id, name in graded_cells.items():
                graded = name in scores
                grades.append({"id": new_uuid(), "notebook_id": notebook_id, "cell_id": cell_id,
                               "auto_score": scores[name] if graded else None, "manual_score": None,
                               "extra_credit": None, "needs_manual_grade": not graded})
            for cell_id in commented_cells:
                comments.append({"id": new_uuid(), "notebook_id": notebook_id, "cell_id": cell_id,
                                 "auto_comment": None, "manual_comment": None})
    for table, rows in ((Student, students), (SubmittedAssignment, submissions), (SubmittedNotebook, submitted_notebooks),
                        (Grade, grades), (Comment, comments)):
        if rows:
            session.execute(insert(table.__table__), rows)
    return written


@contextlib.contextmanager
def _one_commit(session):
    """nbgrader commits after every new student and submission; inside this block those
    commits only flush, and the block commits once (about 40% of the gradebook's time for
    a class of new students). A failure rolls the block back; the JSON results stay the
    source of truth, and the next sync writes what is missing."""
    commit = session.commit
    session.commit = session.flush
    try:
        yield
        del session.commit
        commit()
    except BaseException:
        session.__dict__.pop("commit", None)
        session.rollback()
        raise


def _why():
    """The exception being handled, in one bounded line."""
    import sys

    error = sys.exc_info()[1]
    text = " ".join(str(error).split())
    return f"{type(error).__name__}: {text[:300]}" if text else type(error).__name__


def sync_gradebook(course, assignment, results, db_url=None):
    """Write every result's scores into nbgrader's gradebook (idempotent). Returns {student:
    why} for results that could not be written (the others are)."""
    with GradebookSync(course, assignment, db_url) as gradebook:
        return gradebook.write(results)


def _busy(error):
    """Whether an error is the database being busy (another writer, a TA's open formgrader
    transaction, a lock held by hand): worth waiting for, unlike a full disk or a broken file."""
    text = str(getattr(error, "orig", error)).lower()
    return "locked" in text or "busy" in text


class _Sync:
    """A request to the writer's thread: write `results` (waiting at most until `deadline` for a
    busy database), say which could not be written, and with `stop` end the thread."""

    def __init__(self, results, deadline, stop):
        import threading

        self.results, self.deadline, self.stop = list(results), deadline, stop
        self.failed, self.done = {}, threading.Event()


class GradebookWriter:
    """Writes results into the gradebook from a background thread while grading goes on.

    nbgrader's gradebook takes about 40 ms per new submission (and seconds to
    create a new database); doing that while the workers grade hides most of
    it. The thread keeps one `GradebookSync` open until `finish`. A busy database (locked by
    another writer) is waited for, with growing pauses, while grading goes on: results queue
    up meanwhile and are written once it is free, so a locked gradebook never costs a grade.
    `sync(results, patience)` writes whatever is still missing, waiting at most `patience`
    seconds more for a busy database, and returns {student: why} for results it could not
    write; `finish` does the same and ends the thread. Both re-raise an error that stopped the
    thread (the gradebook could not be opened, or stayed locked past the patience).
    """

    PAUSES = (0.2, 0.5, 1.0, 2.0, 5.0)  # seconds between tries while the database is busy

    def __init__(self, course, assignment, db_url=None):
        import queue
        import threading
        import time

        self.course, self.assignment, self.db_url = course, assignment, db_url
        self.queue = queue.Queue()
        self.error = None
        self.waited = 0.0  # seconds spent waiting for a busy database, for the TA's note
        self.opened = time.monotonic()
        self.requested = None  # the earliest deadline a sync or finish asked for: waiting stops there
        self.thread = threading.Thread(target=self._run, name="gradebook", daemon=True)
        self.thread.start()

    def add(self, result):
        self.queue.put(result)

    def _patiently(self, action):
        """`action()`, tried again while the database is busy, until a sync or finish's deadline."""
        import time

        from sqlalchemy.exc import OperationalError

        tries = 0
        while True:
            try:
                return action()
            except OperationalError as error:
                if not _busy(error) or (self.requested is not None and time.monotonic() > self.requested):
                    raise
                pause = self.PAUSES[min(tries, len(self.PAUSES) - 1)]
                time.sleep(pause)
                self.waited += pause
                tries += 1

    def _run(self):
        pending = []
        try:
            with IMPORTS:  # nbgrader and SQLAlchemy load here
                gradebook = self._patiently(lambda: GradebookSync(self.course, self.assignment, self.db_url))
            # Opened in this thread: an SQLite connection belongs to the thread that made it.
            with gradebook:
                while True:
                    pending.append(self.queue.get())
                    while not self.queue.empty():
                        pending.append(self.queue.get())
                    results = [item for item in pending if not isinstance(item, _Sync)]
                    requests = [item for item in pending if isinstance(item, _Sync)]
                    self._patiently(lambda: gradebook.write(results))
                    pending = requests
                    for request in requests:  # every result of the folder: anything from earlier runs
                        self._patiently(lambda: gradebook.write(request.results))
                        request.failed = dict(gradebook.failed)
                        pending.remove(request)
                        request.done.set()
                        if request.stop:
                            return
                    self.requested = None  # answered: waiting for a busy database is unbounded again
        except BaseException as error:  # noqa: B036 (reported by sync/finish; the JSON results are safe)
            self.error = error
            while not self.queue.empty():
                pending.append(self.queue.get())
            for item in pending:
                if isinstance(item, _Sync):
                    item.done.set()

    def _ask(self, results, patience, stop):
        import time

        if self.error is not None:
            raise self.error
        request = _Sync(results, time.monotonic() + patience, stop)
        self.requested = min(request.deadline, self.requested or request.deadline)
        self.queue.put(request)
        while not request.done.wait(1.0):
            if not self.thread.is_alive():  # stopped before it could answer
                break
        if self.error is not None:
            raise self.error
        return request.failed

    def sync(self, results, patience=60.0):
        return self._ask(results, patience, stop=False)

    def finish(self, results, patience=60.0):
        try:
            return self._ask(results, patience, stop=True)
        finally:
            self.thread.join(timeout=patience + 60)


class Gradebook(Output):
    """nbgrader's gradebook (formgrader, `nbgrader export`): each result as it is graded, from
    a background thread, then every result in the folder at `finish`; a busy database is
    waited for up to `patience` seconds there. A batch's `finish` ends its run (the connection
    closes). A service finishes whenever its queue is quiet: then the connection stays open for
    `reopen_after` seconds (reading a class's gradebook afresh costs a second of the service's
    CPU) and is closed at the first quiet moment after, so scores written by another program
    meanwhile (a TA's `autograder grade`) are read afresh within minutes and nothing is held
    for a term. `add` and `finish` may come from two threads: they take turns."""

    what = "its grades in nbgrader's gradebook"

    def __init__(self, course_root, assignment, results_in, db_url=None, patience=60.0, reopen_after=0.0):
        """`db_url`: another gradebook than the course's (a scratch one, `grade --scratch`)."""
        import threading

        self.course_root, self.assignment, self.results_in, self.db_url = course_root, assignment, results_in, db_url
        self.patience, self.reopen_after = patience, reopen_after
        self.writer = None
        self.lock = threading.Lock()

    def add(self, result):
        with self.lock:
            if self.writer is None:  # a thread only now: the workers are made (a forked pool copies this process)
                self.writer = GradebookWriter(self.course_root, self.assignment, self.db_url)
            self.writer.add(result)

    def finish(self, results):
        import time

        with self.lock:  # (an add waits: otherwise the run ending here could write after the next one)
            writer = self.writer
            keep = writer is not None and writer.error is None and time.monotonic() - writer.opened < self.reopen_after
            if not keep:
                self.writer = None  # the next add starts the next run
            try:
                if writer is None:
                    writer = GradebookWriter(self.course_root, self.assignment, self.db_url)
                unwritten = writer.sync(results, self.patience) if keep else writer.finish(results, self.patience)
            except Exception as error:  # noqa: BLE001 (the JSON results are safe; the other outputs follow)
                self.writer = None
                return [("", f"nbgrader's gradebook was not updated ({brief(error)}); the results are in"
                             f" {self.results_in}, and the next run writes them")]
        return [(student, f"its grades could not be written to nbgrader's gradebook ({why}); the next run"
                          " tries again") for student, why in sorted(unwritten.items())]


def _naive_utc(text):
    """nbgrader keeps times as naive UTC datetimes."""
    from datetime import datetime, timezone

    moment = datetime.fromisoformat(text)
    return moment.astimezone(timezone.utc).replace(tzinfo=None) if moment.tzinfo else moment


