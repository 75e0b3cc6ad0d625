"""The final grade: autograded + written answers (formgrader) + extra credit - late, added up in one place."""
import csv
import io

import pytest

from autograder.outputs import final, lms
from autograder.record import ERROR, INVALID
from helpers import make_result

AUTO = {"ex1": 10.0, "ex2": 16.0}
WRITTEN = {"q1": 2.0, "q2": 2.0}


def grades_of(results, manual=None, roster=None):
    return final.assignment_grades("causal_attention", "Causal attention", results, AUTO, WRITTEN, manual, roster)


def table(text):
    return list(csv.DictReader(io.StringIO(text)))


def test_the_total_adds_both_hands_and_takes_off_the_late_penalty_out_of_every_cell():
    ada = make_result("ada", [("ex1", 10, 10.0), ("ex2", 16, 16.0)], late_penalty=2.6, score=23.4)
    grades = grades_of([ada], {"ada": {"q1": (2.0, None), "q2": (1.5, 0.5), "ex1": (None, None)}})
    grade = grades.grades["ada"]
    assert grades.out_of == 30
    assert (grade.autograded, grade.written, grade.extra_credit, grade.late_penalty) == (26, 3.5, 0.5, 2.6)
    assert grade.total == pytest.approx(27.4) and grade.status == final.GRADED


def test_written_answers_not_graded_yet_are_never_a_silent_zero():
    ben = make_result("ben", [("ex1", 7, 10.0), ("ex2", 16, 16.0)])
    grade = grades_of([ben], {"ben": {"q1": (2.0, None), "q2": (None, None)}}).grades["ben"]
    assert grade.status == final.NEEDS_GRADING and grade.waiting == ["q2"]
    assert grade.total is None and grade.points_so_far == 25
    row = table(final.assignment_csv(grades_of([ben], {})))[0]
    assert row["total"] == "" and row["status"] == "needs grading" and row["waiting_for_grading"] == "q1 q2"


def test_a_ta_override_of_an_autograded_cell_counts_and_is_named():
    cy = make_result("cy", [("ex1", 4, 10.0), ("ex2", 16, 16.0)])
    grade = grades_of([cy], {"cy": {"ex1": (6.0, None), "q1": (2.0, None), "q2": (2.0, None)}}).grades["cy"]
    assert grade.autograded == 22 and grade.overridden == ["ex1"] and grade.total == 26


def test_invalid_error_and_missing_students_each_say_what_they_are():
    results = [make_result("dee", [("ex1", 0, 10.0), ("ex2", 0, 16.0)], INVALID),
               make_result("eve", [], ERROR)]
    grades = grades_of(results, {}, roster={"dee": {}, "eve": {}, "fay": {}})
    statuses = {s: g.status for s, g in grades.grades.items()}
    assert statuses == {"dee": final.NOT_GRADABLE, "eve": final.NOT_YET, "fay": final.NO_SUBMISSION}
    assert grades.grades["dee"].total == 0 and grades.grades["eve"].total is None


def test_the_penalty_never_takes_a_total_below_zero():
    late = make_result("gus", [("ex1", 1, 10.0), ("ex2", 0, 16.0)], late_penalty=1.0, score=0.0)
    grade = grades_of([late], {"gus": {"q1": (0.0, None), "q2": (0.0, None)}}).grades["gus"]
    assert grade.total == 0


def test_the_course_file_adds_assignments_once_nothing_is_missing():
    one = grades_of([make_result("ada", [("ex1", 10, 10.0), ("ex2", 16, 16.0)]),
                     make_result("ben", [("ex1", 5, 10.0), ("ex2", 5, 16.0)])],
                    {"ada": {"q1": (2.0, None), "q2": (2.0, None)}, "ben": {"q1": (1.0, None), "q2": (0.0, None)}})
    two = final.assignment_grades("self_attention", "Self-attention", [make_result("ada", [("e", 5, 10.0)],
                                                                                    assignment="self_attention")],
                                  {"e": 10.0}, {}, {})
    rows = {row["student_id"]: row for row in table(final.course_csv([one, two]))}
    assert rows["ada"] == {"student_id": "ada", "causal_attention": "30", "self_attention": "5", "total": "35",
                           "out_of": "40", "status": "graded"}
    assert rows["ben"]["total"] == "" and rows["ben"]["causal_attention"] == "11"
    assert rows["ben"]["status"] == "incomplete: self_attention (no submission)"


def test_canvas_without_a_roster_uses_the_canvas_id_the_intake_read():
    jane = make_result("jane", [("ex1", 10, 10.0), ("ex2", 16, 16.0)], lms={"canvas_id": "12345", "lms_name": "doejane"})
    grades = grades_of([jane], {"jane": {"q1": (2.0, None), "q2": (2.0, None)}})
    rows = list(csv.reader(io.StringIO(lms.CANVAS.export([grades]).text)))
    assert rows[1] == ["Points Possible", "", "", "", "", "30"]
    assert rows[2] == ["doejane", "12345", "", "", "", "30"]


def test_moodle_worksheet_by_participant_number():
    jane = make_result("jane-doe", [("ex1", 10, 10.0), ("ex2", 16, 16.0)],
                       lms={"moodle_participant": "101", "lms_name": "Jane Doe"})
    ben = make_result("ben", [("ex1", 10, 10.0), ("ex2", 16, 16.0)])  # not from Moodle: nothing to match by
    grades = grades_of([jane, ben], {s: {"q1": (1.0, None), "q2": (1.0, None)} for s in ("jane-doe", "ben")})
    export = lms.MOODLE.export([grades], key="participant")
    table = list(csv.reader(io.StringIO(export.text)))
    assert table[0] == ["Identifier", "Full name", "Email address", "Grade", "Maximum Grade", "Last modified (grade)"]
    assert table[1][:5] == ["Participant 101", "Jane Doe", "", "28", "30"] and table[1][5].endswith(" UTC")
    assert len(table) == 2
    assert export.not_on_roster == ["ben"]
