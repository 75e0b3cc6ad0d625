import contextlib
import functools
import io
import os
import time

import pytest

from autograder.grading import selfcheck
from autograder.course.reference import solved_namespace
from autograder.grading.sandbox.isolation import available

from helpers import COURSE, make_gradebook, new_course, release_namespace

ASSIGNMENT = "causal_attention"

# Startup .pth files this machine had before any test ran (a platform's own, such as
# a CA-certificate hook) are trusted for the tests' grading, and named in the header.
# Never a sitecustomize/usercustomize: with one of those the machine is poisoned and
# every grading test must fail, saying so.
PLATFORM_STARTUP_FILES = [path for path in selfcheck.suspicious_startup_files() if path.endswith(".pth")]
os.environ[selfcheck.TRUSTED_ENV] = os.pathsep.join(
    [p for p in os.environ.get(selfcheck.TRUSTED_ENV, "").split(os.pathsep) if p] + PLATFORM_STARTUP_FILES)


def pytest_addoption(parser):
    parser.addoption("--full", action="store_true",
                     help="also run the tests marked slow: what CI runs (about 30 minutes on 2 cores)")


def pytest_configure(config):
    config.addinivalue_line("markers", "slow: left out of the fast lane; `pytest --full` runs it")
    # nbgrader stamps each new gradebook.db with its migrations' head, which it learns by running
    # `alembic heads` in a process of its own: 3 s, paid again for every fresh course a test grades
    # into (a TA pays it once per course). The head is the same all session: read it once, here.
    import nbgrader.api

    if not hasattr(nbgrader.api.get_alembic_version, "cache_info"):
        asked = nbgrader.api.get_alembic_version

        def alembic_head():
            try:
                from alembic.script import ScriptDirectory
                from nbgrader.dbutil import ALEMBIC_DIR

                return ScriptDirectory(ALEMBIC_DIR).get_current_head()  # what `alembic heads` prints
            except Exception:  # noqa: BLE001 (another nbgrader: ask it as it asks itself)
                return asked()

        nbgrader.api.get_alembic_version = functools.lru_cache(maxsize=None)(alembic_head)


def pytest_collection_modifyitems(config, items):
    """The fast lane (plain `pytest`) leaves out the slow tests; --full runs everything."""
    if config.getoption("--full"):
        return
    slow = [item for item in items if item.get_closest_marker("slow")]
    if slow:
        config.hook.pytest_deselected(items=slow)
        items[:] = [item for item in items if not item.get_closest_marker("slow")]


# The fast lane's budget: the README gives its time on 2 idle cores, and the `slow` marker keeps it
# under this. A whole fast lane over it says which unmarked tests took longest (a warning, never a
# failure: on a busy machine every test is slower, and a test that fails for it tells nothing).
FAST_LANE_BUDGET = 300
_lane = {"started": time.monotonic(), "took": {}}


def pytest_runtest_logreport(report):
    _lane["took"][report.nodeid] = _lane["took"].get(report.nodeid, 0.0) + report.duration


def pytest_terminal_summary(terminalreporter, config):
    whole = config.args_source == pytest.Config.ArgsSource.TESTPATHS and not config.option.keyword \
        and not config.option.markexpr
    took = time.monotonic() - _lane["started"]
    if config.getoption("--full") or not whole or took <= FAST_LANE_BUDGET:
        return
    slowest = sorted(_lane["took"].items(), key=lambda item: -item[1])[:5]
    terminalreporter.write_line(
        f"The fast lane took {took:.0f} s, over its {FAST_LANE_BUDGET} s on 2 idle cores. If nothing else ran on"
        " this machine, mark the slowest with @pytest.mark.slow: "
        + ", ".join(f"{name} ({seconds:.1f} s)" for name, seconds in slowest), yellow=True)


def pytest_report_header(config):
    mode, why = available()
    lines = [f"sandbox: {why}" + ("" if mode == "bwrap" else " -- sandbox tests will FAIL"),
             "lane: " + ("full" if config.getoption("--full") else "fast (add --full for every test)")]
    if PLATFORM_STARTUP_FILES:
        lines.append("trusted startup files found before the tests: " + ", ".join(PLATFORM_STARTUP_FILES))
    return lines


@pytest.fixture(scope="session")
def sandbox_required():
    """Security tests never skip because the sandbox is missing: they fail. Only a non-root
    developer machine skips them (they look at other uids), and never under CI."""
    mode, why = available()
    if mode != "bwrap":
        pytest.fail(f"no working sandbox: {why}. Install bubblewrap (./setup.sh, or apt-get install -y"
                    " bubblewrap as root) and run the tests again.", pytrace=False)
    if os.geteuid() != 0:
        if os.environ.get("CI"):
            pytest.fail("the sandbox tests must run as root under CI", pytrace=False)
        pytest.skip("the sandbox tests look at other users' processes and files: run them as root")


@pytest.fixture(scope="session")
def solved():
    with contextlib.redirect_stdout(io.StringIO()):
        return solved_namespace(COURSE.assignment(ASSIGNMENT).solutions)


@pytest.fixture(scope="session")
def stubs():
    return release_namespace(COURSE.assignment(ASSIGNMENT))


@pytest.fixture
def course(tmp_path):
    """A throwaway copy of the bundled course for one test, nothing graded yet (its folder)."""
    return new_course(tmp_path)


@pytest.fixture(scope="session")
def course_copy(tmp_path_factory):
    """A throwaway copy of the bundled course, nothing graded yet (its folder), with an empty
    gradebook (see helpers.make_gradebook)."""
    return make_gradebook(new_course(tmp_path_factory.mktemp("course")))


@pytest.fixture(scope="session")
def graded_examples(tmp_path_factory):
    """A course whose example students (and fay, who crashes) were graded by `grade_batch`:
    results, feedback pages, report, gradebook and autograded notebooks.
    Returns (course folder, {student: result})."""
    from autograder.runs.batch import grade_batch
    from autograder.authoring.examples import write_examples
    from helpers import assignment_of, crashing_notebook, submit

    course = new_course(tmp_path_factory.mktemp("graded-course"))
    assignment = assignment_of(course)
    write_examples(assignment, course / "submitted")
    submit(course, ASSIGNMENT, {"fay": crashing_notebook()})
    report = grade_batch(assignment, [course / "submitted"], jobs=2, seed=7)
    return course, {r.student_id: r for r in report.results}


@pytest.fixture(scope="module")
def graded(request, course_copy):
    """Stock nbgrader's scores, {student: {grade id or "total": points}}, for the test module's
    ASSIGNMENT in the session's course copy: its examples, fay (one answer raises half-way, see
    helpers.CRASHES), gus (every answer left empty), and what the module's
    `more_submissions(course)` (if any) returns, {student: notebook}."""
    from autograder.authoring.examples import write_examples
    from autograder.authoring.nbgrader_steps import autograde, generate_assignment, gradebook_scores
    from helpers import assignment_of, crashing_notebook, empty_answers, make_notebook, submit

    name = request.module.ASSIGNMENT
    assignment = assignment_of(course_copy, name)
    generate_assignment(assignment)  # registers the assignment in the gradebook
    write_examples(assignment, course_copy / "submitted")
    more = getattr(request.module, "more_submissions", lambda course: {})(course_copy)
    submit(course_copy, name, {"fay": crashing_notebook(name), "gus": empty_answers(make_notebook(assignment=name)),
                               **more})
    autograde(assignment)
    return gradebook_scores(assignment)
