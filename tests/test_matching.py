"""Notebooks whose cells lost nbgrader's metadata: answers recognised by where they sit."""
import copy

import nbformat
import pytest

from autograder.grading.matching import recognise
from autograder.grading.notebook import sanitize
from autograder.runs.recording import read_release, read_source
from helpers import assignment_of, example, make_notebook

WRITTEN = {f"q{n}": f"My own answer to Q{n}, in my words." for n in range(1, 5)}


@pytest.fixture(scope="module")
def notebooks():
    assignment = assignment_of()
    return read_source(assignment), read_release(assignment)


def with_written_answers(notebook):
    notebook = copy.deepcopy(notebook)
    for cell in notebook.cells:
        grade_id = cell.metadata.get("nbgrader", {}).get("grade_id")
        if grade_id in WRITTEN:
            cell.source = WRITTEN[grade_id]
    return notebook


def copied(notebook):
    """The notebook as a student copies it into a new one: the same cells, no metadata at all."""
    new = nbformat.v4.new_notebook()
    for cell in notebook.cells:
        make = nbformat.v4.new_code_cell if cell.cell_type == "code" else nbformat.v4.new_markdown_cell
        new.cells.append(make(cell.source))
    return new


def by_id(clean):
    return {cell.metadata["nbgrader"]["grade_id"]: cell.source for cell in clean.notebook.cells
            if "nbgrader" in cell.metadata}


def test_a_copied_notebook_runs_its_answers_in_place_with_one_kind_note(notebooks):
    source, release = notebooks
    original = with_written_answers(example("ada"))
    expected = sanitize(original, source, release)
    clean = sanitize(copied(original), source, release)
    assert [code for _, code in clean.cells] == [code for _, code in expected.cells]  # nothing restored ahead
    assert len(clean.tampering) == 1 and clean.tampering[0].startswith("your notebook's cells had lost the grader's")
    found = by_id(clean)
    assert all(found[q] == text for q, text in WRITTEN.items())  # formgrader shows the student's own words
    assert found["ex3_answer"] == by_id(expected)["ex3_answer"]


def test_split_answers_and_dropped_placeholders_still_line_up(notebooks):
    source, release = notebooks
    student = copied(with_written_answers(example("ada")))
    student.cells = [c for c in student.cells if not c.source.startswith("# Graded cell")]
    at = next(i for i, c in enumerate(student.cells) if c.source.startswith("class MultiHeadAttention("))
    student.cells.insert(at, nbformat.v4.new_code_cell("# trying things out\nx = torch.ones(2)"))
    clean = sanitize(student, source, release)
    assert len(clean.tampering) == 1
    found = by_id(clean)
    assert found["ex5_answer"].startswith("class MultiHeadAttention(")  # not the scratch cell before it
    assert "# trying things out" in [code.splitlines()[0] for _, code in clean.cells]  # which still runs
    names = [name for name, _ in clean.cells]
    assert names.index("ex5_answer") < names.index("check-05")


def test_an_answer_that_is_not_there_is_named_once(notebooks):
    source, release = notebooks
    student = copied(with_written_answers(example("ada")))
    student.cells = [c for c in student.cells if not c.source.startswith("class CausalAttention(")]
    clean = sanitize(student, source, release)
    assert clean.tampering == ["your notebook's cells had lost the grader's markers (as happens when work is copied"
                               " into a new notebook), so your answers were found by where they sit among the"
                               " exercise's cells; these answers could not be found and count as unanswered:"
                               " ex3_answer"]
    assert by_id(clean)["ex3_answer"] == next(c.source for c in release.cells
                                              if c.metadata.get("nbgrader", {}).get("grade_id") == "ex3_answer")


def test_a_notebook_with_its_metadata_is_left_as_it_is(notebooks):
    source, release = notebooks
    notebook = example("ben")
    assert recognise(notebook, source, release)[0] is notebook


def test_a_deleted_answer_rewritten_in_a_new_cell_in_its_place_is_taken_for_it(notebooks):
    source, release = notebooks
    notebook = example("ada")
    at = next(i for i, c in enumerate(notebook.cells) if c.metadata.get("nbgrader", {}).get("grade_id") == "ex2_answer")
    answer = notebook.cells[at].source
    notebook.cells[at] = nbformat.v4.new_code_cell(answer)  # the same answer, in a new cell
    clean = sanitize(notebook, source, release)
    assert by_id(clean)["ex2_answer"] == answer
    assert clean.tampering == ["ex2_answer had lost the grader's marker, so the cell in its place was taken for it"]


def test_many_deleted_cells_are_one_note_not_a_wall(notebooks):
    source, release = notebooks
    notebook = make_notebook(untouched=True)
    notebook.cells = [c for c in notebook.cells if not c.metadata.get("nbgrader", {}).get("grade_id", "").startswith("ex")]
    clean = sanitize(notebook, source, release)
    assert len(clean.tampering) == 1 and clean.tampering[0].startswith("19 of the exercise's cells were missing")
