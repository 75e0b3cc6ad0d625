"""End to end: the release notebook runs, and stock nbgrader grades it right."""
import ast
import time

import nbformat
import pytest
from nbclient import NotebookClient

from autograder.authoring.examples import filled_notebook
from autograder.runs.batch import grade_batch

from helpers import ReleaseDoesNotRun, answer_names, assignment_of, run_release, scores

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
    # every cell of the release ran, stopping only on the stubs (see helpers.run_release): no answers
    assert "causal_embeddings" not in stubs and "multihead_embeddings" not in stubs


def release_and_answers(assignment=ASSIGNMENT):
    found = assignment_of(name=assignment)
    release = nbformat.read(found.release_notebook, as_version=4)
    return release, answer_names(nbformat.read(found.source_notebook, as_version=4))


def nbgrader(cell):
    return cell.metadata.get("nbgrader", {})


@pytest.mark.parametrize("assignment", ["causal_attention", "self_attention"])
def test_the_untouched_release_stops_only_where_an_answer_is_missing(assignment):
    release, answers = release_and_answers(assignment)
    namespace, stopped = run_release(release, answers)
    code = [index for index, cell in enumerate(release.cells) if cell.cell_type == "code"]
    first_answer = next(index for index in code if nbgrader(release.cells[index]).get("solution"))
    assert stopped and min(stopped) > first_answer  # the setup before the first answer ran
    hidden = [index for index in code
              if nbgrader(release.cells[index]).get("grade") and not nbgrader(release.cells[index]).get("solution")]
    assert hidden and not set(hidden) & set(stopped)  # the graded cells' placeholders ran
    for index in code:  # every stub (function or class) an answer cell gives is defined
        if nbgrader(release.cells[index]).get("solution"):
            for node in ast.parse(release.cells[index].source).body:
                if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
                    assert callable(namespace.get(node.name)), (index, node.name)
    assert all(error.startswith(("NotImplementedError: Not answered yet", "NameError: "))
               for error in stopped.values()), stopped


BROKEN_GIVEN_CODE = {
    "syntax error": "def broken(:\n    pass\n",
    "name defined nowhere": "print(undefined_helper(3))\n",
    "name an answer defines, before that answer": "print(causal_embeddings.shape)\n",
    "NotImplementedError of its own": "raise NotImplementedError('the instructor forgot this cell')\n",
    "any other error": "import torhc\n",
}


@pytest.mark.parametrize("code", BROKEN_GIVEN_CODE.values(), ids=BROKEN_GIVEN_CODE.keys())
def test_a_release_whose_given_code_fails_does_not_pass_for_an_untouched_one(code):
    release, answers = release_and_answers()
    first_answer = next(i for i, cell in enumerate(release.cells) if nbgrader(cell).get("solution"))
    release.cells.insert(first_answer + 1, nbformat.v4.new_code_cell(code))  # given code, not an answer
    with pytest.raises(ReleaseDoesNotRun, match=f"cell {first_answer + 1} "):
        run_release(release, answers)


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
