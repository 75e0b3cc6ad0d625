"""The gradebook: scores written once per student, kept in step with the results, manual scores kept."""
import time

import nbformat
import pytest
from nbgrader.api import Gradebook

from autograder.outputs.results import GradebookWriter, gradebook_url, sync_gradebook
from autograder.grading.submissions import grade_cells, manual_cells
from autograder.record import CellScore, Result
from helpers import new_course

ASSIGNMENT = "causal_attention"


@pytest.fixture
def course(tmp_path):
    return new_course(tmp_path)


@pytest.fixture
def cells(course):
    return grade_cells(nbformat.read(course / "source" / ASSIGNMENT / f"{ASSIGNMENT}.ipynb", as_version=4))


def result(student, cells, fraction, status="graded"):
    return Result(student_id=student, assignment=ASSIGNMENT, status=status, score=sum(cells.values()) * fraction,
                  cells=[CellScore(name, round(points * fraction, 2), points) for name, points in cells.items()])


def scores(course):
    with Gradebook(gradebook_url(course)) as gradebook:
        found = {}
        for submission in gradebook.assignment_submissions(ASSIGNMENT):
            grades = submission.notebooks[0].grades
            found[submission.student.id] = {g.name: (g.auto_score, g.manual_score, g.needs_manual_grade)
                                            for g in grades}
        return found


def test_sync_writes_updates_and_keeps_manual_scores(course, cells):
    sync_gradebook(course, ASSIGNMENT, [result("ann", cells, 1.0), result("bo", cells, 0.5),
                                        result("cat", cells, 0.0, status="error")])
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
    sync_gradebook(course, ASSIGNMENT, [result("ann", cells, 0.5), result("bo", cells, 0.25)])
    again = scores(course)
    assert again["ann"][question][1] == 0.5 and again["ann"][first_cell][1] == 0.5
    assert again["ann"][first_cell][0] == round(cells[first_cell] * 0.5, 2)
    assert all(again["ann"][name][0] == round(points * 0.5, 2) for name, points in cells.items())
    assert all(again["bo"][name][0] == round(points * 0.25, 2) for name, points in cells.items())
    assert again["bo"][question][2] is True  # the written answer still waits for a TA


def test_the_writer_reads_once_and_writes_each_student_once(course, cells, monkeypatch):
    from autograder.outputs import results as module

    sync_gradebook(course, ASSIGNMENT, [result("early", cells, 1.0)])  # graded by an earlier run
    written = []
    real, real_bulk = Gradebook.find_submission_notebook, module._add_graded_submissions

    def counting(self, notebook, assignment, student):
        written.append(student)
        return real(self, notebook, assignment, student)

    def counting_bulk(gradebook, assignment, results):
        results = list(results)
        written.extend(r.student_id for r in results)
        return real_bulk(gradebook, assignment, results)

    monkeypatch.setattr(Gradebook, "find_submission_notebook", counting)
    monkeypatch.setattr(module, "_add_graded_submissions", counting_bulk)
    reads = []
    listing = Gradebook.assignment_submissions
    monkeypatch.setattr(Gradebook, "assignment_submissions", lambda self, a: reads.append(a) or listing(self, a))
    writer = GradebookWriter(course, ASSIGNMENT)
    batch = [result(f"s{index}", cells, index / 10) for index in range(6)]
    for item in batch:
        writer.add(item)
        time.sleep(0.05)  # results arrive one by one while grading goes on
    missed = result("killed-before-the-gradebook", cells, 0.5)  # its JSON exists, its row does not
    writer.finish([result("early", cells, 1.0), missed, *batch])
    assert sorted(written) == sorted([*(r.student_id for r in batch), "killed-before-the-gradebook"])
    assert len(reads) == 1  # the gradebook is read once per batch, not once per result
    assert set(scores(course)) == {"early", "killed-before-the-gradebook", *(f"s{i}" for i in range(6))}


def test_a_failed_write_leaves_nothing_half_done_and_the_next_one_writes_it(course, cells, monkeypatch):
    """nbgrader's per-student commits are one commit per call; a failure rolls the call back
    and the session does not believe the gradebook has what was rolled back."""
    from autograder.outputs import results as module
    from autograder.outputs.results import GradebookSync

    real = module._add_graded_submissions

    def failing(gradebook, assignment, results):
        results = list(results)
        real(gradebook, assignment, results)  # the rows are in the session, then the disk fills
        if any(r.student_id == "bo" for r in results):
            raise RuntimeError("disk full")

    with GradebookSync(course, ASSIGNMENT) as gradebook:
        monkeypatch.setattr(module, "_add_graded_submissions", failing)
        with pytest.raises(RuntimeError, match="disk full"):
            gradebook.write([result("ann", cells, 1.0), result("bo", cells, 0.5)])
        assert scores(course) == {}  # ann's row, written with bo's, was rolled back too
        monkeypatch.setattr(module, "_add_graded_submissions", real)
        gradebook.write([result("ann", cells, 1.0), result("bo", cells, 0.5)])
    written = scores(course)
    assert set(written) == {"ann", "bo"}
    assert all(written["bo"][name][0] == round(points * 0.5, 2) for name, points in cells.items())


def snapshot(course, student):
    """Everything the gradebook holds for one student's submission, as nbgrader reads it."""
    with Gradebook(gradebook_url(course)) as gradebook:
        submission = gradebook.find_submission(ASSIGNMENT, student)
        notebook = submission.notebooks[0]
        return {"timestamp": submission.timestamp, "penalty": notebook.late_submission_penalty,
                "flagged": notebook.flagged, "score": submission.score, "max": submission.max_score,
                "needs_manual": submission.needs_manual_grade, "code_score": submission.code_score,
                "grades": sorted((g.name, g.auto_score, g.manual_score, g.extra_credit, g.needs_manual_grade)
                                 for g in notebook.grades),
                "comments": sorted((c.name, c.auto_comment, c.manual_comment) for c in notebook.comments)}


@pytest.mark.filterwarnings("ignore:Object of type")  # nbgrader's own add_submission, in the test
def test_new_students_get_the_rows_nbgrader_s_own_add_submission_makes(course, cells):
    """The bulk path for new students writes what nbgrader's ORM calls would: same grades,
    comments, flags, late penalty and hand-in time, and the same scores in nbgrader's eyes."""
    graded = result("bulk", cells, 0.5)
    graded.late_penalty, graded.submitted_at = 1.5, "2026-03-01T10:00:00+00:00"
    with Gradebook(gradebook_url(course)) as gradebook:  # a student known from another course action
        gradebook.update_or_create_student("bulk", first_name="Bea")
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
    assert bulk["grades"] and bulk["comments"] and bulk["penalty"] == 1.5
    assert any(needs for *_, needs in bulk["grades"])  # the written answer waits for a TA


def test_the_gradebook_opens_without_nbgrader_s_server_extensions(course):
    """nbgrader's package __init__ loads its Jupyter server extensions (jupyter_server and more,
    about 0.45 s of CPU taken from the workers); the gradebook needs none of them. An nbgrader
    imported before is left whole."""
    import subprocess
    import sys

    program = """
import sys
{first}
from autograder.outputs.results import GradebookSync
with GradebookSync(sys.argv[1], "causal_attention") as gradebook:
    gradebook.write([])
import nbgrader
print("jupyter_server" in sys.modules, hasattr(nbgrader, "load_formgrader"), bool(nbgrader.__version__))
"""
    def run(first):
        done = subprocess.run([sys.executable, "-c", program.format(first=first), str(course)],
                              capture_output=True, text=True, check=True)
        return done.stdout.split()

    assert run("") == ["False", "False", "True"]
    assert run("import nbgrader") == ["True", "True", "True"]
