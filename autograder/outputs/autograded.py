"""nbgrader's autograded/<student>/<assignment>/<assignment>.ipynb: each graded notebook, with
our feedback as the outputs of its graded cells, for formgrader to show next to the written
answers a TA grades by hand."""
import json
from pathlib import Path

from autograder.course import write_atomically
from autograder.outputs.base import Output


class AutogradedNotebooks(Output):
    what = "its graded notebook in autograded/"
    needs_notebook = True

    def __init__(self, root, assignment):
        self.root, self.assignment = Path(root), assignment

    def add(self, result):
        if result.graded_notebook is not None:  # none for a file that could not be read
            write_autograded(self.root, self.assignment, result.student_id, result.graded_notebook, result)


def write_autograded(root, assignment, student_id, notebook, result):
    """nbgrader's autograded/<student>/<assignment>/<notebook>.ipynb, with our feedback as outputs.

    `notebook` was read and validated by sanitizing; it is written as plain JSON, as
    nbformat writes it, without validating it again (nbformat's write and output
    constructors validated it twice more, which took most of this function's time)."""
    by_cell = {cell.name: cell for cell in result.cells}
    cells, seen = [], set()
    for index, cell in enumerate(notebook["cells"]):
        cell = dict(cell)  # the caller's notebook stays as it is (identical answers share it)
        meta = cell.get("metadata", {}).get("nbgrader", {})
        test = by_cell.get(meta.get("grade_id"))
        if cell["cell_type"] == "code" and test and meta.get("grade") and not meta.get("solution"):
            cell["outputs"] = [
                {"output_type": "stream", "name": "stdout", "text": test.output + "\n"},
                {"output_type": "execute_result", "data": {"text/plain": f"{test.score:g}"}, "metadata": {},
                 "execution_count": None},
            ]
        if cell.get("id") in seen or not cell.get("id"):  # ids must be unique (nbformat 4.5)
            cell["id"] = f"cell-{index}-{len(seen)}"
        seen.add(cell["id"])
        cells.append(cell)
    folder = Path(root) / student_id / assignment
    folder.mkdir(parents=True, exist_ok=True)
    # Every cell has an id now: that is nbformat 4.5 (an older notebook is upgraded, as nbformat does).
    upgraded = {**notebook, "cells": cells, "nbformat_minor": max(notebook.get("nbformat_minor", 5), 5)}
    text = json.dumps(upgraded, sort_keys=True, indent=1, ensure_ascii=False)
    return write_atomically(folder / f"{assignment}.ipynb", text + "\n")
