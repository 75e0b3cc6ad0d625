"""Calls into nbgrader: release an assignment, autograde submissions, read grades."""
import subprocess
import sys


class NbgraderFailed(RuntimeError):
    pass


def run_nbgrader(course_root, *args):
    """Run an nbgrader command in the course directory; raise with its log on failure."""
    result = subprocess.run([sys.executable, "-m", "nbgrader", *args], cwd=course_root,
                            capture_output=True, text=True)
    if result.returncode != 0:
        raise NbgraderFailed(f"nbgrader {' '.join(args)} failed:\n{result.stdout[-3000:]}{result.stderr[-3000:]}")
    return result


def generate_assignment(assignment):
    """nbgrader generate_assignment in the assignment's course; the release notebook's path."""
    run_nbgrader(assignment.course.root, "generate_assignment", assignment.name, "--force")
    return assignment.release_notebook


def autograde(assignment):
    return run_nbgrader(assignment.course.root, "autograde", assignment.name, "--create", "--force")


def gradebook_scores(assignment):
    """{student: {grade cell: score, ..., 'total': total}} from the course's gradebook."""
    from nbgrader.api import Gradebook

    scores = {}
    with Gradebook(f"sqlite:///{assignment.course.gradebook}") as gradebook:
        for submission in gradebook.assignment_submissions(assignment.name):
            row = {}
            for notebook in submission.notebooks:
                for grade in notebook.grades:
                    # None: a written answer still waiting for a TA in formgrader
                    row[grade.name] = None if grade.needs_manual_grade else grade.score
            row["total"] = submission.score
            scores[submission.student_id] = row
    return scores
