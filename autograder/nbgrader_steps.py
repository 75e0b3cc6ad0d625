"""Calls into nbgrader: release an assignment, autograde submissions, read grades."""
import subprocess
import sys
from pathlib import Path

from . import ROOT


class NbgraderFailed(RuntimeError):
    pass


def run_nbgrader(course, *args):
    """Run an nbgrader command in the course directory; raise with its log on failure."""
    result = subprocess.run([sys.executable, "-m", "nbgrader", *args], cwd=course,
                            capture_output=True, text=True)
    if result.returncode != 0:
        raise NbgraderFailed(f"nbgrader {' '.join(args)} failed:\n{result.stdout[-3000:]}{result.stderr[-3000:]}")
    return result


def release_path(assignment, course=ROOT):
    return Path(course) / "release" / assignment / f"{assignment}.ipynb"


def generate_assignment(assignment, course=ROOT):
    run_nbgrader(course, "generate_assignment", assignment, "--force")
    return release_path(assignment, course)


def autograde(assignment, course=ROOT):
    return run_nbgrader(course, "autograde", assignment, "--create", "--force")


def gradebook_scores(assignment, course=ROOT):
    """{student: {grade cell: score, ..., 'total': total}} from the course's gradebook."""
    from nbgrader.api import Gradebook

    scores = {}
    with Gradebook(f"sqlite:///{Path(course) / 'gradebook.db'}") as gradebook:
        for submission in gradebook.assignment_submissions(assignment):
            row = {}
            for notebook in submission.notebooks:
                for grade in notebook.grades:
                    # None: a written answer still waiting for a TA in formgrader
                    row[grade.name] = None if grade.needs_manual_grade else grade.score
            row["total"] = submission.score
            scores[submission.student_id] = row
    return scores


def throwaway_course(folder, assignment):
    """folder/course: nbgrader's config and one assignment's source and release, nothing
    graded. Grading in it never touches the real course's gradebook."""
    import shutil

    course = Path(folder) / "course"
    course.mkdir()
    shutil.copy(ROOT / "nbgrader_config.py", course)
    for part in ("source", "release"):
        shutil.copytree(ROOT / part / assignment, course / part / assignment)
    return course
