"""The result record: one typed model, one module that reads and writes it."""
import json
import re

import pytest

from autograder.outputs.gradescope import schema_errors
from autograder.record import (CellError, CellScore, CheckOutcome, Result, all_results, read_result, result_path,
                               write_result)
from helpers import ROOT


def sample(student="ada", status="graded"):
    checks = [CheckOutcome("test_rows[0]", "rows sum to 1", True),
              CheckOutcome("test_rows[1]", "rows sum to 1", False, 1.0, "Softmax ran over the wrong dimension.")]
    return Result(student_id=student, assignment="causal_attention", status=status, score=3.5,
                  cells=[CellScore("ex1", 2.0, 2.0, "all good"), CellScore("ex3", 1.5, 5.0, "see below", checks)],
                  output=f"{student}: 3.5 / 7 points", notes=["the read-only cell check-01 was edited (restored)"],
                  cell_errors=[CellError("ex3_answer", "Traceback\nValueError: boom\n")], path="/in/ada.ipynb",
                  notebook_sha256="ab" * 32, seed=7, sandbox="bubblewrap", execution_time=1.25,
                  timings={"run_cells": 0.5})


def test_a_result_survives_the_disk_unchanged(tmp_path):
    result = sample()
    write_result(tmp_path, result)
    assert read_result(tmp_path, "ada") == result
    assert [p.name for p in tmp_path.iterdir()] == ["ada.json"]  # no temporary file left behind


def test_the_file_is_gradescope_results_json():
    data = sample().to_json()
    assert schema_errors(data) == []
    assert [t["status"] for t in data["tests"]] == ["passed", "failed"]
    assert sum(t["max_score"] for t in data["tests"]) == 7


def test_titles_name_the_tests_and_keep_the_grade_ids():
    data = sample().to_json({"ex3": "Exercise 3: A causal attention module"})
    assert [t["name"] for t in data["tests"]] == ["ex1", "Exercise 3: A causal attention module"]
    assert Result.from_json(data).cells[1].name == "ex3"


def test_derived_values():
    result = sample()
    assert result.max_score == 7 and result.scores == {"ex1": 2.0, "ex3": 1.5}
    assert result.finished and not result.unsandboxed
    assert [(cell, check.message) for cell, check in result.failed_checks()] == [
        ("ex3", "Softmax ran over the wrong dimension.")]
    assert not sample(status="error").finished and Result("x", "a", "graded", sandbox="none").unsandboxed


def test_timings_are_all_that_without_timings_drops():
    a, b = sample(), sample()
    b.execution_time, b.timings = 9.0, {"run_cells": 3.0}
    assert a != b and a.without_timings() == b.without_timings()
    b.score = 4.0
    assert a.without_timings() != b.without_timings()


def test_files_that_are_not_results_are_left_out(tmp_path):
    write_result(tmp_path, sample("ada"))
    write_result(tmp_path, sample("ben"))
    (tmp_path / "garbled.json").write_text('{"score": ')
    (tmp_path / "other.json").write_text(json.dumps({"score": 1, "tests": []}))  # no extra_data
    (tmp_path / ".batch.json").write_text(json.dumps({"seed": 1}))
    assert [r.student_id for r in all_results(tmp_path)] == ["ada", "ben"]
    assert read_result(tmp_path, "garbled") is None and read_result(tmp_path, "nobody") is None
    with pytest.raises(ValueError, match="not a result record"):
        Result.from_json({"score": 1, "extra_data": {"student_id": "x", "status": "graded"},
                          "tests": [{"name": "ex1"}]})  # a test without a score


def test_result_path_is_one_file_per_student(tmp_path):
    assert result_path(tmp_path, "s001_ada") == tmp_path / "s001_ada.json"


def test_only_the_record_module_knows_the_file_layout():
    """Everything else reads results through the record, never by the JSON's keys."""
    readers = [path.relative_to(ROOT) for path in (ROOT / "autograder").rglob("*.py")
               if path.name != "record.py" and re.search(r"""["']extra_data["']""", path.read_text())]
    assert readers == []
