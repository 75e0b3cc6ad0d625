"""A gradebook that holds the class: trial runs and the demo stay out of it, and a stray
submission can be taken out of every output (issue 35, part 5)."""
import csv

import pytest
from nbgrader.api import Gradebook

from autograder.outputs.gradebook_db import gradebook_url
from helpers import cli, example, make_gradebook, new_course, write

ASSIGNMENT = "causal_attention"
needs_bwrap = pytest.mark.usefixtures("sandbox_required")
pytestmark = pytest.mark.slow  # the course it grades takes 10 s to make; the full lane (CI) runs it


def in_gradebook(db_url):
    with Gradebook(db_url) as gradebook:
        return sorted(s.student.id for s in gradebook.assignment_submissions(ASSIGNMENT))


def students_in(path):
    with open(path, newline="") as handle:
        return sorted(row["student_id"] for row in csv.DictReader(handle))


def said(done):
    return " ".join((done.stdout + done.stderr).split())


@pytest.fixture(scope="module")
def course(tmp_path_factory):
    """A class of ada and ben, and a TA's test folder, graded into the course."""
    tmp = tmp_path_factory.mktemp("scope")
    course = make_gradebook(new_course(tmp))
    inbox = tmp / "inbox"
    inbox.mkdir()
    for student in ("ada", "ben"):
        write(inbox, student, example(student))
    write(inbox, "test-ta", example("ada"))
    done = cli("grade", ASSIGNMENT, inbox, "--course", course, "--seed", 3)
    assert done.returncode == 0, said(done)
    return course, inbox


@needs_bwrap
def test_a_scratch_run_never_reaches_the_courses_gradebook(course, tmp_path):
    course, inbox = course
    before = in_gradebook(gradebook_url(course))
    write(inbox, "trial", example("cy"))
    scratch = tmp_path / "trial"
    done = cli("grade", ASSIGNMENT, inbox, "--course", course, "--scratch", scratch, "--seed", 3)
    (inbox / "trial.ipynb").unlink()
    assert done.returncode == 0, said(done)
    assert in_gradebook(gradebook_url(course)) == before  # formgrader and nbgrader export: only the class
    assert "trial" in in_gradebook(f"sqlite:///{scratch / 'gradebook.db'}")
    assert "trial" in students_in(scratch / "graded" / ASSIGNMENT / "grades.csv")
    assert (scratch / "autograded" / "trial" / ASSIGNMENT).is_dir()
    assert not (course / "autograded" / "trial").exists() and not (course / "graded" / ASSIGNMENT / "trial.json").exists()


@needs_bwrap
def test_a_stray_submission_is_removed_everywhere_and_stays_out(course):
    course, inbox = course
    out = course / "graded" / ASSIGNMENT
    assert "test-ta" in in_gradebook(gradebook_url(course))
    done = cli("remove", ASSIGNMENT, "test-ta", "--course", course)
    assert done.returncode == 0, said(done)
    assert "removed from nbgrader's gradebook, with the student" in said(done)
    assert in_gradebook(gradebook_url(course)) == ["ada", "ben"]
    with Gradebook(gradebook_url(course)) as gradebook:
        assert "test-ta" not in [s.id for s in gradebook.students]  # nor a row of zeros in nbgrader export
    assert students_in(out / "grades.csv") == ["ada", "ben"]
    assert not (out / "test-ta.json").exists() and not (out / "feedback" / "test-ta.html").exists()
    assert list((out / "history").glob("removed-*/test-ta.json"))  # kept, never deleted
    again = cli("grade", ASSIGNMENT, inbox, "--course", course)
    assert again.returncode == 0 and "graded 0," in said(again), said(again)
    assert "not graded: removed on" in (out / "intake.csv").read_text()
    assert students_in(out / "grades.csv") == ["ada", "ben"]
    back = cli("remove", ASSIGNMENT, "test-ta", "--undo", "--course", course)
    assert back.returncode == 0 and "will be graded again" in said(back)
    regraded = cli("grade", ASSIGNMENT, inbox, "--course", course)
    assert "graded 1" in said(regraded) and students_in(out / "grades.csv") == ["ada", "ben", "test-ta"]


@needs_bwrap
def test_points_a_ta_entered_are_never_removed_without_force(course):
    course, _ = course
    with Gradebook(gradebook_url(course)) as gradebook:
        notebook = gradebook.find_submission_notebook(ASSIGNMENT, ASSIGNMENT, "ben")
        next(g for g in notebook.grades if g.name == "q1").manual_score = 1.0
        gradebook.db.commit()
    refused = cli("remove", ASSIGNMENT, "ben", "--course", course)
    assert refused.returncode == 1 and "entered in formgrader (q1), which would be lost" in said(refused)
    assert "ben" in in_gradebook(gradebook_url(course))
    assert (course / "graded" / ASSIGNMENT / "ben.json").exists()


def test_the_demo_grades_its_examples_in_its_own_copy(tmp_path):
    """`autograder demo` in a course with a class: the examples go to COURSE/demo/, not the class."""
    from autograder.authoring.examples import demo_course
    from autograder.course import Course, CourseError

    course = Course(new_course(tmp_path))
    demo = demo_course(course)
    assert demo.root == course.root / "demo" and demo.names() == course.names()
    assert (demo.root / "nbgrader_config.py").is_file() and not (demo.root / "graded").exists()
    again = demo_course(course)  # made afresh each time
    assert again.root == demo.root
    (course.root / "demo" / ".autograder-demo").unlink()  # a demo/ folder the TA made
    with pytest.raises(CourseError, match="the demo did not make it"):
        demo_course(course)
