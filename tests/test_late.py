"""Late work: the policy's arithmetic, where times come from, and the penalty in every output."""
import csv
import tomllib
from datetime import datetime, timedelta, timezone

import pytest
from nbgrader.api import Gradebook

from autograder.grading.batch import grade_batch
from autograder.grading.late import LateError, LatePolicy, read_times
from autograder.outputs.results import gradebook_url
from autograder.record import read_result
from helpers import assignment_of, new_course
from test_identical import CountingScheduler, hand_in

DUE = datetime(2026, 11, 20, 23, 59, tzinfo=timezone.utc)
POLICY = {"due": DUE, "grace_minutes": 15, "percent_per_day": 10, "cap_percent": 30,
          "cutoff": DUE + timedelta(days=7)}


def policy(**changes):
    return LatePolicy.from_settings({**POLICY, **changes})


@pytest.mark.parametrize("late, percent", [
    (timedelta(hours=-3), 0),  # early
    (timedelta(minutes=14), 0),  # within the grace period
    (timedelta(minutes=16), 10),  # a started day
    (timedelta(days=1, minutes=1), 20),
    (timedelta(days=5), 30),  # capped
    (timedelta(days=8), 100),  # after the cutoff: nothing
])
def test_percent_per_started_day_with_grace_cap_and_cutoff(late, percent):
    points, why = policy().penalty(20, DUE + late)
    assert points == 20 * percent / 100
    assert (why == "") == (percent == 0)
    if percent == 30:
        assert "the most it can be" in why
    if percent == 100:
        assert "no points" in why


def test_per_hour_and_extensions():
    hourly = policy(percent_per_day=0, percent_per_hour=2, cap_percent=100)
    assert hourly.penalty(10, DUE + timedelta(hours=2, minutes=30))[0] == 0.6  # 3 started hours
    assert policy().penalty(20, DUE + timedelta(days=2), extension=timedelta(days=3)) == (0.0, "")
    assert policy().penalty(20, DUE + timedelta(days=9), extension=timedelta(days=3))[0] == 6  # cutoff moves too


@pytest.mark.parametrize("table, words", [
    ({"grace_minutes": 3}, "needs `due`"),
    ({"due": DUE, "percent_per_day": 1, "percent_per_hour": 1}, "not both"),
    ({"due": DUE, "cap_percent": 120}, "at most 100"),
    ({"due": DUE, "cutoff": DUE - timedelta(days=1)}, "before the due date"),
    ({"due": "next friday"}, "not a date and time"),
    ({"due": DUE, "penalty": 3}, "unknown settings"),
])
def test_a_bad_policy_is_named(table, words):
    with pytest.raises(LateError, match=words):
        LatePolicy.from_settings(table)


def test_toml_dates_and_nbgrader_timestamps_read_alike(tmp_path):
    table = tomllib.loads("due = 2026-11-20T23:59:00Z\ncutoff = 2026-11-27\n")
    read = LatePolicy.from_settings(table)
    assert read.due == DUE and read.cutoff == datetime(2026, 11, 27, 23, 59, 59, tzinfo=timezone.utc)
    (tmp_path / "times.csv").write_text("student_id,submitted_at\nx,2026-11-21 01:00:00.000000 UTC\n"
                                         "y,2026-11-21T02:00:00+01:00\n")
    times = read_times(tmp_path / "times.csv")
    assert times["x"] - DUE == timedelta(hours=1, minutes=1) and times["y"] == times["x"]


def test_on_time_late_extended_and_past_cutoff_in_every_output(tmp_path):
    course = new_course(tmp_path)
    settings = course / "exercises" / "causal_attention" / "assignment.toml"
    settings.write_text(settings.read_text() + "\n[late]\ndue = 2026-11-20T23:59:00Z\ngrace_minutes = 15\n"
                        "percent_per_day = 10\ncap_percent = 50\ncutoff = 2026-11-27T23:59:00Z\n")
    submitted = course / "submitted"
    students = {"ontime": DUE - timedelta(hours=1), "late": DUE + timedelta(days=1, hours=2),
                "extended": DUE + timedelta(days=2), "toolate": DUE + timedelta(days=8)}
    for student, when in students.items():
        hand_in(submitted / student / "causal_attention", {"causal_attention": "ada"})
        (submitted / student / "causal_attention" / "timestamp.txt").write_text(
            when.strftime("%Y-%m-%d %H:%M:%S.%f UTC"))
    hand_in(submitted / "unknown" / "causal_attention", {"causal_attention": "ada"})
    roster = {"extended": {"student_id": "extended", "extension_hours": "72"}}
    report = grade_batch(assignment_of(course), [submitted], scheduler=CountingScheduler(), seed=1, roster=roster)
    out = report.out_dir
    raw, most = read_result(out, "ontime").raw_score, read_result(out, "ontime").max_score
    assert raw > most * 0.2  # percentages are of the maximum score, and never take the total below 0
    expected = {"ontime": 0.0, "late": round(most * 0.2, 2), "extended": 0.0, "toolate": raw, "unknown": 0.0}
    for student, penalty in expected.items():
        result = read_result(out, student)
        assert result.late_penalty == penalty and result.raw_score == raw, student
        assert result.score == round(raw - penalty, 2)
    assert read_result(out, "late").submitted_at.startswith("2026-11-22T01:59")
    assert "unknown" in read_result(out, "unknown").late_note
    rows = {row["student_id"]: row for row in csv.DictReader(open(out / "grades.csv"))}
    assert float(rows["late"]["late_penalty"]) == expected["late"] and float(rows["late"]["raw_total"]) == raw
    assert float(rows["toolate"]["total"]) == 0 and "no points" in rows["toolate"]["notes"]
    page = (out / "feedback" / "late.html").read_text()
    assert "late penalty" in page and "20% of the points" in page
    assert "late penalty" not in (out / "feedback" / "ontime.html").read_text()
    with Gradebook(gradebook_url(course)) as gradebook:
        penalties = {s.student.id: s.notebooks[0].late_submission_penalty
                     for s in gradebook.assignment_submissions("causal_attention")}
        stamp = gradebook.find_submission("causal_attention", "late").timestamp
    assert penalties["late"] == expected["late"] and not penalties["ontime"]
    assert stamp == (DUE + timedelta(days=1, hours=2)).replace(tzinfo=None)


def test_gradescope_metadata_gives_the_time_and_an_extension(tmp_path):
    import json

    from autograder.outputs.gradescope import submission_time

    metadata = {"created_at": "2026-11-22T10:00:00.000000-08:00",
                "assignment": {"due_date": "2026-11-20T23:59:00.000000+00:00"},
                "users": [{"email": "ada@uni.example", "assignment": {"due_date": "2026-11-22T23:59:00.000000+00:00"}}]}
    (tmp_path / "submission_metadata.json").write_text(json.dumps(metadata))
    times, roster = submission_time(tmp_path / "submission_metadata.json", "submission")
    assert times["submission"] == datetime(2026, 11, 22, 18, 0, tzinfo=timezone.utc)
    assert float(roster["submission"]["extension_hours"]) == 48
    assert submission_time(tmp_path / "missing.json", "submission") == ({}, {})
