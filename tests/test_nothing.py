"""Nothing the sandbox says about how a value was made earns a point (issue 43).

Submissions whose every value is wrong (tests/nothing.py) score no more than the all-zero
baseline, what the exercise's structure alone earns: a variable's points rest on its values made
again on the grader's side, and a property (no future leak, rows that sum to 1, moving with the
model) earns nothing for an output that does not depend on the input and the queries and keys.
"""
import pytest

from autograder.checks.runner import run_checks
from autograder.course import reference as reference_code
from autograder.course.regions import read_regions, strip_solution_markers
from autograder.inside.student import NamespaceStudent
from autograder.runs.batch import grade_batch

import nothing
from helpers import COURSE, assignment_of, new_course, write


@pytest.mark.usefixtures("sandbox_required")
def test_every_value_wrong_scores_no_more_than_zeros_of_the_right_shape(tmp_path):
    course = new_course(tmp_path)
    folder = course / "handed-in"
    folder.mkdir()
    for name, notebook in nothing.submissions().items():
        write(folder, name, notebook)
    report = grade_batch(assignment_of(course), [folder], jobs=2, seed=11)
    scores = {result.student_id: result.score for result in report.results}
    assert 0 < scores["zeros"] < 10  # the structure earns something: the checks of shapes and layers
    assert {name: score for name, score in scores.items() if score > scores["zeros"]} == {}
    results = {result.student_id: result for result in report.results}
    for name in ("noise", "not_watched"):  # the variables' values were made again here, and differ
        ex4 = next(cell for cell in results[name].cells if cell.name == "ex4")
        assert ex4.score == 0, name
    said = " ".join(check.message for cell in results["uniform"].cells for check in cell.checks)
    assert "ignore the queries and keys" in said
    said = " ".join(check.message for cell in results["zero_times"].cells for check in cell.checks)
    assert "does not depend on the input" in said


def edited(assignment, region, old, new):
    """The solved namespace of `assignment` with one answer region rewritten."""
    found = COURSE.assignment(assignment)
    namespace = reference_code.solved_namespace(found.solutions)
    source = strip_solution_markers(read_regions(found.solutions)[region])
    assert old in source, f"{old!r} not in {region}"
    exec(compile(source.replace(old, new), region, "exec"), namespace)
    return namespace


@pytest.mark.parametrize("region, old, new, cell", [
    ("ex5_answer", "weights = torch.softmax(queries @ keys.T / math.sqrt(keys.shape[-1]), dim=-1)",
     "weights = torch.full((x.shape[0], x.shape[0]), 1 / x.shape[0]) + 0 * queries.sum() * keys.sum()", "ex5"),
    ("ex5_answer", "keys = self.W_key(x)", "keys = self.W_query(x)", "ex5"),
])
def test_rows_that_sum_to_one_earn_nothing_when_the_weights_ignore_the_queries_or_keys(region, old, new, cell):
    found = COURSE.assignment("self_attention")
    result = run_checks(found, NamespaceStudent(edited("self_attention", region, old, new)), [cell], seed=3)[cell]
    rows = [check for check in result.checks if check.name == "test_weight_rows"]
    assert rows and not rows[0].passed and ("W_query" in rows[0].message or "W_key" in rows[0].message)
    right = run_checks(found, NamespaceStudent(reference_code.solved_namespace(found.solutions)), [cell], seed=3)[cell]
    assert all(check.passed for check in right.checks if check.name == "test_weight_rows")
