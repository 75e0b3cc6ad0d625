"""The result record: what goes to disk comes back, in Gradescope's format, and nothing else passes for one."""
import dataclasses
import json
import re

import pytest

from autograder.outputs.gradescope import schema_errors
from autograder.record import CellError, CellScore, CheckOutcome, Result, View, all_results, read_result, write_result
from helpers import ROOT, make_result


CRASH = "exercises/causal_attention/checks/test_ex3.py:41: NameError: name 'torhc' is not defined"


def sample(student="ada", status="graded"):
    """A result with every field set to something other than its default."""
    checks = [CheckOutcome("test_rows[0]", "rows sum to 1", True, 0.5),
              CheckOutcome("test_rows[1]", "rows sum to 1", False, 1.0, "Softmax ran over the wrong dimension."),
              CheckOutcome("test_mask", "masks the future", False, 1.0, "This check could not run (NameError).",
                           crash=CRASH),
              CheckOutcome("test_leak", "no future leak", False, 1.0, because="above"),
              CheckOutcome("test_diagnosis", "your answer and the common mistakes", False, 0.0, "Not scaled.",
                           cause=["not-scaled"])]
    cells = [CellScore("ex1", 2.0, 2.0, "all good", unanswered=True), CellScore("ex3", 1.5, 5.0, "see below", checks)]
    return make_result(student, cells, status, score=3.0, output=f"{student}: 3 / 7 points",
                       notes=["the read-only cell check-01 was edited (restored)"],
                       cell_errors=[CellError("ex3_answer", "Traceback\nValueError: boom\n")],
                       path=f"/in/{student}.ipynb",
                       notebook_sha256="ab" * 32, answers_key="cd" * 32, reused=True, reusable="ran to the end",
                       seed=7, submitted_at="2026-11-21T10:00:00+00:00", late_penalty=0.5,
                       late_note="1 day late: -0.5 points", sandbox="bubblewrap", lms={"canvas_id": "12345"},
                       execution_time=1.25,
                       timings={"run_cells": 0.5}, graded_notebook={"cells": [], "metadata": {"secret": "x"}},
                       visibility='{"default":0,"table":{"ex3::test_leak":1}}', levels=[0, 1],
                       views=[View(0, [CellScore("ex1", 2.0, 2.0), CellScore("ex3", 1.0, 4.0, "", checks[:3])],
                                   ["the read-only cell check-01 was edited (restored)"])])


def test_the_sample_sets_every_field():
    """So that the round trip below covers every field, including ones added later."""
    result = sample()
    for records in ([result], result.cells, [check for cell in result.cells for check in cell.checks],
                    result.cell_errors, result.views):
        for field in dataclasses.fields(records[0]):
            default = field.default_factory() if field.default_factory is not dataclasses.MISSING else field.default
            assert any(getattr(record, field.name) != default for record in records), \
                f"{type(records[0]).__name__}.{field.name}"


def test_a_result_survives_json_and_the_disk_with_every_field(tmp_path):
    result = sample()
    again = Result.from_json(json.loads(json.dumps(result.to_json())))
    assert again == result
    for field in dataclasses.fields(Result):
        if field.name != "graded_notebook":  # compared one by one: a field left out of == is caught too
            assert getattr(again, field.name) == getattr(result, field.name), field.name
    assert again.raw_score == 3.5  # the late penalty is still known
    write_result(tmp_path, result)
    assert read_result(tmp_path, "ada") == result
    assert [path.name for path in tmp_path.iterdir()] == ["ada.json"]  # no temporary file left behind


def test_a_broken_check_is_kept_for_the_ta_and_only_where_one_broke():
    result = sample()
    assert result.check_crashes() == [("ex3", "test_mask", CRASH)]
    checks = [check for test in result.to_json()["tests"] for check in test["extra_data"]["checks"]]
    assert [check.get("crash") for check in checks] == [None, None, CRASH, None, None]  # no empty field on every check
    assert [check.get("because") for check in checks] == [None, None, None, "above", None]
    assert [check.get("cause") for check in checks] == [None, None, None, None, ["not-scaled"]]
    assert Result.from_json(result.to_json()).check_crashes() == result.check_crashes()
    assert make_result("ben", [("ex3", 5.0, 5.0)]).check_crashes() == []


def test_the_graded_notebook_is_never_written(tmp_path):
    result = sample()
    assert "secret" not in json.dumps(result.to_json())
    assert Result.from_json(result.to_json()).graded_notebook is None
    write_result(tmp_path, result)
    assert "secret" not in (tmp_path / "ada.json").read_text()
    assert read_result(tmp_path, "ada").graded_notebook is None


@pytest.mark.parametrize("status", ["graded", "invalid", "error"])
def test_the_file_is_gradescope_results_json(status):
    for data in (sample(status=status).to_json(), sample(status=status).to_json({"ex3": "Exercise 3"}),
                 make_result("blank", status=status).to_json()):
        assert schema_errors(data) == []
    data = sample(status=status).to_json()
    assert [test["status"] for test in data["tests"]] == ["passed", "failed"]
    assert data["score"] == 3.0 and sum(test["max_score"] for test in data["tests"]) == 7
    broken = {key: value for key, value in data.items() if key != "tests"}
    broken["tests"] = [{"name": "ex1", "score": "two"}]
    assert schema_errors(broken)  # the check can fail


def test_titles_name_the_tests_and_keep_the_grade_ids():
    data = sample().to_json({"ex3": "Exercise 3: A causal attention module"})
    assert [t["name"] for t in data["tests"]] == ["ex1", "Exercise 3: A causal attention module"]
    assert Result.from_json(data).cells == sample().cells


NOT_RESULTS = {
    "empty": {},
    "a list": [sample().to_json()],
    "no extra_data": {"score": 1, "tests": []},
    "no student": {"score": 1, "extra_data": {"status": "graded"}},
    "no status": {"score": 1, "extra_data": {"student_id": "x"}},
    "no score": {"extra_data": {"student_id": "x", "status": "graded"}},
    "a score that is no number": {"score": "lots", "extra_data": {"student_id": "x", "status": "graded"}},
    "a test without a score": {"score": 1, "extra_data": {"student_id": "x", "status": "graded"},
                               "tests": [{"name": "ex1", "max_score": 2}]},
    "tests that are no list": {"score": 1, "extra_data": {"student_id": "x", "status": "graded"}, "tests": 3},
    "a check with unknown fields": {"score": 1, "extra_data": {"student_id": "x", "status": "graded"}, "tests": [
        {"name": "ex1", "score": 1, "max_score": 2, "extra_data": {"checks": [{"verdict": "fine"}]}}]},
}


@pytest.mark.parametrize("data", NOT_RESULTS.values(), ids=NOT_RESULTS.keys())
def test_anything_else_is_not_a_result(data):
    with pytest.raises(ValueError, match="not a result record"):
        Result.from_json(data)


def test_all_results_reads_the_results_and_skips_dot_files_and_files_it_cannot_read(tmp_path):
    write_result(tmp_path, sample("ben"))
    write_result(tmp_path, sample("ada"))
    write_result(tmp_path, sample("batch"), path=tmp_path / ".batch.json")  # the batch's own, result or not
    (tmp_path / "garbled.json").write_text('{"score": ')
    (tmp_path / "latin1.json").write_bytes(b'{"score": "\xe9"}')
    (tmp_path / "other.json").write_text(json.dumps({"score": 1, "tests": []}))  # JSON, not a result
    (tmp_path / "folder.json").mkdir()
    (tmp_path / "gone.json").symlink_to(tmp_path / "nowhere.json")
    (tmp_path / "ada.txt").write_text(json.dumps(sample("cy").to_json()))  # not a .json file
    assert all_results(tmp_path) == [sample("ada"), sample("ben")]  # in the order of their ids
    for unreadable in ("garbled", "latin1", "other", "folder", "gone", "nobody"):
        assert read_result(tmp_path, unreadable) is None, unreadable
    assert all_results(tmp_path / "missing") == []


def test_a_copy_for_an_identical_answer_is_marked_reused_and_names_its_student():
    leader = make_result("ada", [CellScore("ex1", 1.5, 2.0, "ex1: 1.5 / 2 points")], output="ada: 1.5 / 2 points",
                         notes=["ada's note"], cell_errors=[CellError("ex1_answer", "ValueError\n")],
                         path="/in/ada.ipynb", notebook_sha256="ab" * 32, answers_key="key", execution_time=3.0)
    before = Result.from_json(leader.to_json())
    copy = leader.copy_for("ben", "/in/ben.ipynb", "cd" * 32)
    assert copy.reused and not leader.reused
    assert copy.student_id == "ben" and copy.output == "ben: 1.5 / 2 points"
    assert copy.path == "/in/ben.ipynb" and copy.notebook_sha256 == "cd" * 32
    assert (copy.score, copy.cells, copy.notes, copy.cell_errors, copy.answers_key, copy.status) == (
        leader.score, leader.cells, leader.notes, leader.cell_errors, leader.answers_key, leader.status)
    assert copy.execution_time == 0  # nothing ran for it
    assert leader == before  # the leader's own result is unchanged
    copy.cells[0].score = 0
    assert leader.cells[0].score == 1.5  # and shares nothing with the copy


def test_timings_are_all_that_without_timings_drops():
    a, b = sample(), sample()
    b.execution_time, b.timings = 9.0, {"run_cells": 3.0}
    assert a != b and a.without_timings() == b.without_timings()
    b.score = 4.0
    assert a.without_timings() != b.without_timings()


def test_only_the_record_module_knows_the_file_layout():
    """Everything else reads results through the record, never by the JSON's keys."""
    readers = [path.relative_to(ROOT) for path in (ROOT / "autograder").rglob("*.py")
               if path.name != "record.py" and re.search(r"""["']extra_data["']""", path.read_text())]
    assert readers == []
