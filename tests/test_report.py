"""The class report's and the feedback page's words, from results made by hand (no grading)."""
import time
from types import SimpleNamespace

from autograder.grading.submission import build_result
from autograder.outputs.feedback import Layout, render_feedback
from autograder.outputs.report import needs_attention
from autograder.record import CellError
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
