"""`autograder remove`: take a student, or a stray submission, out of an assignment's grading.

A test folder, a stray file or a student who dropped the course should not sit in
formgrader, `nbgrader export` and the final grade file. Removing one keeps what it had
(its result goes to history/, never deleted), takes it out of every output (its feedback
page, its autograded notebook, nbgrader's gradebook, grades.csv, the report) and records
the removal in removed.json, so the next `autograder grade` of the same folder or zip does
not grade it again; `--undo` puts the student back for the next run.
"""
import shutil
from dataclasses import dataclass
from datetime import datetime, timezone

from autograder.course import CourseError
from autograder.grading.notebook import grade_cells
from autograder.outputs.gradebook_db import remove_submission
from autograder.outputs.results import GradesCsv
from autograder.record import write_result
from autograder.runs.recording import class_report, graded_folder, read_source, write_outputs


@dataclass
class Removal:
    student: str
    done: list  # what was done, in words
    problem: str = ""  # why it could not be done, for the TA


def remove(assignment, students, force=False, results_dir=None):
    """Remove `students` from `assignment`'s outputs; returns ([Removal], [(who, problem)])."""
    folder = graded_folder(assignment, results_dir)
    if not folder.root.is_dir():
        raise CourseError(f"{assignment.name} has no results in {folder.root} yet: there is nothing to remove")
    now = datetime.now(timezone.utc)
    removed, done = folder.removed(), []
    for student in students:
        removal = Removal(student, [])
        try:
            removal.done.append(remove_submission(assignment.course.root, assignment.name, student, force=force))
        except ValueError as error:  # points a TA entered by hand: kept unless --force
            done.append(Removal(student, [], str(error)))
            continue
        result = folder.result(student)
        if result is not None:
            keep = folder.history(f"removed-{now.strftime('%Y%m%dT%H%M%S.%fZ')}")
            keep.mkdir(parents=True, exist_ok=True)
            write_result(None, result, keep / f"{student}.json")
            (folder.root / f"{student}.json").unlink()
            removal.done.append(f"its result moved to {keep}")
        page = folder.feedback_page(student)
        if page.exists():
            page.unlink()
            removal.done.append("its feedback page deleted")
        notebook = assignment.course.autograded / student / assignment.name
        if notebook.is_dir():
            shutil.rmtree(notebook)
            removal.done.append("its autograded notebook deleted")
        removed[student] = f"removed on {now:%Y-%m-%d %H:%M} UTC with `autograder remove`"
        done.append(removal)
    folder.set_removed(removed)
    source = read_source(assignment)
    problems = write_outputs([GradesCsv(folder, grade_cells(source)), class_report(assignment, folder, source)],
                             folder.results())
    return done, problems


def put_back(assignment, students, results_dir=None):
    """Let the next `autograder grade` grade `students` again; returns those that were removed."""
    folder = graded_folder(assignment, results_dir)
    removed = folder.removed()
    back = [student for student in students if removed.pop(student, None) is not None]
    if folder.root.is_dir():
        folder.set_removed(removed)
    return back
