"""The gradebook: scores written once per student, kept in step with the results, manual scores kept."""
import time

import nbformat
import pytest
from nbgrader.api import Gradebook

from autograder.outputs.gradebook import GradebookWriter, sync_gradebook
from autograder.outputs.gradebook_db import gradebook_url
from autograder.grading.notebook import grade_cells, manual_cells
from helpers import make_result

ASSIGNMENT = "causal_attention"


@pytest.fixture
def cells(course):
    return grade_cells(nbformat.read(course / "source" / ASSIGNMENT / f"{ASSIGNMENT}.ipynb", as_version=4))


def scores(course):
    with Gradebook(gradebook_url(course)) as gradebook:
        found = {}
        for submission in gradebook.assignment_submissions(ASSIGNMENT):
            grades = submission.notebooks[0].grades
            found[submission.student.id] = {g.name: (g.auto_score, g.manual_score, g.needs_manual_grade)
                                            for g in grades}
        return found


def test_sync_writes_updates_and_keeps_manual_scores(course, cells):
    sync_gradebook(course, ASSIGNMENT, [make_result("ann", cells, fraction=1.0),
                                        make_result("bo", cells, fraction=0.5),
                                        make_result("cat", cells, status="error", fraction=0.0)])
    written = scores(course)
    assert set(written) == {"ann", "bo"}  # a grader error is graded again later, not recorded as 0
    assert all(written["ann"][name][0] == points for name, points in cells.items())
    question = next(iter(manual_cells(nbformat.read(
        course / "source" / ASSIGNMENT / f"{ASSIGNMENT}.ipynb", as_version=4))))
    first_cell = next(iter(cells))
    with Gradebook(gradebook_url(course)) as gradebook:  # a TA's work in formgrader
        notebook = gradebook.find_submission_notebook(ASSIGNMENT, ASSIGNMENT, "ann")
        for grade in notebook.grades:
            if grade.name in (question, first_cell):
                grade.manual_score = 0.5
        gradebook.db.commit()
    # both regraded with other scores: automatic scores change, the TA's stay
    sync_gradebook(course, ASSIGNMENT, [make_result("ann", cells, fraction=0.5),
                                        make_result("bo", cells, fraction=0.25)])
    again = scores(course)
    assert again["ann"][question][1] == 0.5 and again["ann"][first_cell][1] == 0.5
    assert again["ann"][first_cell][0] == round(cells[first_cell] * 0.5, 2)
    assert all(again["ann"][name][0] == round(points * 0.5, 2) for name, points in cells.items())
    assert all(again["bo"][name][0] == round(points * 0.25, 2) for name, points in cells.items())
    assert again["bo"][question][2] is True  # the written answer still waits for a TA


def test_the_writer_reads_once_and_writes_each_student_once(course, cells, monkeypatch):
    from autograder.outputs import gradebook as module

    sync_gradebook(course, ASSIGNMENT, [make_result("early", cells, fraction=1.0)])  # graded by an earlier run
    written = []
    real, real_bulk = Gradebook.find_submission_notebook, module._add_graded_submissions

    def counting(self, notebook, assignment, student):
        written.append(student)
        return real(self, notebook, assignment, student)

    def counting_bulk(gradebook, layout, results, submitted):
        results = list(results)
        written.extend(r.student_id for r in results)
        return real_bulk(gradebook, layout, results, submitted)

    monkeypatch.setattr(Gradebook, "find_submission_notebook", counting)
    monkeypatch.setattr(module, "_add_graded_submissions", counting_bulk)
    reads = []
    listing = Gradebook.assignment_submissions
    monkeypatch.setattr(Gradebook, "assignment_submissions", lambda self, a: reads.append(a) or listing(self, a))
    writer = GradebookWriter(course, ASSIGNMENT)
    # every one handed in at a known time, as the service's results are: the gradebook keeps it
    batch = [make_result(f"s{index}", cells, fraction=index / 10, submitted_at=f"2026-11-20T1{index}:00:00+00:00")
             for index in range(6)]
    for item in batch:
        writer.add(item)
        time.sleep(0.05)  # results arrive one by one while grading goes on
    missed = make_result("killed-before-the-gradebook", cells, fraction=0.5)  # its JSON exists, its row does not
    writer.sync([make_result("early", cells, fraction=1.0), missed, *batch])  # a service's quiet moment
    assert sorted(written) == sorted([*(r.student_id for r in batch), "killed-before-the-gradebook"])
    # the next quiet moment hands every result again: what the gradebook has costs nothing
    writer.finish([make_result("early", cells, fraction=1.0), missed, *batch])
    assert len(reads) == 1  # the gradebook is read once per batch, not once per result
    assert set(scores(course)) == {"early", "killed-before-the-gradebook", *(f"s{i}" for i in range(6))}


def test_a_failed_write_leaves_nothing_half_done_and_the_next_one_writes_it(course, cells, monkeypatch):
    """A write is one commit; when that commit fails for the database's own reason (SQLite's
    disk full) the whole write is rolled back, and the session does not believe the gradebook
    has what was rolled back: the next write writes it."""
    from sqlalchemy.exc import OperationalError
    from sqlalchemy.orm import Session

    from autograder.outputs.gradebook import GradebookSync

    real = Session.commit
    failures = []

    def failing_once(self):
        if not failures:
            failures.append(True)
            raise OperationalError("COMMIT", {}, Exception("database or disk is full"))
        return real(self)

    with GradebookSync(course, ASSIGNMENT) as gradebook:
        gradebook.write([make_result("ann", cells, fraction=1.0)])  # known before: its new score is rolled back
        monkeypatch.setattr(Session, "commit", failing_once)
        with pytest.raises(OperationalError, match="disk is full"):
            gradebook.write([make_result("ann", cells, fraction=0.5), make_result("bo", cells, fraction=0.5)])
        assert set(scores(course)) == {"ann"}  # bo's rows were rolled back with ann's new scores
        assert all(s[0] == cells[name] for name, s in scores(course)["ann"].items() if name in cells)
        gradebook.write([make_result("ann", cells, fraction=0.5), make_result("bo", cells, fraction=0.5)])
    written = scores(course)
    assert set(written) == {"ann", "bo"}
    assert all(written[s][name][0] == round(points * 0.5, 2) for s in ("ann", "bo") for name, points in cells.items())


def snapshot(course, student):
    """Everything the gradebook holds for one student's submission, as nbgrader reads it."""
    with Gradebook(gradebook_url(course)) as gradebook:
        submission = gradebook.find_submission(ASSIGNMENT, student)
        return {"timestamp": submission.timestamp, "score": submission.score, "max": submission.max_score,
                "needs_manual": submission.needs_manual_grade, "code_score": submission.code_score,
                "penalty": submission.late_submission_penalty,
                "notebooks": {notebook.name: {
                    "penalty": notebook.late_submission_penalty, "flagged": notebook.flagged,
                    "grades": sorted((g.name, g.auto_score, g.manual_score, g.extra_credit, g.needs_manual_grade)
                                     for g in notebook.grades),
                    "comments": sorted((c.name, c.auto_comment, c.manual_comment) for c in notebook.comments)}
                    for notebook in submission.notebooks}}


@pytest.mark.filterwarnings("ignore:Object of type")  # nbgrader's own add_submission, in the test
def test_new_students_get_the_rows_nbgrader_s_own_add_submission_makes(course, cells):
    """The bulk path for new students writes what nbgrader's ORM calls would: same grades,
    comments, flags, late penalty and hand-in time, and the same scores in nbgrader's eyes,
    also with a second notebook that has a task cell and a grade cell of the same name
    (only the notebook named after the assignment is graded)."""
    graded = make_result("bulk", cells, fraction=0.5)
    graded.late_penalty, graded.submitted_at = 1.5, "2026-03-01T10:00:00+00:00"
    sync_gradebook(course, ASSIGNMENT, [])  # the assignment, as generate_assignment records it
    with Gradebook(gradebook_url(course)) as gradebook:
        gradebook.update_or_create_student("bulk", first_name="Bea")  # known from another course action
        gradebook.update_or_create_notebook("extra", ASSIGNMENT)
        gradebook.update_or_create_grade_cell(next(iter(cells)), "extra", ASSIGNMENT, max_score=2.0,
                                              cell_type="code")
        gradebook.update_or_create_task_cell("extra-task", "extra", ASSIGNMENT, max_score=3.0, cell_type="markdown")
    sync_gradebook(course, ASSIGNMENT, [graded])
    with Gradebook(gradebook_url(course)) as gradebook:  # the same result, written nbgrader's own way
        gradebook.update_or_create_student("orm")
        gradebook.add_submission(ASSIGNMENT, "orm", timestamp="2026-03-01 10:00:00")
        notebook = gradebook.find_submission_notebook(ASSIGNMENT, ASSIGNMENT, "orm")
        notebook.late_submission_penalty = 1.5
        for grade in notebook.grades:
            if grade.name in graded.scores:
                grade.auto_score, grade.needs_manual_grade = graded.scores[grade.name], False
        gradebook.db.commit()
        assert gradebook.find_student("bulk").first_name == "Bea"  # an existing student is kept as is
    bulk, orm = snapshot(course, "bulk"), snapshot(course, "orm")
    assert bulk == orm
    assert bulk["penalty"] == 1.5  # nbgrader sums the notebooks' penalties: only one carries it
    mine = bulk["notebooks"][ASSIGNMENT]
    assert mine["grades"] and mine["comments"] and any(needs for *_, needs in mine["grades"])  # Q&A waits
    extra = bulk["notebooks"]["extra"]
    assert ("extra-task", None, None, None, True) in extra["grades"] and ("extra-task", None, None) in extra["comments"]
    assert all(auto is None for _, auto, *_ in extra["grades"])


def test_a_submission_without_its_notebook_gets_one(course, cells):
    """A submission row with no notebook (left by an interrupted nbgrader command) is completed,
    not added again (nbgrader's add_submission would break its one-per-student rule)."""
    from nbgrader.api import SubmittedAssignment

    sync_gradebook(course, ASSIGNMENT, [])  # the assignment, as generate_assignment records it
    with Gradebook(gradebook_url(course)) as gradebook:
        student = gradebook.update_or_create_student("half")
        gradebook.db.add(SubmittedAssignment(assignment=gradebook.find_assignment(ASSIGNMENT), student=student))
        gradebook.db.commit()
    late = make_result("half", cells, fraction=0.5)
    late.submitted_at = "2026-03-02T09:30:00+00:00"
    sync_gradebook(course, ASSIGNMENT, [late])
    written = scores(course)
    assert all(written["half"][name][0] == round(points * 0.5, 2) for name, points in cells.items())
    with Gradebook(gradebook_url(course)) as gradebook:
        assert len(gradebook.assignment_submissions(ASSIGNMENT)) == 1
        assert str(gradebook.find_submission(ASSIGNMENT, "half").timestamp) == "2026-03-02 09:30:00"



def test_one_result_the_gradebook_cannot_hold_rolls_back_no_one_else(course, cells):
    """A result from before submission times were checked, with a time Python cannot convert
    to UTC (year 1 at +01:00), used to roll back the whole class's gradebook write. Now the
    others are written, and the one is named with why, by the writer thread too."""
    bad = make_result("year1", cells, fraction=1.0)
    bad.submitted_at = "0001-01-01T00:30:00+01:00"
    failed = sync_gradebook(course, ASSIGNMENT, [make_result("ann", cells, fraction=1.0), bad,
                                                 make_result("bo", cells, fraction=0.5)])
    assert set(failed) == {"year1"} and "OverflowError" in failed["year1"]
    assert set(scores(course)) == {"ann", "bo"}
    writer = GradebookWriter(course, ASSIGNMENT)
    for student in ("cat", "dan"):
        writer.add(make_result(student, cells, fraction=0.25))
    writer.add(bad)
    failed = writer.finish([make_result("eve", cells, fraction=1.0), bad])
    assert set(failed) == {"year1"}
    assert set(scores(course)) == {"ann", "bo", "cat", "dan", "eve"}
    assert all(scores(course)["dan"][name][0] == round(points * 0.25, 2) for name, points in cells.items())


def hold_lock(path, seconds):
    """Another process's view of the gradebook: an exclusive transaction held for `seconds`
    (as a TA's long formgrader write, or a backup tool, would), from a thread of its own.
    Returns (thread, locked): `locked` is set once the lock is held."""
    import sqlite3
    import threading

    locked = threading.Event()

    def hold():
        connection = sqlite3.connect(path, timeout=1)
        connection.execute("BEGIN EXCLUSIVE")
        locked.set()
        time.sleep(seconds)
        connection.rollback()
        connection.close()

    thread = threading.Thread(target=hold, daemon=True)
    thread.start()
    assert locked.wait(10)
    return thread


def test_a_locked_gradebook_is_waited_for_and_every_result_written(course, cells):
    """Issue 45: a gradebook locked for longer than SQLite's own wait (5 s) used to stop the
    writer with "database is locked"; now it waits, results queue up meanwhile, and once the
    lock ends every one of them is in the gradebook: nothing reported, nothing lost."""
    from autograder.outputs.gradebook import Gradebook as GradebookOutput

    sync_gradebook(course, ASSIGNMENT, [make_result("early", cells, fraction=1.0)])  # the database exists
    holder = hold_lock(course / "gradebook.db", 7)
    output = GradebookOutput(course, ASSIGNMENT, course / "graded")
    students = [f"s{n:02d}" for n in range(12)]
    results = [make_result(student, cells, fraction=0.5) for student in students]
    started = time.monotonic()
    for result in results:
        output.add(result)  # never blocks: the writer's thread waits
    assert time.monotonic() - started < 1.0
    writer = output.writer
    assert output.finish(results) == []
    holder.join()
    assert writer.waited > 0  # it did meet the lock
    written = scores(course)
    assert set(students) <= set(written)
    assert all(written[s][name][0] == round(points * 0.5, 2) for s in students for name, points in cells.items())


def test_a_gradebook_locked_past_the_patience_is_one_line_for_the_ta_and_the_next_run_writes_it(course, cells):
    from autograder.outputs.gradebook import Gradebook as GradebookOutput

    sync_gradebook(course, ASSIGNMENT, [make_result("early", cells, fraction=1.0)])
    holder = hold_lock(course / "gradebook.db", 8)
    output = GradebookOutput(course, ASSIGNMENT, course / "graded", patience=1.0)
    result = make_result("late_lock", cells, fraction=1.0)
    output.add(result)
    problems = output.finish([result])
    assert len(problems) == 1 and "locked" in problems[0][1] and "next run writes them" in problems[0][1], problems
    assert output.writer is None  # that run is over: the next add starts another
    holder.join()
    assert output.finish([result]) == []  # the next run (a service's next quiet moment)
    assert "late_lock" in scores(course)
