"""The class report's and the feedback page's words, from results made by hand or graded in
this process (no sandbox)."""
import contextlib
import html
import io
import json
import time
from types import SimpleNamespace

from autograder.checks.outcomes import COULD_NOT_RUN
from autograder.checks.runner import run_checks
from autograder.course.reference import solved_namespace
from autograder.grading.submission import build_result
from autograder.inside.student import NamespaceStudent
from autograder.outputs.feedback import Layout, render_feedback
from autograder.outputs.report import common_diagnostics, needs_attention, render_report
from autograder.record import CellError, CellScore, CheckOutcome, Result, broken_checks
from helpers import assignment_of, make_result, new_course
from test_validate_catches import CHECK_FILE, break_hidden_check

ADDED = CellError(cell="cell 4", error="Traceback (most recent call last):\nValueError: not a tensor")  # a cell the student added
ANSWER = CellError(cell="ex5_answer", error="Traceback (most recent call last):\nRuntimeError: stops here")


def test_a_cell_the_student_added_is_cell_4_never_cell_cell_4():
    result = make_result("ada", [("ex5", 0.0, 4.0)], cell_errors=[ADDED, ANSWER])
    [row] = needs_attention([result])
    assert row["reasons"] == ["cell 4 raised ValueError: not a tensor", "cell ex5_answer raised RuntimeError: stops here"]
    page = render_feedback(result, Layout(titles={"ex5": "Exercise 5: Heads"}, owners={"ex5_answer": "ex5"}))
    assert "<h3>Cell 4</h3>" in page and "Your code raised an error (cell ex5_answer)" in page
    assert "cell cell" not in page.lower()
    output = build_result(SimpleNamespace(assignment="a", seed=0, isolation="none"), {"student_id": "ada"}, {}, {}, [],
                          [vars(ADDED), vars(ANSWER)], time.perf_counter()).output
    assert "Cell 4 raised an error:" in output and "Cell ex5_answer raised an error:" in output
    assert "cell cell" not in output.lower()


def printed_tensors(seed):
    """A check message that prints a student's random inputs, as torch prints them: negatives
    or not (torch pads for a sign), small values in e-notation, nan and -inf, line breaks."""
    import torch

    generator = torch.Generator().manual_seed(seed)
    expected = torch.randn(2, 3, generator=generator) * 10.0 ** (seed % 5 - 3)
    got = torch.randn(2, 3, generator=generator).abs() if seed % 2 else torch.randn(2, 3, generator=generator)
    if seed % 3 == 0:
        got[0, 0], got[1, 1] = float("nan"), float("-inf")
    return f"the rows of scores @ values: expected {expected} but got {got}"


def test_messages_that_differ_only_in_printed_random_numbers_are_one_row():
    messages = [printed_tensors(seed) for seed in range(6)] + [
        "the rows of scores @ values: expected tensor([[0.1234, -0.5], [1e-3, 2.0]]) but got"
        " tensor([[inf, nan], [-1.5e+02, 3.]])"]
    assert len(set(messages)) == 7
    results = [make_result(f"s{index}", [CellScore("ex3", 0.0, 5.0, checks=[
        CheckOutcome("test_values", "Returns the right values", False, message=message)])])
        for index, message in enumerate(messages)]
    results.append(make_result("t1", [CellScore("ex3", 0.0, 5.0, checks=[
        CheckOutcome("test_dim", "Normalises rows", False, message="Softmax runs over dim=1; use dim=-1.")])]))
    rows = common_diagnostics(results, {"ex3": "Exercise 3: A causal attention module"})
    assert [(row["count"], row["exercise"]) for row in rows] == [(7, "Exercise 3"), (1, "Exercise 3")]
    assert rows[0]["message"] in messages and rows[1]["students"] == ["t1"]


def test_a_hidden_check_that_breaks_is_shown_to_the_ta_where_and_why_and_never_to_the_student(tmp_path):
    """From the check to the result file and back, then to each page: the TA's report and the
    terminal's line name the check's file, line and exception; the student reads only that it
    could not run."""
    assignment = assignment_of(new_course(tmp_path), "self_attention")
    line = break_hidden_check(assignment)
    with contextlib.redirect_stdout(io.StringIO()):
        namespace = solved_namespace(assignment.solutions)
    checks = run_checks(assignment, NamespaceStudent(namespace), ["ex2"], seed=0)
    spec = SimpleNamespace(assignment="self_attention", seed=0, isolation="none")
    graded = [build_result(spec, {"student_id": student}, {"ex2": 3.0}, checks, [], [], time.perf_counter())
              for student in ("ada", "ben")]
    ada, ben = [Result.from_json(json.loads(json.dumps(result.to_json()))) for result in graded]  # as files hold them
    where = f"{CHECK_FILE}:{line}: NameError: name 'torhc' is not defined"
    assert ada.check_crashes() == [("ex2", "test_naive_is_the_plain_formula", where)]
    crashes = [check for test in ada.to_json()["tests"] for check in test["extra_data"]["checks"] if "crash" in check]
    assert len(crashes) == 1  # kept for the check that broke only
    said = f"the hidden check ex2 test_naive_is_the_plain_formula broke ({where}) on 2 students (ada, ben)"
    [(who, problem)] = broken_checks([ada, ben, make_result("cy", [("ex2", 3.0, 3.0)])])
    assert who == "" and problem.startswith(said) and "Fix the check and grade again" in problem

    page = render_feedback(ada, Layout(titles={"ex2": "Exercise 2: Scores"}))
    assert f"{COULD_NOT_RUN} (NameError). Please tell your instructor." in page
    assert "torhc" not in page and "test_ex2" not in page and "test_naive" not in page

    report = render_report("self_attention", [ada, ben], Layout(titles={"ex2": "Exercise 2: Scores"}))
    attention = html.unescape(report[report.index('id="attention"'):])
    assert "The" + said[3:] in attention
    assert "None: no errors" not in attention
