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
