"""Assignment `self_attention` end to end: the release runs, and stock nbgrader and
`autograder grade` agree on honest submissions. (Build, staleness and the corpus
are covered for every assignment in test_build.py and test_corpus.py.)"""
import contextlib
import io

import nbformat
import pytest
from nbclient import NotebookClient

from autograder.runs.batch import grade_batch
from autograder.authoring.examples import filled_notebook
from autograder.course.reference import solved_namespace
from autograder.checks.runner import run_checks
from autograder.inside.student import NamespaceStudent

from helpers import assignment_of, release_namespace, scores

ASSIGNMENT = "self_attention"
POINTS = {"ex1": 2, "ex2": 3, "ex3": 2, "ex4": 3, "ex5": 3, "ex6": 2, "ex7": 3}


def test_release_with_correct_answers_runs_top_to_bottom(tmp_path):
    nb = filled_notebook(nbformat.read(assignment_of(name=ASSIGNMENT).release_notebook, as_version=4), assignment_of(name=ASSIGNMENT), {})
    NotebookClient(nb, timeout=120, kernel_name="python3",
                   resources={"metadata": {"path": str(tmp_path)}}).execute()
    errors = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs if o.output_type == "error"]
    assert not errors, errors[0]
    printed = "".join(o.get("text", "") for c in nb.cells if c.cell_type == "code" for o in c.outputs)
    for exercise in range(1, 8):
        assert f"Exercise {exercise} looks right." in printed


@pytest.mark.parametrize("seed", [0, 4242])
def test_in_process_solutions_pass_and_stubs_fail(seed):
    with contextlib.redirect_stdout(io.StringIO()):
        solved = solved_namespace(assignment_of(name=ASSIGNMENT).solutions)
    on_solutions = run_checks(assignment_of(name=ASSIGNMENT), NamespaceStudent(solved), seed=seed)
    on_stubs = run_checks(assignment_of(name=ASSIGNMENT), NamespaceStudent(release_namespace(assignment_of(name=ASSIGNMENT))), seed=seed)
    assert set(on_solutions) == set(POINTS)
    for cell, result in on_solutions.items():
        assert result.checks and all(c.passed for c in result.checks), [c.message for c in result.checks]
        assert not any(c.passed for c in on_stubs[cell].checks), cell


@pytest.mark.slow
def test_nbgrader_grades_the_examples(graded):
    autograded = {student: {c: s for c, s in row.items() if c.startswith("ex")} for student, row in graded.items()}
    assert autograded["ada"] == POINTS
    assert sum(autograded["dee"].values()) == 0 and sum(autograded["gus"].values()) == 0
    # ben: softmax over dim=0 in Ex3, sqrt(d_in) in Ex4 (which Ex6 compares against)
    assert autograded["ben"]["ex3"] < 2 and autograded["ben"]["ex4"] < 3 and autograded["ben"]["ex1"] == 2
    # cy: softmax_stable without the shift, Ex6 without transposing
    assert autograded["cy"]["ex2"] < 3 and autograded["cy"]["ex6"] < 2 and autograded["cy"]["ex7"] == 3
    # fay's Ex4 cell raises before defining the class: Ex4 and Ex6 (which uses it) are lost
    assert autograded["fay"]["ex4"] == 0 and autograded["fay"]["ex5"] == 3 and autograded["fay"]["ex7"] == 3


@pytest.mark.slow
def test_sandboxed_grading_agrees_with_nbgrader(graded, course_copy):
    report = grade_batch(assignment_of(course_copy, ASSIGNMENT), [course_copy / "submitted"], out_dir=course_copy / "ours-sa", jobs=2)
    ours = {r.student_id: scores(r) for r in report.results}
    assert sorted(ours) == sorted(graded) == ["ada", "ben", "cy", "dee", "fay", "gus"]
    for student, row in graded.items():
        for cell, score in row.items():
            if cell.startswith("ex"):
                assert ours[student][cell] == pytest.approx(score), (student, cell)


def test_a_right_answer_never_looks_like_a_mistake():
    """Seed 1371 draws one token whose score is 1.0006: that 1 x 1 table equals its own
    softmax. The check used to call that 'softmax weights' (found by a flaky nbgrader run)."""
    with contextlib.redirect_stdout(io.StringIO()):
        solved = solved_namespace(assignment_of(name=ASSIGNMENT).solutions)
    result = run_checks(assignment_of(name=ASSIGNMENT), NamespaceStudent(solved), ["ex1"], seed=1371)["ex1"]
    assert [c.message for c in result.checks if not c.passed] == []
