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
    sync_gradebook(course, ASSIGNMENT, [result("early", cells, 1.0)])  # graded by an earlier run
    written = []
    real = Gradebook.find_submission_notebook

    def counting(self, notebook, assignment, student):
        written.append(student)
        return real(self, notebook, assignment, student)

    monkeypatch.setattr(Gradebook, "find_submission_notebook", counting)
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
    from autograder.outputs.results import GradebookSync

    real = Gradebook.find_submission_notebook

    def failing(self, notebook, assignment, student):
        if student == "bo":
            raise RuntimeError("disk full")
        return real(self, notebook, assignment, student)

    with GradebookSync(course, ASSIGNMENT) as gradebook:
        monkeypatch.setattr(Gradebook, "find_submission_notebook", failing)
        with pytest.raises(RuntimeError, match="disk full"):
            gradebook.write([result("ann", cells, 1.0), result("bo", cells, 0.5)])
        assert scores(course) == {}  # ann's row, written before bo failed, was rolled back too
        monkeypatch.setattr(Gradebook, "find_submission_notebook", real)
        gradebook.write([result("ann", cells, 1.0), result("bo", cells, 0.5)])
    written = scores(course)
    assert set(written) == {"ann", "bo"}
    assert all(written["bo"][name][0] == round(points * 0.5, 2) for name, points in cells.items())
