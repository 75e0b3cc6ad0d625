"""What nbgrader's hidden test cells call, inside the student's own kernel.

This is stock nbgrader's mode: checks run next to the student's code, so it is
only as trustworthy as nbgrader itself (use `autograder grade` for that). It
prints the feedback and returns the score, which nbgrader reads as partial
credit. Nothing reaches stderr: nbgrader would give 0 points for a warning.
"""
import contextlib
import io
import os
import warnings

from autograder.course import Course
from autograder.checks.runner import feedback_lines, run_checks
from autograder.inside.student import NamespaceStudent


class Score(float):
    """A score that displays as a bare number, the form nbgrader reads."""

    def __repr__(self):
        return f"{float(self):g}"


def grade_here(assignment, grade_id, namespace, points):
    seed = os.environ.get("AUTOGRADER_SEED")
    with warnings.catch_warnings(), contextlib.redirect_stderr(io.StringIO()):
        warnings.simplefilter("ignore")
        try:
            # nbgrader runs the notebook inside the course folder: its checks are found from there
            found = Course.locate().assignment(assignment)
            result = run_checks(found, NamespaceStudent(namespace), [grade_id],
                                seed=int(seed) if seed else None)[grade_id]
        except Exception as error:
            print(f"The hidden checks for {grade_id} could not run ({type(error).__name__});"
                  " please tell your instructor. Score: 0")
            return Score(0)
    print("\n".join(feedback_lines(result, points)))
    return Score(result.score(points))
