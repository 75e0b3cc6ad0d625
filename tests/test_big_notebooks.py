"""Outputs never cost points: a notebook is judged by what runs, not by the pictures it saved.

Grading runs the cells again and never uses their outputs, so outputs (and attachments and
execution counts) are cleared before the size limit is checked; the limit (20 MB by default,
`autograder grade --max-notebook-mb`) is on what is left. A file too large to read safely
(over 512 MB, or over the limit if that is larger) is still refused without being parsed.
"""
import base64
import json
import os

import nbformat
import pytest

from autograder.course import CourseError
from autograder.grading.notebook import MAX_FILE_BYTES, InvalidNotebook, read_notebook, read_notebook_and_sha, sha256
from autograder.runs.batch import grade_batch
from helpers import assignment_of, example, make_gradebook, new_course

needs_bwrap = pytest.mark.usefixtures("sandbox_required")
MB = 2**20


def with_images(notebook, megabytes, attachment=True):
    """`notebook` as plain JSON with `megabytes` of PNG outputs (random bytes: incompressible,
    like a real plot) spread over its code cells, execution counts, and an attachment."""
    data = json.loads(nbformat.writes(notebook))
    code = [cell for cell in data["cells"] if cell["cell_type"] == "code"]
    each = megabytes * MB // len(code)
    for count, cell in enumerate(code, start=1):
        picture = base64.b64encode(os.urandom(each * 3 // 4)).decode()
        cell["outputs"] = [{"output_type": "display_data", "metadata": {},
                            "data": {"image/png": picture, "text/plain": "<Figure size 640x480>"}}]
        cell["execution_count"] = count
    markdown = next(cell for cell in data["cells"] if cell["cell_type"] == "markdown")
    if attachment:
        markdown["attachments"] = {"plot.png": {"image/png": base64.b64encode(os.urandom(3000)).decode()}}
    return data


def write_json(path, data):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data))
    return path


def with_pasted_data(notebook, megabytes):
    """`notebook` with a cell of its own holding `megabytes` of source (a pasted data set)."""
    notebook = nbformat.from_dict(json.loads(nbformat.writes(notebook)))
    notebook.cells.append(nbformat.v4.new_code_cell("DATA = " + repr("x" * (megabytes * MB))))
    return json.loads(nbformat.writes(notebook))


def test_outputs_are_cleared_and_not_counted(tmp_path):
    path = write_json(tmp_path / "plots.ipynb", with_images(example("ada"), 3))
    assert path.stat().st_size > 3 * MB
    notebook, sha = read_notebook_and_sha(path, max_bytes=1 * MB)  # over the limit only with its outputs
    code = [cell for cell in notebook.cells if cell.cell_type == "code"]
    assert all(cell.outputs == [] and cell.execution_count is None for cell in code)
    assert not any("attachments" in cell for cell in notebook.cells)
    assert sha == sha256(path)  # the file's own hash, outputs and all
    assert [c.source for c in notebook.cells] == [c.source for c in example("ada").cells]


def test_a_notebook_whose_source_is_over_the_limit_is_refused_with_a_clear_message(tmp_path):
    path = write_json(tmp_path / "pasted.ipynb", with_pasted_data(example("ada"), 2))
    with pytest.raises(InvalidNotebook, match=r"is 2 MB even without its outputs, over the 1 MB limit on what the"
                                              r" grader runs \(remove large data pasted into cells"):
        read_notebook(path, max_bytes=1 * MB)
    assert read_notebook(path, max_bytes=3 * MB).cells[-1].source.startswith("DATA = ")  # a higher limit


def test_a_file_too_large_to_read_safely_is_refused_unread(tmp_path, monkeypatch):
    import autograder.grading.notebook as reader

    path = tmp_path / "huge.ipynb"
    with open(path, "wb") as handle:
        handle.truncate(MAX_FILE_BYTES + 88 * MB)  # sparse: nothing to parse, and nothing is
    monkeypatch.setattr(reader.json, "loads", lambda *a, **k: pytest.fail("a file over the hard bound was parsed"))
    with pytest.raises(InvalidNotebook, match=r"the file is 600 MB, over the 512 MB the grader reads \(clear the"
                                              r" outputs"):
        read_notebook(path, max_bytes=100 * MB)


def test_the_option_is_on_the_command_line_and_checked(tmp_path):
    from autograder.cli import parser

    args = parser().parse_args(["grade", "causal_attention", "in", "--max-notebook-mb", "35.5"])
    assert args.max_notebook_mb == 35.5 and parser().parse_args(["grade", "x", "in"]).max_notebook_mb is None
    with pytest.raises(CourseError, match="a number of MB above 0"):
        grade_batch(assignment_of(), [tmp_path], max_notebook_mb=0)  # before anything is read or written


@pytest.mark.slow
@needs_bwrap
def test_a_50_mb_notebook_of_right_answers_gets_full_marks(tmp_path):
    """The issue's case: right answers, saved with their plots. And the option, end to end: the
    worker and the batch's own reading both use it."""
    course = make_gradebook(new_course(tmp_path))
    inbox = tmp_path / "inbox"
    big = write_json(inbox / "plotter.ipynb", with_images(example("ada"), 50))
    assert big.stat().st_size > 50 * MB
    write_json(inbox / "paster.ipynb", with_pasted_data(example("ada"), 2))
    report = grade_batch(assignment_of(course), [inbox], jobs=2, seed=1, max_notebook_mb=1.5)
    results = {result.student_id: result for result in report.results}
    assert results["plotter"].status == "graded" and results["plotter"].score == results["plotter"].max_score == 26
    assert results["paster"].status == "invalid" and results["paster"].score == 0
    assert "even without its outputs, over the 1.5 MB limit" in results["paster"].output
    autograded = course / "autograded" / "plotter" / "causal_attention" / "causal_attention.ipynb"
    assert autograded.stat().st_size < 5 * MB  # what formgrader shows: the answers, not 50 MB of plots
