"""Unfinished work is one line per exercise (issue 44, item 5).

An exercise none of whose answer cells differs from the release's stub (decided on the grader's
side, from the sanitized notebook: grading/notebook.py `unanswered`) reads "not answered yet" and
nothing more: none of its checks, no consequence lines, no traceback of its stub or of a check cell
that needed it. Its checks stay in the result for the TA, and its points are the checks' own.
"""
import re

import nbformat
import pytest

from autograder.course.visibility import Visibility
from autograder.grading.notebook import owners, sanitize, stub_errors, unanswered
from autograder.outputs.feedback import layout_of, render_feedback
from autograder.runs.batch import grade_batch
from autograder.service.views import student_view

from helpers import assignment_of, make_notebook, new_course, write

ANSWERED = {"ex1_answer", "ex2_answer"}


def half_done():
    """The release with Exercises 1 and 2 answered (the reference's code), the rest as released."""
    solved, release = make_notebook(), make_notebook(untouched=True)
    for cell, answer in zip(release.cells, solved.cells):
        if cell.metadata.get("nbgrader", {}).get("grade_id") in ANSWERED:
            cell.source = answer.source
    return release


def exercise_sections(page):
    return dict(re.findall(r'<section class="exercise" id="([^"]+)">(.*?)</section>', page, re.S))


@pytest.mark.usefixtures("sandbox_required")
def test_a_half_done_notebook_reads_one_line_per_unanswered_exercise(tmp_path):
    course = new_course(tmp_path)
    assignment = assignment_of(course)
    folder = course / "handed-in"
    folder.mkdir()
    write(folder, "hal", half_done())
    result = grade_batch(assignment, [folder], jobs=1, seed=5).results[0]
    left = {cell.name for cell in result.cells if cell.unanswered}
    assert left == {"ex3", "ex4", "ex5", "ex6", "ex7", "ex8_model", "ex8_data"}
    assert result.score == 4.0 and all(cell.checks for cell in result.cells)  # the TA keeps every check
    assert result.cell_errors == [] and "raised an error" not in result.output  # the stubs' tracebacks say nothing
    source = nbformat.read(assignment.source_notebook, as_version=4)
    page = render_feedback(result, layout_of(source))
    sections = exercise_sections(page)
    for name in left:
        body = sections[name]
        assert body.count('<p class="unanswered">Not answered yet') == 1, name
        assert "<li" not in body and "<pre>" not in body and "because" not in body, name
    assert sections["ex1"].count("<li") >= 2 and "Not answered" not in sections["ex1"]
    assert "Other errors" not in page and "Traceback" not in page
    view = student_view(result, Visibility.of(assignment), due_passed=False)
    shown = {cell.name: cell for cell in view.cells}
    assert all(shown[name].unanswered and shown[name].checks == [] for name in left)
    assert view.to_json()["exercises"][2]["unanswered"] is True and view.cell_errors == []


def test_an_exercise_counts_as_answered_once_any_of_its_answer_cells_changed():
    assignment = assignment_of()
    source = nbformat.read(assignment.source_notebook, as_version=4)
    release = nbformat.read(assignment.release_notebook, as_version=4)
    notebook = make_notebook(untouched=True)
    for cell in notebook.cells:
        grade_id = cell.metadata.get("nbgrader", {}).get("grade_id")
        if grade_id == "ex3_answer":
            cell.source = "\n" + cell.source + "\n\n"  # white space alone answers nothing
        elif grade_id == "ex5_script":
            cell.source += "\n# tried something"  # one of Exercise 5's two answer cells
    clean = sanitize(notebook, source, release)
    left = unanswered(owners(source), release, clean.cells)
    assert "ex3" in left and "ex5" not in left and "ex1" in left
    assert unanswered(owners(source), release, sanitize(make_notebook(), source, release).cells) == set()
    assert any(line.startswith("NotImplementedError: Not answered yet") for line in stub_errors(release))
