import contextlib
import io
import shutil

import pytest

from autograder import ROOT
from autograder.reference import solved_namespace
from autograder.validate import release_namespace

ASSIGNMENT = "causal_attention"


@pytest.fixture(scope="session")
def solved():
    with contextlib.redirect_stdout(io.StringIO()):
        return solved_namespace(ASSIGNMENT)


@pytest.fixture(scope="session")
def stubs():
    return release_namespace(ASSIGNMENT)


@pytest.fixture(scope="session")
def course_copy(tmp_path_factory):
    """A throwaway nbgrader course: config, source and release, nothing graded yet."""
    course = tmp_path_factory.mktemp("course")
    shutil.copy(ROOT / "nbgrader_config.py", course)
    for folder in ("source", "release"):
        shutil.copytree(ROOT / folder, course / folder)
    return course


@pytest.fixture(scope="session")
def graded_examples(tmp_path_factory):
    """A course whose example students (and fay, who crashes) were graded by `grade_batch`:
    results, feedback pages, report, gradebook and autograded notebooks.
    Returns (course, {student: result})."""
    import nbformat

    from autograder.batch import grade_batch
    from autograder.examples import write_examples
    from helpers import make_notebook

    course = tmp_path_factory.mktemp("graded-course")
    shutil.copy(ROOT / "nbgrader_config.py", course)
    for folder in ("source", "release"):
        shutil.copytree(ROOT / folder, course / folder)
    release = course / "release" / ASSIGNMENT / f"{ASSIGNMENT}.ipynb"
    write_examples(ASSIGNMENT, release, course / "submitted")
    crashing = make_notebook({"ex5_answer": [(
        "class MultiHeadAttention", "raise RuntimeError('my notebook stops here')\nclass MultiHeadAttention")]})
    path = course / "submitted" / "fay" / ASSIGNMENT / f"{ASSIGNMENT}.ipynb"
    path.parent.mkdir(parents=True)
    nbformat.write(crashing, path)
    report = grade_batch(ASSIGNMENT, [course / "submitted"], course, jobs=2, seed=7)
    return course, {r["extra_data"]["student_id"]: r for r in report.results}
