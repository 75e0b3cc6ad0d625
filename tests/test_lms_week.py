"""A course's week: a Canvas zip and a Moodle download in, the LMS's grade files out.

The same six students come from each LMS: ada (right), ben (mistakes), cy (handed in
twice: an untouched release, then right answers), dee (only a .py), eve (a file that is
not a notebook) and fay (one answer crashes). Graded with the real command line in the
real sandbox, each download gives five students under their roster ids, cy's second upload
graded, dee and eve named, exit 1; then the written answers are scored in nbgrader's
gradebook (as formgrader stores them: test_formgrader.py drives formgrader itself) and
the Canvas and Moodle files carry autograded + written points out of 30.
"""
import csv
import io
import zipfile

import nbformat
import pytest

from helpers import SCORES, cli, crashing_notebook, example, make_gradebook, make_notebook, new_course

ASSIGNMENT = "causal_attention"
SEED = 11
ROSTER = """student_id,name,canvas_id,sis_user_id,email,id_number
ada,"Lovelace, Ada",101,S101,ada@uni.example,N101
ben,"Babbage, Ben",102,S102,ben@uni.example,N102
cy,"Young, Cy",103,S103,cy@uni.example,N103
dee,"Dee, Dee",104,S104,dee@uni.example,N104
eve,"Adams, Eve",105,S105,eve@uni.example,N105
fay,"Fay, Morgan",106,S106,fay@uni.example,N106
"""
CANVAS = {"ada": "lovelaceada_101", "ben": "babbageben_102", "cy": "youngcy_103", "dee": "deedee_104",
          "eve": "adamseve_105", "fay": "faymorgan_106"}
MOODLE = {"ada": "Ada Lovelace_201", "ben": "Ben Babbage_202", "cy": "Cy Young_203", "dee": "Dee Dee_204",
          "eve": "Eve Adams_205", "fay": "Morgan Fay_206"}


def text(notebook):
    return nbformat.writes(notebook)


@pytest.fixture(scope="module")
def downloads(tmp_path_factory):
    """(Canvas's zip, Moodle's folder, the roster) of the same six students."""
    tmp = tmp_path_factory.mktemp("downloads")
    files = {"ada": text(example("ada")), "ben": text(example("ben")), "fay": text(crashing_notebook()),
             "eve": "{\"cells\": [ this is not JSON"}
    canvas = tmp / "submissions.zip"
    ben = io.BytesIO()  # ben hands his notebook in inside a zip of his own
    with zipfile.ZipFile(ben, "w") as own:
        own.writestr(f"my work/{ASSIGNMENT}.ipynb", files["ben"])
    with zipfile.ZipFile(canvas, "w") as archive:
        for number, (student, body) in enumerate(files.items(), start=1):
            if student == "ben":
                archive.writestr(f"{CANVAS[student]}_{7000 + number}_my_work.zip", ben.getvalue())
                continue
            archive.writestr(f"{CANVAS[student]}_{7000 + number}_{ASSIGNMENT}.ipynb", body)
        archive.writestr(f"{CANVAS['cy']}_7100_{ASSIGNMENT}.ipynb", text(make_notebook(untouched=True)))
        archive.writestr(f"{CANVAS['cy']}_7200_{ASSIGNMENT}-1.ipynb", text(example("ada")))  # resubmitted, right
        archive.writestr(f"{CANVAS['dee']}_7300_{ASSIGNMENT}.py", "def causal_mask(n): ...\n")
    moodle = tmp / "moodle"
    for student, body in files.items():
        folder = moodle / f"{MOODLE[student]}_assignsubmission_file_"
        folder.mkdir(parents=True)
        (folder / f"{ASSIGNMENT}.ipynb").write_text(body)
    cy = moodle / f"{MOODLE['cy']}_assignsubmission_file_"
    cy.mkdir()
    (cy / f"{ASSIGNMENT}.ipynb").write_text(text(make_notebook(untouched=True)))
    (cy / f"{ASSIGNMENT} (1).ipynb").write_text(text(example("ada")))
    dee = moodle / f"{MOODLE['dee']}_assignsubmission_file_"
    dee.mkdir()
    (dee / f"{ASSIGNMENT}.py").write_text("def causal_mask(n): ...\n")
    roster = tmp / "roster.csv"
    roster.write_text(ROSTER)
    return canvas, moodle, roster


def graded(tmp_path, download, roster):
    course = make_gradebook(new_course(tmp_path))
    done = cli("grade", ASSIGNMENT, download, "--roster", roster, "--course", course, "--seed", SEED, "--jobs", "2",
               timeout=600)
    with open(course / "graded" / ASSIGNMENT / "grades.csv", newline="") as handle:
        grades = {row["student_id"]: row for row in csv.DictReader(handle)}
    return course, done, grades


def score_written_answers(course, points):
    """The written answers' points, stored as formgrader stores them (Grade.manual_score)."""
    from nbgrader.api import Gradebook

    from autograder.outputs.gradebook_db import gradebook_url

    with Gradebook(gradebook_url(course)) as gradebook:
        for student, value in points.items():
            notebook = gradebook.find_submission_notebook(ASSIGNMENT, ASSIGNMENT, student)
            for grade in notebook.grades:
                if grade.name.startswith("q"):
                    grade.manual_score = value
                    grade.needs_manual_grade = False
        gradebook.db.commit()


def said(done):
    return " ".join((done.stdout + done.stderr).split())


def check_week(course, done, grades):
    out = said(done)
    assert done.returncode == 1, out[-3000:]
    assert "Traceback" not in out
    assert sorted(grades) == ["ada", "ben", "cy", "eve", "fay"]  # roster ids, one row each
    assert float(grades["cy"]["total"]) == float(grades["ada"]["total"]) == 26  # the resubmission counts
    assert "you uploaded this notebook more than once" in grades["cy"]["notes"]
    if "zip" in grades["ben"]["notes"]:  # Canvas: ben's notebook came in a zip of his own
        assert f"graded from inside the zip you handed in (my_work.zip: my work/{ASSIGNMENT}.ipynb)" in grades["ben"]["notes"]
        assert "graded (unpacked from their zip)" in (course / "graded" / ASSIGNMENT / "intake.csv").read_text()
    assert grades["eve"]["status"] == "invalid"
    assert "dee: handed in no notebook, only causal_attention.py (a Python file)" in out
    assert "eve: could not be graded (the file is not valid JSON" in out
    intake = (course / "graded" / ASSIGNMENT / "intake.csv").read_text()
    assert "replaced by a newer upload" in intake and "not graded: not a notebook" in intake
    report = (course / "graded" / ASSIGNMENT / "report.html").read_text()
    assert "Files not graded" in report and f"{ASSIGNMENT}.py" in report


def week(tmp_path, download, roster, form, written):
    """Grade `download`, score the written answers `written` ({student: points per question}),
    export `form`; returns (the LMS file's rows, {student: autograded total}, {student: notes})."""
    course, done, grades = graded(tmp_path, download, roster)
    check_week(course, done, grades)
    score_written_answers(course, written)
    exported = cli("export", form, ASSIGNMENT, "--roster", roster, "--course", course)
    assert exported.returncode == 0, said(exported)
    text = (course / "graded" / ASSIGNMENT / f"{form}-{ASSIGNMENT}.csv").read_text()
    return (list(csv.reader(io.StringIO(text))), {s: float(grades[s]["total"]) for s in grades},
            {s: grades[s]["notes"] for s in grades})


@pytest.mark.slow
@pytest.mark.usefixtures("sandbox_required")
def test_a_canvas_zip_grades_the_class_under_roster_ids_and_canvas_imports_it(downloads, tmp_path):
    canvas, _, roster = downloads
    table, autograded, notes = week(tmp_path, canvas, roster, "canvas", {"ada": 1.0, "ben": 0.5, "cy": 1.0, "fay": 0.0})
    assert autograded["ben"] == SCORES["ben"] and "zip" in notes["ben"]  # graded from inside his zip
    assert table[0] == ["Student", "ID", "SIS User ID", "SIS Login ID", "Section", "Causal attention"]
    assert table[1] == ["Points Possible", "", "", "", "", "30"]
    assert {row[1]: row[5] for row in table[2:]} == {
        "101": f"{autograded['ada'] + 4:g}", "102": f"{autograded['ben'] + 2:g}", "103": "30", "104": "", "105": "0",
        "106": f"{autograded['fay']:g}"}


@pytest.mark.slow
@pytest.mark.usefixtures("sandbox_required")
def test_a_moodle_download_grades_the_class_under_roster_ids_and_moodle_imports_it(downloads, tmp_path):
    _, moodle, roster = downloads
    table, autograded, _ = week(tmp_path, moodle, roster, "moodle", {"ada": 1.0, "ben": 1.0, "cy": 0.25, "fay": 1.0})
    assert table[0] == ["ID number", "Causal attention"]
    assert dict(table[1:]) == {"N101": f"{autograded['ada'] + 4:g}", "N102": f"{autograded['ben'] + 4:g}",
                               "N103": "27", "N104": "", "N105": "0", "N106": f"{autograded['fay'] + 4:g}"}
