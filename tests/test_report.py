"""The class report's and the feedback page's words, from results made by hand (no grading)."""
import time
from types import SimpleNamespace

from autograder.grading.submission import build_result
from autograder.outputs.feedback import Layout, render_feedback
from autograder.outputs.report import common_diagnostics, needs_attention
from autograder.record import CellError, CellScore, CheckOutcome
from helpers import make_result

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
