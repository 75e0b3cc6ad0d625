"""Grades out to Canvas and Moodle: their import columns, a roster, nobody dropped in silence."""
import csv
import io

import pytest

from autograder.outputs import final, lms
from autograder.record import ERROR, GRADED, INVALID, write_result
from helpers import cli, make_result, new_course


RESULTS = [make_result(student, [("ex1", score, 26.0)], status) for student, score, status in [
    ("s1", 26, GRADED), ("s2", 17.8, GRADED), ("s3", 0, INVALID), ("s4", 0, ERROR), ("stranger", 12, GRADED)]]
ROSTER = """student_id,name,canvas_id,sis_user_id,sis_login_id,section,email,id_number
s1,"Lovelace, Ada",101,A001,ada,Mon,ada@uni.example,A001
s2,"Babbage, Ben",102,A002,ben,Tue,ben@uni.example,A002
s3,"Cy, Cy",103,A003,cy,Mon,cy@uni.example,A003
s4,"Dee, Dee",104,A004,dee,Tue,dee@uni.example,A004
s5,"Eve, Eve",105,A005,eve,Mon,eve@uni.example,A005
"""


def rows(text):
    return list(csv.reader(io.StringIO(text)))


def graded(results, title="Causal attention", roster=None, out_of=26.0):
    """One assignment's final grades: every cell autograded (no written answers), out of `out_of`."""
    return [final.assignment_grades("causal_attention", title, results, {"ex1": out_of}, {}, roster=roster)]


@pytest.fixture
def roster(tmp_path):
    path = tmp_path / "roster.csv"
    path.write_text("\ufeff" + ROSTER)  # as Excel saves it
    return lms.read_roster(path)


def test_canvas_has_its_columns_the_points_row_and_every_roster_student(roster):
    export = lms.CANVAS.export(graded(RESULTS, roster=roster), roster)
    table = rows(export.text)
    assert table[0] == ["Student", "ID", "SIS User ID", "SIS Login ID", "Section", "Causal attention"]
    assert table[1] == ["Points Possible", "", "", "", "", "26"]
    by_login = {row[3]: row for row in table[2:]}
    assert by_login["ada"] == ["Lovelace, Ada", "101", "A001", "ada", "Mon", "26"]
    assert by_login["ben"][5] == "17.8" and by_login["cy"][5] == "0"  # an invalid notebook is a real 0
    assert by_login["dee"][5] == "" and by_login["eve"][5] == ""  # no grade yet: left for a person
    assert export.exported == 3
    assert export.without_result == ["s5"] and export.not_on_roster == ["stranger"] and export.not_finished == ["s4"]


def test_moodle_by_id_number_or_email(roster):
    table = rows(lms.MOODLE.export(graded(RESULTS, roster=roster), roster).text)
    assert table[0] == ["ID number", "Causal attention"] and ["A002", "17.8"] in table
    table = rows(lms.MOODLE.export(graded(RESULTS, roster=roster), roster, key="email").text)
    assert table[0] == ["Email address", "Causal attention"] and ["ada@uni.example", "26"] in table
    with pytest.raises(lms.RosterError, match="by email or id_number \\(or participant\\), not name"):
        lms.MOODLE.export(graded(RESULTS, roster=roster), roster, key="name")


def test_without_a_roster_student_ids_are_the_lms_ids():
    table = rows(lms.CANVAS.export(graded(RESULTS, "A")).text)
    assert ["s1", "", "s1", "", "", "26"] in table and len(table) == 2 + len(RESULTS)
    table = rows(lms.MOODLE.export(graded(RESULTS, "A")).text)
    assert ["stranger", "12"] in table


@pytest.mark.parametrize("text, words", [
    ("name,email\nAda,a@x\n", "a roster has a student_id column, or is Canvas.s gradebook export \\(Student, ID\\) or Moodle.s grading worksheet"),
    ("student_id,email\ns1,a@x\ns1,b@x\n", "on the roster twice"),
    ("student_id,email\n,a@x\n", "line 2: no student_id"),
])
def test_a_bad_roster_is_named(tmp_path, text, words):
    path = tmp_path / "roster.csv"
    path.write_text(text)
    with pytest.raises(lms.RosterError, match=words):
        lms.read_roster(path)


def test_a_roster_without_the_needed_ids_is_refused(tmp_path):
    path = tmp_path / "roster.csv"
    path.write_text("student_id,email\ns1,a@x\n")
    roster = lms.read_roster(path)
    with pytest.raises(lms.RosterError, match="Canvas matches students"):
        lms.CANVAS.export(graded(RESULTS, "A", roster), roster)
    with pytest.raises(lms.RosterError, match="no id_number for s1"):
        lms.MOODLE.export(graded(RESULTS, "A", roster), roster)


def test_the_export_command(tmp_path):
    course = new_course(tmp_path)
    out = course / "graded" / "causal_attention"
    out.mkdir(parents=True)
    for item in RESULTS:
        write_result(out, item)
    (tmp_path / "roster.csv").write_text(ROSTER)
    done = cli("export", "canvas", "causal_attention", "--course", course, "--roster", tmp_path / "roster.csv")
    assert done.returncode == 1, done.stdout + done.stderr  # s4 is not graded yet; "stranger" is not on the roster
    said = " ".join(done.stdout.split())
    # only s3's is final: an invalid notebook's 0; the others' written answers wait for formgrader
    assert "1 student with a final grade" in said and "nothing handed in (left empty): s5" in said
    assert "3 written answers still to grade in formgrader (no final grade yet): s1, s2, stranger" in said
    assert "1 graded but not on the roster (not in the file): stranger" in said
    assert "not graded yet because of a grader error: run `autograder grade` again: s4" in said
    table = rows((out / "canvas-causal_attention.csv").read_text())
    assert table[1][-1] == "30" and table[0][-1] == "Causal attention"  # every cell's points, written answers too
    assert [row[-1] for row in table[2:]] == ["", "", "0", "", ""]
    done = cli("export", "moodle", "causal_attention", "--course", course, "--roster", tmp_path / "missing.csv")
    assert done.returncode == 2 and "cannot read the roster" in " ".join(done.stdout.split())


@pytest.mark.parametrize("start", ["=", "+", "-", "@", "\t", "\r"])
def test_a_student_id_or_name_is_never_a_formula_in_an_export(start):
    """OWASP's CSV injection: a cell starting with = + - @ tab or CR runs as a formula in a
    spreadsheet; it gets a quote in front, and the points stay numbers."""
    evil = f"{start}HYPERLINK(\"http://x.example\",\"click\")"
    canvas = rows(lms.CANVAS.export(graded([make_result(evil, [("ex1", 26, 26.0)])])).text)
    assert canvas[2][0] == "'" + evil and canvas[2][2] == "'" + evil and canvas[2][5] == "26"
    roster = {"s1": {"student_id": "s1", "name": evil, "sis_user_id": "A001", "id_number": evil}}
    roster_rows = rows(lms.CANVAS.export(graded([make_result("s1", [("ex1", 26, 26.0)])], roster=roster), roster).text)
    assert roster_rows[2][0] == "'" + evil
    moodle = rows(lms.MOODLE.export(graded([make_result(evil, [("ex1", 17.8, 26.0)])])).text)
    assert moodle[1] == ["'" + evil, "17.8"]
    assert rows(lms.CANVAS.export(graded([make_result("plain", [("ex1", 1, 26.0)])], "=SUM(1)")).text)[0][5] == "'=SUM(1)"


# Moodle's grading worksheet as its "Download grading worksheet" writes it (Moodle 4.x columns).
MOODLE_WORKSHEET = """Identifier,"Full name","Email address",Status,Grade,"Maximum Grade","Grade can be changed","Last modified (submission)","Last modified (grade)","Feedback comments"
"Participant 5130","Ada Lovelace",ada@uni.example,"Submitted for grading",,30.00,Yes,"Friday, 20 November 2026, 10:02 PM",-,
"Participant 5131","Ben Babbage",ben@uni.example,"Submitted for grading",12.00,30.00,Yes,"Friday, 20 November 2026, 11:40 PM","Saturday, 21 November 2026, 9:15 AM",
"Participant 5132","Jo Smith",jo1@uni.example,"No submission",,30.00,Yes,-,-,
"Participant 5133","Jo Smith",jo2@uni.example,"No submission",,30.00,Yes,-,-,
"""
# Canvas's gradebook export as it comes: a Points Possible row, a test student.
CANVAS_GRADEBOOK = """Student,ID,SIS User ID,SIS Login ID,Section,Causal attention (1234)
    Points Possible,,,,,30.00
"Lovelace, Ada",101,A001,ada,Mon,
"Babbage, Ben",102,A002,ben,Tue,12.00
"Student, Test",999,,,Mon,
"""


def test_moodles_own_worksheet_is_a_roster_and_the_worksheet_written_back_has_what_its_upload_reads(tmp_path):
    """Issue 46 (part 3): Moodle's "Upload grading worksheet" refuses a file without Identifier,
    Grade and Last modified (grade) (importgradeslib.php). Read as the roster, Moodle's own
    worksheet names each student as a Moodle download without a roster does (name words), two
    of one name apart; written back, each row keeps Moodle's own date, so Moodle's check that
    no grade changed in Moodle meanwhile works as in its own round trip."""
    path = tmp_path / "worksheet.csv"
    path.write_text("\ufeff" + MOODLE_WORKSHEET)
    roster = lms.read_roster(path)
    assert sorted(roster) == ["ada-lovelace", "ben-babbage", "jo-smith-5132", "jo-smith-5133"]
    assert roster["ben-babbage"]["moodle_participant"] == "5131" and roster["ada-lovelace"]["email"] == "ada@uni.example"
    results = [make_result("ada-lovelace", [("ex1", 26.0, 30.0)], lms={"moodle_participant": "5130"}),
               make_result("ben-babbage", [("ex1", 17.8, 30.0)])]
    export = lms.MOODLE.export(graded(results, roster=roster, out_of=30.0), roster, key="participant")
    table = rows(export.text)
    assert table[0][:4] == ["Identifier", "Full name", "Email address", "Grade"]
    assert {"Identifier", "Grade", "Last modified (grade)"} <= set(table[0])  # what Moodle's importer needs
    by_id = {row[0]: dict(zip(table[0], row)) for row in table[1:]}
    assert by_id["Participant 5131"]["Grade"] == "17.8"
    assert by_id["Participant 5131"]["Last modified (grade)"] == "Saturday, 21 November 2026, 9:15 AM"
    assert by_id["Participant 5130"]["Last modified (grade)"].endswith(" UTC")  # never graded in Moodle ("-")
    assert by_id["Participant 5132"]["Grade"] == ""  # no result: left for a person
    assert export.without_result == ["jo-smith-5132", "jo-smith-5133"]


def test_canvas_gradebook_export_is_a_roster_as_it_comes(tmp_path):
    path = tmp_path / "gradebook.csv"
    path.write_text(CANVAS_GRADEBOOK)
    roster = lms.read_roster(path)
    assert sorted(roster) == ["babbageben-102", "lovelaceada-101", "studenttest-999"]  # no Points Possible row
    assert roster["lovelaceada-101"] == {"student_id": "lovelaceada-101", "name": "Lovelace, Ada", "canvas_id": "101",
                                         "sis_user_id": "A001", "sis_login_id": "ada", "section": "Mon"}
    table = rows(lms.CANVAS.export(graded([make_result("lovelaceada-101", [("ex1", 26.0, 30.0)])], roster=roster,
                                   out_of=30.0), roster).text)
    assert ["Lovelace, Ada", "101", "A001", "ada", "Mon", "26"] in table


def test_a_canvas_download_and_canvas_gradebook_name_a_student_alike():
    """The id a Canvas download's file name gives ("lovelaceada_101_...") is the gradebook's."""
    from autograder.runs.intake.identities import canvas_student_id
    from autograder.untrusted import canvas_gradebook_id

    assert canvas_student_id("lovelaceada", "101") == canvas_gradebook_id("Lovelace, Ada", "101")
