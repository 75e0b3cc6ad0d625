"""Intake: whose each file is, as Canvas, Moodle, nbgrader and a TA's pattern name them.

These tests read files only (no sandbox, nothing graded): which notebook of each student is
graded, what became of every other file, and that nothing is dropped without a line.
"""
import json
import os
import stat
import zipfile

import pytest

from autograder.course import CourseError
from autograder.runs.intake import discover
from autograder.runs.intake.archives import MAX_MEMBER_BYTES, ArchiveError, unpack
from autograder.runs.intake.identities import name_key
from autograder.runs.intake.layouts import split_resubmission
from helpers import cli

ASSIGNMENT = "causal_attention"
NOTEBOOK = json.dumps({"nbformat": 4, "nbformat_minor": 5, "metadata": {}, "cells": []})
ROSTER = {"jane": {"student_id": "jane", "name": "Doe, Jane", "canvas_id": "12345"},
          "bob": {"student_id": "bob", "name": "Bob Ray", "canvas_id": "222"},
          "zoe": {"student_id": "zoe", "name": "Zoë Ångström", "canvas_id": "333"}}


def files(folder, names, text=NOTEBOOK):
    for name in names:
        path = folder / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text if name.endswith(".ipynb") else "print('hello')\n")
    return folder


def chosen(intake):
    return {s.student_id: s.path.name for s in intake.submissions}


def problems_about(intake, text):
    return [(who, why) for who, why in intake.problems if text in who or text in why]


# -- Canvas ---------------------------------------------------------------------------------------
def test_canvas_ids_come_from_the_roster_and_a_resubmission_replaces_the_first(tmp_path):
    folder = files(tmp_path / "canvas", ["doejane_12345_6789012_causal_attention.ipynb",
                                         "doejane_12345_6789099_causal_attention-1.ipynb",
                                         "raybob_late_222_7000001_causal_attention.ipynb",
                                         "angstromzoe_LATE_333_7000002_Untitled.ipynb"])
    intake = discover([folder], ASSIGNMENT, roster=ROSTER)
    assert chosen(intake) == {"jane": "doejane_12345_6789099_causal_attention-1.ipynb",
                              "bob": "raybob_late_222_7000001_causal_attention.ipynb",
                              "zoe": "angstromzoe_LATE_333_7000002_Untitled.ipynb"}
    jane = next(s for s in intake.submissions if s.student_id == "jane")
    assert jane.replaced == ["doejane_12345_6789012_causal_attention.ipynb"] and jane.ignored == []
    assert jane.lms == {"canvas_id": "12345", "lms_name": "doejane"} and jane.layout == "canvas"
    assert next(s for s in intake.submissions if s.student_id == "bob").lms["canvas_late"] == "yes"
    assert intake.problems == []
    outcomes = {row.file: row.outcome for row in intake.rows}
    assert outcomes["doejane_12345_6789012_causal_attention.ipynb"].startswith("replaced by a newer upload")


def test_the_newest_canvas_upload_counts_even_when_its_number_is_smaller(tmp_path):
    """Canvas's attachment ids grow with time; the -N a file name gets depends on the student's files."""
    folder = files(tmp_path, ["doejane_12345_900_causal_attention.ipynb",
                              "doejane_12345_100_causal_attention-2.ipynb"])
    assert chosen(discover([folder], ASSIGNMENT)) == {"doejane-12345": "doejane_12345_900_causal_attention.ipynb"}


def test_without_a_roster_canvas_students_keep_an_id_that_does_not_change_between_assignments(tmp_path):
    one = files(tmp_path / "a", ["doejane_12345_6789012_causal_attention.ipynb"])
    two = files(tmp_path / "b", ["doejane_12345_7777777_self_attention.ipynb"])
    assert set(chosen(discover([one], ASSIGNMENT))) == set(chosen(discover([two], "self_attention"))) == {"doejane-12345"}


def test_a_canvas_user_missing_from_the_roster_is_graded_and_named(tmp_path):
    folder = files(tmp_path, ["newkid_999_1_causal_attention.ipynb"])
    intake = discover([folder], ASSIGNMENT, roster=ROSTER)
    assert chosen(intake) == {"newkid-999": "newkid_999_1_causal_attention.ipynb"}
    assert problems_about(intake, "Canvas user 999 (newkid) is not on the roster")


# -- Moodle ---------------------------------------------------------------------------------------
def test_moodle_folders_and_flat_files_map_by_name_through_the_roster(tmp_path):
    folder = files(tmp_path / "moodle", ["Jane Doe_101_assignsubmission_file_/causal_attention.ipynb",
                                         "Bob Ray_102_assignsubmission_file_/my work.ipynb",
                                         "Zoe Angstrom_103_assignsubmission_file_causal_attention.ipynb"])
    intake = discover([folder], ASSIGNMENT, roster=ROSTER)
    assert chosen(intake) == {"jane": "causal_attention.ipynb", "bob": "my work.ipynb",
                              "zoe": "Zoe Angstrom_103_assignsubmission_file_causal_attention.ipynb"}
    assert {s.student_id: s.lms["moodle_participant"] for s in intake.submissions} == {
        "jane": "101", "bob": "102", "zoe": "103"}
    assert intake.problems == []


def test_a_folder_named_after_the_assignment_inside_a_moodle_folder_is_that_students(tmp_path):
    """Moodle's layout is read before nbgrader's tree: <student folder>/causal_attention/<file> has
    the shape of nbgrader's submitted/<student>/<assignment>/<file>, but is Jane's, not a second
    student's named after her Moodle folder."""
    folder = files(tmp_path, ["Jane Doe_101_assignsubmission_file_/causal_attention/causal_attention.ipynb",
                              "Bob Ray_102_assignsubmission_file_/causal_attention.ipynb"])
    intake = discover([folder], ASSIGNMENT, roster=ROSTER)
    assert chosen(intake) == {"jane": "causal_attention.ipynb", "bob": "causal_attention.ipynb"}
    assert next(s for s in intake.submissions if s.student_id == "jane").layout == "moodle"
    assert intake.problems == []
    tree = files(tmp_path / "submitted", ["ada/causal_attention/causal_attention.ipynb"])  # nbgrader's own stays
    assert chosen(discover([tree], ASSIGNMENT)) == {"ada": "causal_attention.ipynb"}


def test_moodle_without_a_roster_uses_the_name_and_keeps_namesakes_apart(tmp_path):
    folder = files(tmp_path, ["Jane Doe_101_assignsubmission_file_/a.ipynb",
                              "Jane Doe_205_assignsubmission_file_/b.ipynb",
                              "Bob Ray_102_assignsubmission_file_/c.ipynb"])
    intake = discover([folder], ASSIGNMENT)
    assert chosen(intake) == {"jane-doe-101": "a.ipynb", "jane-doe-205": "b.ipynb", "bob-ray": "c.ipynb"}
    assert problems_about(intake, "2 students of the LMS map to the id jane-doe")


def test_a_moodle_student_with_only_a_python_file_and_one_with_online_text_are_named(tmp_path):
    folder = files(tmp_path, ["Jane Doe_101_assignsubmission_file_/causal_attention.py",
                              "Bob Ray_102_assignsubmission_onlinetext_onlinetext.html",
                              "Bob Ray_102_assignsubmission_file_/causal_attention.ipynb"])
    intake = discover([folder], ASSIGNMENT, roster=ROSTER)
    assert chosen(intake) == {"bob": "causal_attention.ipynb"}
    assert problems_about(intake, "handed in no notebook, only causal_attention.py (a Python file)")
    outcomes = {row.file: row.outcome for row in intake.rows}
    assert outcomes["Bob Ray_102_assignsubmission_onlinetext_onlinetext.html"] == \
        "not graded: not a notebook (a web page)"


# -- nbgrader, patterns, plain folders ------------------------------------------------------------
def test_nbgrader_submitted_tree_and_one_student_folder(tmp_path):
    submitted = files(tmp_path / "submitted", [f"ada/{ASSIGNMENT}/{ASSIGNMENT}.ipynb",
                                               f"ben/{ASSIGNMENT}/{ASSIGNMENT}.ipynb",
                                               f"ben/{ASSIGNMENT}/scratch.ipynb",
                                               f"ben/{ASSIGNMENT}/data.txt"])
    intake = discover([submitted], ASSIGNMENT)
    assert chosen(intake) == {"ada": f"{ASSIGNMENT}.ipynb", "ben": f"{ASSIGNMENT}.ipynb"}
    ben = next(s for s in intake.submissions if s.student_id == "ben")
    assert [os.path.basename(p) for p in ben.ignored] == ["scratch.ipynb"]
    assert chosen(discover([submitted / "ada"], ASSIGNMENT)) == {"ada": f"{ASSIGNMENT}.ipynb"}
    assert chosen(discover([submitted / "ada" / ASSIGNMENT / f"{ASSIGNMENT}.ipynb"], ASSIGNMENT)) == {
        "ada": f"{ASSIGNMENT}.ipynb"}


def test_a_pattern_reads_names_as_nbgraders_filenamecollector_does(tmp_path):
    folder = files(tmp_path / "extracted", ["ps1_bitdiddle_attempt_2026-11-20-15-00-00_problem1.ipynb",
                                            "ps1_hacker_attempt_2026-11-21-09-30-00_problem1.ipynb",
                                            "readme.ipynb"])
    pattern = r".*_(?P<student_id>\w+)_attempt_(?P<timestamp>[0-9\-]+)_(?P<file_id>\w+)"
    intake = discover([folder], ASSIGNMENT, pattern=pattern)
    assert set(chosen(intake)) == {"bitdiddle", "hacker", "readme"}
    stamps = {s.student_id: s.submitted_at for s in intake.submissions}
    assert stamps["bitdiddle"] == "2026-11-20-15-00-00"
    with pytest.raises(CourseError, match="needs a \\(\\?P<student_id>...\\) group"):
        discover([folder], ASSIGNMENT, pattern=r"(?P<who>\w+)")
    with pytest.raises(CourseError, match="is not a regular expression"):
        discover([folder], ASSIGNMENT, pattern=r"(?P<student_id>")


def test_nbgraders_downloaded_folder_with_its_archive_is_unpacked(tmp_path):
    downloaded = tmp_path / "downloaded" / ASSIGNMENT
    (downloaded / "archive").mkdir(parents=True)
    with zipfile.ZipFile(downloaded / "archive" / "class.zip", "w") as archive:
        archive.writestr("doejane_12345_1_causal_attention.ipynb", NOTEBOOK)
    intake = discover([downloaded], ASSIGNMENT, roster=ROSTER, unpack_to=tmp_path / "unpacked")
    assert chosen(intake) == {"jane": "doejane_12345_1_causal_attention.ipynb"}


def test_stray_files_in_a_folder_of_notebooks_are_named_never_skipped(tmp_path):
    folder = files(tmp_path, ["ada.ipynb", "ben.py", "notes/readme.ipynb"])
    (tmp_path / "cy.zip").write_bytes(b"PK\x05\x06" + b"\0" * 18)  # an empty zip, inside the folder
    intake = discover([folder], ASSIGNMENT)
    assert chosen(intake) == {"ada": "ada.ipynb"}
    said = dict(intake.problems)
    assert said["ben.py"] == "not a notebook (a Python file) and not anyone's by its name: not graded"
    assert said["cy.zip"].startswith("not a notebook (a zip file)")
    assert said["notes/readme.ipynb"].startswith("cannot tell whose notebook this is")


def test_an_empty_folder_is_a_problem_not_a_silent_success(tmp_path):
    (tmp_path / "empty").mkdir()
    intake = discover([tmp_path / "empty"], ASSIGNMENT)
    assert intake.submissions == [] and intake.problems[0][1].startswith("no submissions were found")


def test_a_path_that_does_not_exist_stops_before_anything(tmp_path):
    with pytest.raises(CourseError, match="does not exist"):
        discover([tmp_path / "nope"], ASSIGNMENT)


def test_links_in_a_submissions_folder_are_not_followed(tmp_path):
    secret = tmp_path / "secret.ipynb"
    secret.write_text(NOTEBOOK)
    folder = files(tmp_path / "inbox", ["ada.ipynb"])
    (folder / "eve.ipynb").symlink_to(secret)
    (folder / "elsewhere").symlink_to(tmp_path, target_is_directory=True)  # a folder of other notebooks
    intake = discover([folder], ASSIGNMENT)
    assert chosen(intake) == {"ada": "ada.ipynb"} and dict(intake.problems)["eve.ipynb"].startswith("a link")
    assert dict(intake.problems)["elsewhere"] == "a link to a folder, not a folder: not read"


# -- zips -----------------------------------------------------------------------------------------
def test_a_canvas_zip_is_unpacked_once_into_the_same_folder(tmp_path):
    archive = tmp_path / "submissions.zip"
    with zipfile.ZipFile(archive, "w") as z:
        z.writestr("doejane_12345_1_causal_attention.ipynb", NOTEBOOK)
        z.writestr("__MACOSX/._doejane_12345_1_causal_attention.ipynb", "resource fork")
    first = discover([archive], ASSIGNMENT, roster=ROSTER, unpack_to=tmp_path / "unpacked")
    again = discover([archive], ASSIGNMENT, roster=ROSTER, unpack_to=tmp_path / "unpacked")
    assert [s.path for s in first.submissions] == [s.path for s in again.submissions]
    assert first.problems == [] and len(list((tmp_path / "unpacked").iterdir())) == 1
    assert first.rows[0].file == "submissions.zip/doejane_12345_1_causal_attention.ipynb"


def test_a_hostile_zip_writes_nothing_outside_its_folder(tmp_path):
    archive = tmp_path / "evil.zip"
    with zipfile.ZipFile(archive, "w") as z:
        z.writestr("../../escaped.ipynb", NOTEBOOK)
        z.writestr("/abs.ipynb", NOTEBOOK)
        link = zipfile.ZipInfo("link.ipynb")
        link.external_attr = (stat.S_IFLNK | 0o777) << 16
        z.writestr(link, "/etc/passwd")
        z.writestr("ada.ipynb", NOTEBOOK)
    folder, skipped = unpack(archive, tmp_path / "unpacked")
    assert sorted(p.name for p in folder.iterdir()) == [".unpacked.json", "ada.ipynb"]
    assert not (tmp_path / "escaped.ipynb").exists() and not (tmp_path.parent / "escaped.ipynb").exists()
    assert sorted(why for _, why in skipped) == ["it is a link, not a file",
                                                 "its name points outside the folder it is unpacked in",
                                                 "its name points outside the folder it is unpacked in"]
    intake = discover([archive], ASSIGNMENT, unpack_to=tmp_path / "unpacked")
    assert chosen(intake) == {"ada": "ada.ipynb"} and len(intake.problems) == 3


def test_a_zip_bomb_stops_at_the_bytes_really_written(tmp_path):
    archive = tmp_path / "bomb.zip"
    with zipfile.ZipFile(archive, "w", compression=zipfile.ZIP_DEFLATED) as z:
        with z.open("big.ipynb", "w", force_zip64=True) as member:
            chunk = b"\0" * (1 << 20)
            for _ in range(MAX_MEMBER_BYTES // len(chunk) + 1):
                member.write(chunk)
        z.writestr("ada.ipynb", NOTEBOOK)
    assert archive.stat().st_size < 2 * 2**20
    folder, skipped = unpack(archive, tmp_path / "unpacked")
    assert skipped == [("big.ipynb", "it unpacks to more than 512 MB")]
    assert not (folder / "big.ipynb").exists() and (folder / "ada.ipynb").exists()


def test_a_file_called_zip_that_is_not_one_is_named(tmp_path):
    (tmp_path / "submissions.zip").write_text("not a zip")
    with pytest.raises(ArchiveError, match="not a zip file"):
        unpack(tmp_path / "submissions.zip", tmp_path / "unpacked")
    intake = discover([tmp_path / "submissions.zip"], ASSIGNMENT, unpack_to=tmp_path / "unpacked")
    assert intake.submissions == [] and "this zip was not unpacked" in intake.problems[0][1]


# -- the pieces -----------------------------------------------------------------------------------
@pytest.mark.parametrize("name, expected", [
    ("causal_attention.ipynb", ("causal_attention.ipynb", 0)),
    ("causal_attention-1.ipynb", ("causal_attention.ipynb", 1)),
    ("causal_attention (2).ipynb", ("causal_attention.ipynb", 2)),
    ("hw-2026.ipynb", ("hw-2026.ipynb", 0)),  # a year, not a resubmission number
])
def test_resubmission_numbers(name, expected):
    assert split_resubmission(name) == expected


def test_names_match_in_any_order_case_and_accents_aside():
    assert name_key("Doe, Jane") == name_key("jane  DOE") != name_key("Jane Dough")
    assert name_key("Zoë Ångström") == name_key("ZOE angstrom")


# -- the command line -----------------------------------------------------------------------------
def test_dry_run_shows_the_mapping_writes_nothing_and_says_what_needs_a_look(tmp_path):
    archive = tmp_path / "submissions.zip"
    with zipfile.ZipFile(archive, "w") as z:
        z.writestr("doejane_12345_1_causal_attention.ipynb", NOTEBOOK)
        z.writestr("doejane_12345_2_causal_attention-1.ipynb", NOTEBOOK)
        z.writestr("raybob_222_3_causal_attention.py", "x = 1")
    roster = tmp_path / "roster.csv"
    roster.write_text("student_id,name,canvas_id\njane,\"Doe, Jane\",12345\nbob,Bob Ray,222\n")
    course = tmp_path / "course"
    cli("init", course, cwd=tmp_path)
    cli("new", "toy", "--course", course)
    done = cli("grade", "toy", archive, "--roster", roster, "--dry-run", "--course", course,
               env={**os.environ, "TMPDIR": str(tmp_path)})
    out = " ".join(done.stdout.split())
    assert done.returncode == 1, done.stdout + done.stderr
    assert "Would grade 1 (jane), grade again 0, keep 0 already graded, and leave out 0 removed" in out
    assert "replaced by a newer upload" in out
    assert "bob: handed in no notebook, only causal_attention.py (a Python file)" in out
    assert "a dry run: nothing was graded" in out and "Traceback" not in done.stdout + done.stderr
    assert not (course / "graded").exists() and not (course / "downloaded").exists()
    assert not list(tmp_path.glob("autograder-*"))  # (TMPDIR is tmp_path: see below)


def test_folders_nested_deeper_than_any_layout_are_named_not_skipped(tmp_path):
    deep = tmp_path / "inbox" / "a" / "b" / "c" / "d" / "e" / "f" / "g"
    deep.mkdir(parents=True)
    (deep / "lost.ipynb").write_text(NOTEBOOK)
    intake = discover([tmp_path / "inbox"], ASSIGNMENT)
    assert intake.submissions == []
    assert [who for who, why in intake.problems if "more than 6 levels down" in why] == ["a/b/c/d/e/f"]


# -- a student's own zip (issue 47) ------------------------------------------------------------------
def zipped(path, members):
    path.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(path, "w") as archive:
        for name, data in members.items():
            archive.writestr(name, data)
    return path


def test_a_students_zip_holding_their_notebook_is_unpacked_and_graded(tmp_path):
    folder = tmp_path / "canvas"
    zipped(folder / "doejane_12345_6789012_my_work.zip", {"work/causal_attention.ipynb": NOTEBOOK,
                                                          "work/notes.txt": "my notes", "__MACOSX/._x": "mac"})
    zipped(folder / "raybob_222_7000001_both.zip", {"draft.ipynb": NOTEBOOK, "causal_attention.ipynb": NOTEBOOK})
    intake = discover([folder], ASSIGNMENT, roster=ROSTER, unpack_to=tmp_path / "unpacked")
    assert chosen(intake) == {"jane": "causal_attention.ipynb", "bob": "causal_attention.ipynb"}
    jane = next(s for s in intake.submissions if s.student_id == "jane")
    assert jane.from_zip == "my_work.zip: work/causal_attention.ipynb" and jane.lms["canvas_id"] == "12345"
    bob = next(s for s in intake.submissions if s.student_id == "bob")
    assert [os.path.basename(path) for path in bob.ignored] == ["draft.ipynb"]  # several notebooks: the rule as ever
    outcomes = {row.file: row.outcome for row in intake.rows}
    assert outcomes["doejane_12345_6789012_my_work.zip: work/causal_attention.ipynb"] == "graded (unpacked from their zip)"
    assert outcomes["doejane_12345_6789012_my_work.zip: work/notes.txt"] == "not graded: a text file"
    assert intake.problems == []


def test_a_students_zip_is_unpacked_with_an_lms_zips_bounds(tmp_path, monkeypatch):
    from autograder.runs.intake import archives

    monkeypatch.setattr(archives, "MAX_MEMBER_BYTES", 1000)
    folder = tmp_path / "moodle"
    zipped(folder / "Jane Doe_101_assignsubmission_file_" / "work.zip",
           {"../escape.ipynb": NOTEBOOK, "big.ipynb": "x" * 5000, "causal_attention.ipynb": NOTEBOOK})
    zipped(folder / "Bob Ray_102_assignsubmission_file_" / "broken.zip", {"a.txt": "x"})
    (folder / "Bob Ray_102_assignsubmission_file_" / "broken.zip").write_bytes(b"not a zip at all")
    intake = discover([folder], ASSIGNMENT, roster=ROSTER, unpack_to=tmp_path / "unpacked")
    assert chosen(intake) == {"jane": "causal_attention.ipynb"}
    said = " | ".join(f"{who}: {why}" for who, why in intake.problems)
    assert "../escape.ipynb: not unpacked: its name points outside" in said
    assert "big.ipynb: not unpacked: it unpacks to more than" in said
    assert "broken.zip: this zip was not unpacked" in said and "bob" in said  # and he has no notebook: said too


def test_a_notebook_beside_a_zip_is_graded_and_the_zip_is_not_opened(tmp_path):
    folder = tmp_path / "canvas"
    files(folder, ["doejane_12345_6789012_causal_attention.ipynb"])
    zipped(folder / "doejane_12345_6789013_old.zip", {"old.ipynb": NOTEBOOK})
    intake = discover([folder], ASSIGNMENT, roster=ROSTER, unpack_to=tmp_path / "unpacked")
    assert chosen(intake) == {"jane": "doejane_12345_6789012_causal_attention.ipynb"}
    assert not (tmp_path / "unpacked").exists()
