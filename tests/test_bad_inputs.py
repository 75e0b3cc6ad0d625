"""One file stops no class: every per-student input is bounded and contained.

A class whose submissions hold a `timestamp.txt` in words, in bytes that are not
UTF-8, in year 1 and of 300 MB, a 245-byte file name, a folder named `.batch`,
a folder name with a terminal escape, an id that is a spreadsheet formula and a
cell whose grade id is rich markup is graded with the real command line, in the
real sandbox: everyone is graded, every output is written, each bad input is
named, and the command exits non-zero (the TA has something to do).
"""
import csv
import os
import json
import time

import nbformat
import pytest
from nbgrader.api import Gradebook

from autograder.outputs.gradebook_db import gradebook_url
from helpers import cli, example, make_gradebook, new_course

needs_bwrap = pytest.mark.usefixtures("sandbox_required")

ASSIGNMENT = "causal_attention"
SEED = 4321
LONG_NAME = "smith john " + "attention homework final version " * 7  # a long name, one student's notebook
LONG_NAME = LONG_NAME[:245 - len(".ipynb")] + ".ipynb"
OSC_52 = "osc\x1b]52;c;cGF3bmVk\x07"  # writes "pawned" to the TA's clipboard, in a terminal that obeys
STAMPS = {  # student -> timestamp.txt's bytes (the 300 MB one is made sparse below)
    "words": b"yesterday, honest",
    "bytes": b"\xff\xfe2026-11-20\x80",
    "year1": b"0001-01-01 00:00:00+01:00",  # before Python's first day once in UTC
    "huge": None,
    "ontime": b"2026-11-20 10:00:00.000000 UTC",
}


def grade(course, *paths):
    return cli("grade", ASSIGNMENT, *paths, "--course", course, "--jobs", "2", "--seed", SEED,
               errors="backslashreplace", timeout=400)


@pytest.fixture(scope="module")
def bad_class(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("bad_inputs")
    course = make_gradebook(new_course(tmp))  # (the inputs are the point, not making the gradebook)
    settings = course / "exercises" / ASSIGNMENT / "assignment.toml"
    settings.write_text(settings.read_text() + "\n[late]\ndue = 2026-11-20T23:59:00Z\npercent_per_day = 10\n")
    right = example("ada")
    markup = example("ada")
    markup.cells.append(nbformat.v4.new_code_cell("y = 1", metadata={"nbgrader": {
        "grade_id": "[/yellow]", "solution": False, "grade": False, "locked": False}}))
    submitted = course / "submitted"
    students = {**{name: right for name in STAMPS}, ".batch": right, OSC_52: right, "=HYPERLINK(1)": right,
                "markup": markup}
    for student, notebook in students.items():
        folder = submitted / student / ASSIGNMENT
        folder.mkdir(parents=True)
        nbformat.write(notebook, folder / f"{ASSIGNMENT}.ipynb")
        if STAMPS.get(student):
            (folder / "timestamp.txt").write_bytes(STAMPS[student])
    with open(submitted / "huge" / ASSIGNMENT / "timestamp.txt", "wb") as handle:
        handle.write(b"2026-11-20 10:00:00.000000 UTC ")
        handle.truncate(300 * 2**20)  # sparse: 300 MB long, a few bytes on disk
    inbox = tmp / "inbox"  # a folder of <student id>.ipynb
    inbox.mkdir()
    assert len(LONG_NAME.encode()) == 245
    nbformat.write(right, inbox / LONG_NAME)
    first = grade(course, submitted, inbox)
    rerun = grade(course, submitted, inbox)
    return {"course": course, "out": course / "graded" / ASSIGNMENT, "first": first, "rerun": rerun}


def printed(done):
    return " ".join((done.stdout + done.stderr).split())  # rich wraps long lines


def rows(out):
    with open(out / "grades.csv", newline="", encoding="utf-8") as handle:
        return {row["student_id"]: row for row in csv.DictReader(handle)}


@needs_bwrap
def test_everyone_is_graded_every_output_written_and_the_exit_is_non_zero(bad_class):
    first, out = bad_class["first"], bad_class["out"]
    assert first.returncode == 1, printed(first)[-3000:]
    assert "Traceback" not in first.stdout + first.stderr
    assert "graded 10 (" in printed(first) and "failed 0," in printed(first)
    found = rows(out)
    assert len(found) == 10, sorted(found)
    for student, row in found.items():
        assert row["status"] == "graded" and float(row["total"]) == 26, (student, row)
    assert (out / "report.html").stat().st_size > 0
    with Gradebook(gradebook_url(bad_class["course"])) as gradebook:
        in_gradebook = {s.student.id: s.score for s in gradebook.assignment_submissions(ASSIGNMENT)}
    assert len(in_gradebook) == 10 and all(score == 26 for score in in_gradebook.values()), in_gradebook


@needs_bwrap
def test_each_bad_input_is_named(bad_class):
    said = printed(bad_class["first"])
    for student, reason in [("words", "'yesterday, honest' is not a date and time"),
                            ("bytes", "not UTF-8 text"),
                            ("year1", "outside the years"),
                            ("huge", "longer than 256 bytes")]:
        assert f"{student}: submission time unreadable (timestamp.txt" in said and reason in said, student
    assert "'.batch' starts with a dot" in said
    # the 245-byte file name: cut short on the terminal, with its length
    assert f"is {len(LONG_NAME.encode()) - len('.ipynb')} bytes long" in said
    assert "holds control characters" in said
    assert "a cell claims grade id '[/yellow]'" in said  # as it reads, not as markup
    assert "problems need your attention" in said


@needs_bwrap
def test_unreadable_times_are_recorded_and_readable_ones_still_count(bad_class):
    found = rows(bad_class["out"])
    for student in ("words", "bytes", "year1", "huge"):
        assert "submission time could not be read" in found[student]["notes"], found[student]
        assert found[student]["submitted_at"] == "" and float(found[student]["late_penalty"]) == 0
    assert found["ontime"]["submitted_at"].startswith("2026-11-20T10:00")  # on time: no penalty, time kept


@needs_bwrap
def test_bad_names_are_renamed_safely_and_the_batch_keeps_its_seed(bad_class):
    out = bad_class["out"]
    assert json.loads((out / ".batch.json").read_text())["seed"] == SEED
    found = rows(out)
    renamed = [s for s in found if s.startswith("_batch-") or s.startswith("osc_") or s.startswith("smith john ")]
    assert len(renamed) == 3, sorted(found)
    for student in renamed:
        assert len(student.encode()) <= 120 and "\x1b" not in student and "\x07" not in student
        assert (out / f"{student}.json").exists() and (out / "feedback" / f"{student}.html").exists()
        assert "so it is graded as " + student in found[student]["notes"]


@needs_bwrap
def test_no_student_text_reaches_the_terminal_or_a_spreadsheet_raw(bad_class):
    first = bad_class["first"]
    assert "\x1b" not in first.stdout + first.stderr and "\x07" not in first.stdout + first.stderr
    assert "osc\\x1b]52;c;cGF3bmVk\\x07" in printed(first)  # named, as escapes
    found = rows(bad_class["out"])
    assert "'=HYPERLINK(1)" in found and "=HYPERLINK(1)" not in found  # text, not a formula


@needs_bwrap
def test_a_rerun_grades_nothing_again_and_says_the_same(bad_class):
    rerun = bad_class["rerun"]
    assert rerun.returncode == 1 and "Traceback" not in rerun.stdout + rerun.stderr
    assert "graded 0, failed 0, skipped 10" in printed(rerun), printed(rerun)[-4000:]
    assert "year1: submission time unreadable" in printed(rerun) and "'.batch' starts with a dot" in printed(rerun)
    assert len(rows(bad_class["out"])) == 10


# -- the pieces, without a sandbox -------------------------------------------------------------
def test_names_that_cannot_be_ids_are_renamed_the_same_way_every_time(tmp_path):
    from autograder.runs.intake import discover

    for name in (".batch", "...", OSC_52, "x" * 200, "ada", "Zoë", "[red]loud", "=SUM(1)"):
        folder = tmp_path / "submitted" / name / ASSIGNMENT
        folder.mkdir(parents=True)
        (folder / f"{ASSIGNMENT}.ipynb").write_text("{}")
    found = {s.student_id: s for s in discover([tmp_path / "submitted"], ASSIGNMENT).submissions}
    again = {s.student_id for s in discover([tmp_path / "submitted"], ASSIGNMENT).submissions}
    assert set(found) == again and len(found) == 8
    kept = {"ada", "Zoë", "[red]loud", "=SUM(1)"}  # safe as file names; escaped where they are shown
    assert kept <= set(found) and not any(found[s].renamed for s in kept)
    for student in set(found) - kept:
        submission = found[student]
        assert not student.startswith(".") and student.isprintable() and len(student.encode()) <= 120
        assert submission.renamed.endswith(f"so it is graded as {student} (rename its file or folder to the"
                                           " student's id and grade it again)")


def test_a_file_name_near_the_limit_is_written_atomically(tmp_path):
    from autograder.course import write_atomically

    target = write_atomically(tmp_path / ("n" * 250 + ".json"), "{}")  # 255 bytes: the most there can be
    assert target.read_text() == "{}" and [p.name for p in tmp_path.iterdir()] == [target.name]


def test_a_notebook_of_150000_cells_is_refused_cheaply_and_clearly(tmp_path):
    import resource
    import time

    from autograder.grading.notebook import InvalidNotebook, read_notebook

    cells = [{"cell_type": "code", "id": f"c{i}", "metadata": {}, "source": "x = 1", "outputs": [],
              "execution_count": None} for i in range(150_000)]
    path = tmp_path / "many.ipynb"
    path.write_text(json.dumps({"nbformat": 4, "nbformat_minor": 5, "metadata": {}, "cells": cells}))
    del cells
    before, started = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, time.perf_counter()
    with pytest.raises(InvalidNotebook, match="150,000 cells, more than the 2,000 the grader reads: delete the"
                                              " cells you added"):
        read_notebook(path)
    assert time.perf_counter() - started < 5  # it took 8 s and 420 MB before, then 1.6 GiB to grade
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before < 300 * 1024  # KiB


def test_tampering_notes_are_bounded_in_number_and_length():
    from autograder.runs.recording import read_release, read_source
    from autograder.grading.notebook import MAX_TAMPERING_NOTES, sanitize
    from helpers import assignment_of

    notebook = example("ada")
    for index in range(500):
        notebook.cells.append(nbformat.v4.new_code_cell("pass", metadata={"nbgrader": {
            "grade_id": f"{index}{'[/red]' * 10_000}", "solution": False, "grade": False, "locked": False}}))
    assignment = assignment_of()
    tampering = sanitize(notebook, read_source(assignment), read_release(assignment)).tampering
    assert len(tampering) == MAX_TAMPERING_NOTES and tampering[-1] == "and 481 more changes like these"
    assert all(len(note) < 200 for note in tampering)


def test_a_named_pipe_called_ipynb_is_refused_at_once_not_waited_on(tmp_path):
    from autograder.grading.notebook import sha256

    pipe = tmp_path / "causal_attention.ipynb"
    os.mkfifo(pipe)
    started = time.monotonic()
    with pytest.raises(OSError, match="not a plain file"):
        sha256(pipe)
    assert time.monotonic() - started < 1


def test_the_note_for_many_notebooks_names_a_few_and_counts_the_rest(tmp_path):
    from autograder.grading.submission import ignored_note
    from autograder.grading.notebook import Submission

    submission = Submission("dup", tmp_path / "a.ipynb", ignored=[str(tmp_path / f"copy{i}\x1b.ipynb") for i in range(500)])
    note = ignored_note(submission)
    assert len(note) < 700 and "copy0\\x1b.ipynb" in note and "and 495 more" in note and "\x1b" not in note
