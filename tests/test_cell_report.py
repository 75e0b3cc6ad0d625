"""Everything in a cell report is checked before it is used (issue 43): the child that sends it is
the student's process, and what it says reaches the result file, the TA's terminal and every page."""
import json
import math

import pytest

from autograder.grading.submission import _cell_report
from autograder.runs.batch import grade_batch
from autograder.untrusted import without_controls

from helpers import append_to_first_answer, assignment_of, example, new_course, write

SENT = ["setup", "ex1_answer", "cell 3"]


def entry(cell, error=None, seconds=0.5):
    return {"cell": cell, "error": error, "seconds": seconds}


@pytest.mark.parametrize("forged", [
    [entry("setup"), entry("ex1_answer"), entry("ex9_phantom")],  # a name the grader never sent
    [entry("setup"), entry("cell 3"), entry("ex1_answer")],  # the right names, another order
    [entry("setup"), entry("ex1_answer")],  # a cell left out
    [entry("setup"), entry("ex1_answer"), entry("cell 3"), entry("cell 4")],  # one more
    [entry("setup"), entry("ex1_answer", seconds=float("nan")), entry("cell 3")],
    [entry("setup"), entry("ex1_answer", seconds=float("inf")), entry("cell 3")],
    [entry("setup"), entry("ex1_answer", seconds=-1.0), entry("cell 3")],
    [entry("setup"), entry("ex1_answer", error=b"bytes"), entry("cell 3")],
])
def test_a_report_that_is_not_about_the_cells_sent_is_not_read(forged):
    assert _cell_report(("ran", forged), SENT) is None


def test_a_reports_error_text_loses_its_control_characters_and_keeps_its_lines():
    text = "Traceback:\n\tline 1\x1b]52;c;aGk=\x07\x1b[2J\x9b31mred\x00\x7f"
    report = _cell_report(("ran", [entry("setup"), entry("ex1_answer", error=text), entry("cell 3")]), SENT)
    assert report[1]["error"] == "Traceback:\n\tline 1]52;c;aGk=[2J31mred"
    assert without_controls("é ü — 注意") == "é ü — 注意"  # text stays text


FORGE_REPORT = r"""
import os, stat, struct, json
for fd in range(3, 64):
    try:
        if stat.S_ISSOCK(os.fstat(fd).st_mode):
            body = b'J' + json.dumps(["ran", [{"cell": "ex9_phantom", "error": "\u001b]52;c;aGk=\u0007", "seconds": "NaN"}]]).encode().replace(b'"NaN"', b'NaN')
            os.write(fd, struct.pack(">Q", len(body)) + body)
    except OSError:
        pass
"""
ESCAPES = "raise RuntimeError('\\x1b]52;c;aGk=\\x07\\x1b[2J\\x9b31m' + 'cleared your terminal')\n"
CONTROLS = ("\x1b", "\x07", "\x9b")


@pytest.mark.usefixtures("sandbox_required")
def test_a_forged_report_and_an_error_full_of_escapes_reach_no_file_page_or_terminal(tmp_path):
    course = new_course(tmp_path)
    folder = course / "handed-in"
    folder.mkdir()
    ada = example("ada")
    write(folder, "forger", append_to_first_answer(ada, FORGE_REPORT))
    write(folder, "escaper", append_to_first_answer(ada, ESCAPES))
    report = grade_batch(assignment_of(course), [folder], jobs=2, seed=5)
    results = {result.student_id: result for result in report.results}
    graded = course / "graded" / "causal_attention"
    for student in results:
        def refuse(constant):
            raise AssertionError(f"{student}'s result holds {constant}")

        json.loads((graded / f"{student}.json").read_text(), parse_constant=refuse)
        for page in (graded / "feedback" / f"{student}.html", graded / "report.html"):
            text = page.read_text()
            assert not any(control in text for control in CONTROLS), (student, page.name)
    assert "ex9_phantom" not in (graded / "report.html").read_text()
    assert results["forger"].score < 26 and all(math.isfinite(v) for v in results["forger"].timings.values()
                                                 if isinstance(v, float))
    escaped = results["escaper"].cell_errors
    assert escaped and "cleared your terminal" in escaped[0].error and not any(c in escaped[0].error for c in CONTROLS)
