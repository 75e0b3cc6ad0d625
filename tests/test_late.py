"""Late work: the policy's arithmetic, where times come from, and the penalty in every output."""
import csv
import tomllib
from datetime import datetime, timedelta, timezone

import pytest
from nbgrader.api import Gradebook

from autograder.runs.batch import grade_batch
from autograder.runs.late import LateError, LatePolicy, read_timestamp, read_times
from autograder.outputs.gradebook_db import gradebook_url
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


def test_the_base_is_the_total_by_default_or_the_autograded_points():
    total = LatePolicy.from_settings({**POLICY, "of": "total"}).__class__(DUE, percent_per_day=10, total=30)
    assert total.penalty(26, DUE + timedelta(hours=1)) == (3.0, total.penalty(26, DUE + timedelta(hours=1))[1])
    assert "10% of all 30 points (the written answers' included)" in total.penalty(26, DUE + timedelta(hours=1))[1]
    autograded = LatePolicy(DUE, percent_per_day=10, total=30, of="autograded")
    assert autograded.penalty(26, DUE + timedelta(hours=1))[0] == 2.6
    cutoff = LatePolicy(DUE, percent_per_day=10, total=30, of="autograded", cutoff=DUE + timedelta(days=1))
    assert cutoff.penalty(26, DUE + timedelta(days=2))[0] == 30  # after the cutoff, every point either way
    assert policy().of == "total"


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
    ({"due": DUE, "of": "maximum"}, "\"total\" .* or \"autograded\", not 'maximum'"),
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


@pytest.mark.parametrize("of", ["total", "autograded", None])
def test_on_time_late_extended_and_past_cutoff_in_every_output(tmp_path, of):
    """The penalty is a share of every graded cell's points (30: the written answers' 4 too) by
    default, as the docs say, or of the 26 autograded points; the base is said on the page, in the
    class report and in the final grade file, and the penalty comes off the final grade whole."""
    from autograder.course import Course
    from autograder.grading.notebook import grade_cells, manual_cells
    from autograder.runs.recording import read_source
    from autograder.runs.finalgrades import export

    course = new_course(tmp_path)
    settings = course / "exercises" / "causal_attention" / "assignment.toml"
    settings.write_text(settings.read_text() + "\n[late]\ndue = 2026-11-20T23:59:00Z\ngrace_minutes = 15\n"
                        "percent_per_day = 10\ncap_percent = 50\ncutoff = 2026-11-27T23:59:00Z\n"
                        + (f'of = "{of}"\n' if of else ""))
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
    source = read_source(assignment_of(course))
    total = sum(grade_cells(source).values()) + sum(manual_cells(source).values())
    base = most if of == "autograded" else total
    assert 0 < raw <= most < total  # the course has written answers
    expected = {"ontime": 0.0, "late": round(base * 0.2, 2), "extended": 0.0, "toolate": total, "unknown": 0.0}
    for student, penalty in expected.items():
        result = read_result(out, student)
        assert result.late_penalty == penalty and result.raw_score == raw, student
        assert result.score == max(0.0, round(raw - penalty, 2))  # the autograded score stops at 0
    assert read_result(out, "late").submitted_at.startswith("2026-11-22T01:59")
    assert "unknown" in read_result(out, "unknown").late_note
    rows = {row["student_id"]: row for row in csv.DictReader(open(out / "grades.csv"))}
    assert float(rows["late"]["late_penalty"]) == expected["late"] and float(rows["late"]["raw_total"]) == raw
    assert float(rows["toolate"]["total"]) == 0 and "no points" in rows["toolate"]["notes"]
    page = (out / "feedback" / "late.html").read_text()
    words = f"20% of the {most:g} autograded points" if of == "autograded" else \
        f"20% of all {total:g} points (the written answers&#39; included)"
    assert "late penalty" in page and words in page
    assert "late penalty" not in (out / "feedback" / "ontime.html").read_text()
    report_page = (out / "report.html").read_text()
    autograded = sum(grade_cells(source).values())  # (the counting scheduler grades fewer cells)
    assert (f"10% of the {autograded:g} autograded points per started day late" if of == "autograded" else
            f"10% of all {total:g} points (the written answers&#39; included) per started day late") in report_page
    assert "1 student lost" in report_page or "2 students lost" in report_page
    with Gradebook(gradebook_url(course)) as gradebook:
        penalties = {s.student.id: s.notebooks[0].late_submission_penalty
                     for s in gradebook.assignment_submissions("causal_attention")}
        stamp = gradebook.find_submission("causal_attention", "late").timestamp
    assert penalties["late"] == expected["late"] and not penalties["ontime"]
    assert stamp == (DUE + timedelta(days=1, hours=2)).replace(tzinfo=None)
    # The final grade file: the base in its own column, the penalty off autograded + written together.
    final = export(Course(course), ["causal_attention"], "csv")
    rows = {row["student_id"]: row for row in csv.DictReader(open(final.target))}
    assert {row["late_penalty_of"] for row in rows.values()} == {f"{autograded if of == 'autograded' else total:g}"}
    assert rows["late"]["late_penalty"] == f"{expected['late']:g}" and rows["toolate"]["late_penalty"] == f"{total:g}"


def test_gradescope_metadata_gives_the_time_and_an_extension(tmp_path):
    import json

    from autograder.runs.gradescope import submission_time

    metadata = {"created_at": "2026-11-22T10:00:00.000000-08:00",
                "assignment": {"due_date": "2026-11-20T23:59:00.000000+00:00"},
                "users": [{"email": "ada@uni.example", "assignment": {"due_date": "2026-11-22T23:59:00.000000+00:00"}}]}
    (tmp_path / "submission_metadata.json").write_text(json.dumps(metadata))
    times, roster = submission_time(tmp_path / "submission_metadata.json", "submission")
    assert times["submission"] == datetime(2026, 11, 22, 18, 0, tzinfo=timezone.utc)
    assert float(roster["submission"]["extension_hours"]) == 48
    assert submission_time(tmp_path / "missing.json", "submission") == ({}, {})


@pytest.mark.parametrize("content, words", [
    (b"yesterday, honest", "'yesterday, honest' is not a date and time"),
    (b"\xff\xfe2026-11-20\x80", "not UTF-8 text"),
    (b"0001-01-01 00:00:00.000000 UTC", "outside the years 1990 to 2199"),
    (b"0001-01-01 00:00:00+01:00", "outside the years"),  # before Python's first day in UTC
    (b"9999-12-31T23:59:59-01:00", "outside the years"),  # after its last
    (b"\x1b]52;c;cGF3bmVk\x07", "'\\x1b]52;c;cGF3bmVk\\x07' is not"),  # shown as escapes
    (b"", "'' is not a date and time"),
])
def test_an_unreadable_timestamp_is_said_never_raised(tmp_path, content, words):
    (tmp_path / "timestamp.txt").write_bytes(content)
    when, why = read_timestamp(tmp_path / "causal_attention.ipynb")
    assert when is None and why.startswith("timestamp.txt") and words in why


def test_a_timestamp_is_read_to_a_few_hundred_bytes_from_a_plain_file_only(tmp_path):
    import os
    import resource

    for name in ("huge", "link", "pipe", "fine", "none"):
        (tmp_path / name).mkdir()
    with open(tmp_path / "huge" / "timestamp.txt", "wb") as handle:
        handle.write(b"2026-11-20 10:00:00.000000 UTC")
        handle.truncate(300 * 2**20)  # sparse: nothing like 300 MB on disk
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    assert read_timestamp(tmp_path / "huge" / "n.ipynb") == (
        None, "timestamp.txt is longer than 256 bytes, far longer than a date and time")
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before < 50 * 1024  # KiB: never read whole
    os.symlink("/etc/hostname", tmp_path / "link" / "timestamp.txt")
    assert read_timestamp(tmp_path / "link" / "n.ipynb") == (None, "timestamp.txt is a link, not a file")
    os.mkfifo(tmp_path / "pipe" / "timestamp.txt")  # opened without waiting for a writer
    assert read_timestamp(tmp_path / "pipe" / "n.ipynb") == (None, "timestamp.txt is not a plain file")
    (tmp_path / "fine" / "timestamp.txt").write_text("2026-11-20 10:00:00.000000 UTC\n")
    assert read_timestamp(tmp_path / "fine" / "n.ipynb") == (datetime(2026, 11, 20, 10, tzinfo=timezone.utc), "")
    assert read_timestamp(tmp_path / "none" / "n.ipynb") == (None, "")


def test_a_due_date_or_a_ta_s_time_outside_the_sane_years_is_refused(tmp_path):
    with pytest.raises(LateError, match="outside the years"):
        LatePolicy.from_settings({"due": datetime(1, 1, 1, tzinfo=timezone.utc)})
    (tmp_path / "times.csv").write_text("student_id,submitted_at\nx,0001-01-01T00:00:00+01:00\n")
    with pytest.raises(LateError, match="line 2: 0001-01-01T00:00:00"):
        read_times(tmp_path / "times.csv")


def test_the_submission_time_is_recorded_without_a_late_policy(tmp_path):
    """timestamp.txt says when it was handed in: that is worth keeping with no policy to apply."""
    from autograder.runs.late import LateWork
    from helpers import make_result

    folder = tmp_path / "ada" / "causal_attention"
    folder.mkdir(parents=True)
    (folder / "timestamp.txt").write_text("2026-11-20 10:00:00.000000 UTC")
    result = make_result("ada", [("ex1", 2, 2.0)], path=str(folder / "causal_attention.ipynb"))
    recorded = LateWork(None).apply(result)
    assert recorded.submitted_at == "2026-11-20T10:00:00+00:00"
    assert recorded.score == 2 and recorded.late_penalty == 0 and recorded.late_note == ""
    assert result.submitted_at == ""  # a copy: the raw result identical answers keep is untouched


@pytest.mark.parametrize("stamp, expected", [
    ("2026-11-20-15-00-00", "2026-11-20T15:00:00+00:00"),  # nbgrader's FileNameCollector example
    ("20261120T150000", "2026-11-20T15:00:00+00:00"),
    ("2026-11-20T15:00:00+01:00", "2026-11-20T15:00:00+01:00"),
])
def test_a_time_read_from_a_file_name_counts_for_the_late_policy(stamp, expected):
    from autograder.grading.notebook import Submission
    from autograder.runs.late import LateWork
    from helpers import make_result

    late = LateWork(LatePolicy.from_settings({"due": "2026-11-20T12:00:00Z", "percent_per_day": 10}))
    late.given([Submission("ada", "ada.ipynb", submitted_at=stamp)])
    result = late.apply(make_result("ada", [("ex1", 10, 10.0)]))
    assert result.submitted_at == expected and result.late_penalty == 1.0


def test_a_time_in_a_file_name_that_is_not_one_is_named():
    from autograder.grading.notebook import Submission
    from autograder.runs.late import LateWork

    late = LateWork(LatePolicy.from_settings({"due": "2026-11-20T12:00:00Z", "percent_per_day": 10}))
    submissions = [Submission("ada", "ada.ipynb", submitted_at="2026-13-40-15-00-00")]
    late.given(submissions)
    [(student, why)] = late.unreadable(submissions)
    assert student == "ada" and "the time in its file name" in why and "month must be in 1..12" in why
