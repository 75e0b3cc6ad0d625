"""End to end: the release notebook runs, and stock nbgrader grades it right."""
import time

import nbformat
import pytest
from nbclient import NotebookClient

from autograder.authoring.examples import filled_notebook
from autograder.runs.batch import grade_batch

from helpers import assignment_of, scores

ASSIGNMENT = "causal_attention"
AUTOGRADED_POINTS = 26  # Exercises 1-8; the concept questions are graded by hand


def test_release_with_correct_answers_runs_top_to_bottom(tmp_path):
    nb = filled_notebook(nbformat.read(assignment_of().release_notebook, as_version=4), assignment_of(), {})
    started = time.perf_counter()
    NotebookClient(nb, timeout=120, kernel_name="python3",
                   resources={"metadata": {"path": str(tmp_path)}}).execute()
    seconds = time.perf_counter() - started
    errors = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs if o.output_type == "error"]
    assert not errors, errors[0]
    printed = "".join(o.get("text", "") for c in nb.cells if c.cell_type == "code" for o in c.outputs)
    for exercise in ("1", "2", "3", "4", "5", "6", "7", "8a", "8b"):
        assert f"Exercise {exercise} looks right." in printed
    print(f"\nrelease notebook with correct answers: {seconds:.1f} s")


def test_untouched_release_computes_nothing(stubs):
    # every cell of the release ran, past errors: the stubs produce no answers
    assert "causal_embeddings" not in stubs and "multihead_embeddings" not in stubs


def more_submissions(course):
    """For the `graded` fixture (conftest.py), beside the examples, fay and gus: eve, a correct
    answer that warns on stderr (nbgrader would zero the grade cell)."""
    nb = nbformat.read(course / "submitted" / "ada" / ASSIGNMENT / f"{ASSIGNMENT}.ipynb", as_version=4)
    for cell in nb.cells:
        if cell.metadata.get("nbgrader", {}).get("grade_id") == "ex3_answer":
            cell.source = cell.source.replace(
                "    def forward(self, x):\n",
                "    def forward(self, x):\n        import sys, warnings\n"
                "        warnings.warn('debugging forward')\n        print('shape', x.shape, file=sys.stderr)\n")
            assert "debugging forward" in cell.source
    return {"eve": nb}


def autograded_total(row):
    return sum(score for name, score in row.items() if name.startswith("ex"))


@pytest.mark.slow
def test_nbgrader_gives_full_marks_to_a_correct_submission(graded):
    assert autograded_total(graded["ada"]) == AUTOGRADED_POINTS


@pytest.mark.slow
def test_nbgrader_gives_zero_to_the_untouched_release(graded):
    assert autograded_total(graded["dee"]) == 0
    assert graded["dee"]["total"] == 0


@pytest.mark.slow
def test_a_warning_on_stderr_costs_nothing(graded):
    assert graded["eve"]["ex3"] == 5
    assert autograded_total(graded["eve"]) == AUTOGRADED_POINTS


@pytest.mark.slow
def test_partial_credit_reaches_the_gradebook(graded):
    # ben: softmax over dim=1 in Ex3, sqrt(d_out) per head in Ex6; everything else right
    assert 0 < graded["ben"]["ex3"] < 5 and 0 < graded["ben"]["ex6"] < 5
    assert graded["ben"]["ex1"] == 2 and graded["ben"]["ex8_data"] == 3
    # cy: Ex1 not renormalised, no .contiguous() in Ex6 (which Ex7 and Ex8a build on)
    assert graded["cy"]["ex1"] == 0 and graded["cy"]["ex3"] == 5
    assert graded["cy"]["ex6"] < 5 and graded["cy"]["ex7"] == 0


@pytest.mark.slow
def test_a_crash_or_empty_answers_lose_only_what_they_should(graded):
    # fay's Ex5 answer raises before defining its class: only Ex5 is lost, later cells still run
    assert graded["fay"]["ex5"] == 0 and graded["fay"]["ex3"] == 5 and graded["fay"]["ex6"] == 5
    assert autograded_total(graded["gus"]) == 0


@pytest.fixture(scope="module")
def sandboxed(graded, course_copy):
    """The same submissions graded by `autograder grade` (after nbgrader, in its own folder)."""
    report = grade_batch(assignment_of(course_copy), [course_copy / "submitted"], out_dir=course_copy / "ours", jobs=2)
    return {r.student_id: r for r in report.results}


@pytest.mark.slow
def test_sandboxed_grading_agrees_with_nbgrader_on_honest_submissions(graded, sandboxed):
    assert sorted(graded) == sorted(sandboxed) == ["ada", "ben", "cy", "dee", "eve", "fay", "gus"]
    for student, row in graded.items():
        ours = scores(sandboxed[student])
        for cell, score in row.items():
            if cell.startswith("ex"):
                assert ours[cell] == pytest.approx(score), (student, cell)
    assert sandboxed["fay"].cell_errors[0].error.endswith("RuntimeError: my notebook stops here\n")
