"""`autograder validate` catches what every student would hit (issue 35, part 7): a visible
check that fails on the reference solutions, a stale release, a hidden check that crashes
(named by file and line for the instructor, never for the student), and an assignment that
was never released (validate releases it first and says so).

Each case is a copy of the bundled course, edited the way an instructor would slip."""
import contextlib
import io
import shutil

import nbformat
import pytest

from autograder import cli
from autograder.authoring import validate as validate_module
from autograder.authoring.build import write_source
from autograder.authoring.corpus import SOLUTIONS
from autograder.authoring.nbgrader_steps import generate_assignment
from autograder.authoring.validate import Validation, stale_files, validate
from autograder.checks.outcomes import COULD_NOT_RUN
from autograder.checks.runner import run_checks
from autograder.course.reference import solved_namespace
from autograder.inside.student import NamespaceStudent

from helpers import assignment_of, make_gradebook, new_course

ASSIGNMENT = "self_attention"
SYMMETRIC = "the scores of a sequence with itself form a symmetric table"  # Exercise 1's visible check says
TYPO = "    scale = torhc.ones(1)  # meant: torch\n"  # a hidden check's first line, misspelt
CHECK_FILE = f"exercises/{ASSIGNMENT}/checks/test_ex2.py"
CRASHING = "def test_naive_is_the_plain_formula(student, rng):"


def flatten(text):
    """Printed text with rich's line breaks undone."""
    return " ".join(text.split())


def break_visible_check(assignment):
    """Exercise 1's visible check asks for an antisymmetric table: right answers fail it. Released."""
    text = assignment.notebook_text.read_text()
    assert f'assert torch.allclose(scores, scores.T), "{SYMMETRIC}"' in text
    assignment.notebook_text.write_text(text.replace("torch.allclose(scores, scores.T)",
                                                     "torch.allclose(scores, -scores.T)"))
    write_source(assignment)
    generate_assignment(assignment)
    source = nbformat.read(assignment.source_notebook, as_version=4)
    return next(cell.id for cell in source.cells if "-scores.T" in cell.source)


def break_hidden_check(assignment):
    """A typo (NameError) in one of Exercise 2's hidden checks; the line it is on."""
    path = assignment.checks / "test_ex2.py"
    lines = path.read_text().splitlines(keepends=True)
    at = next(i for i, line in enumerate(lines) if line.startswith(CRASHING)) + 2  # after the docstring
    path.write_text("".join(lines[:at] + [TYPO] + lines[at:]))
    return at + 1


def make_stale(assignment):
    """Given code in the solutions changed, not released: source/ and release/ both stale."""
    text = assignment.solutions.read_text()
    assert "# Your\n" in text
    assignment.solutions.write_text(text.replace("# Your\n", "# Your (the first token)\n", 1))


@pytest.fixture(scope="module")
def broken(tmp_path_factory):
    """(assignment, the broken visible check's cell, the crashing line, validate's report) of a
    course whose self_attention has all three slips; validated once, solutions and release only."""
    course = make_gradebook(new_course(tmp_path_factory.mktemp("broken")))
    assignment = assignment_of(course, ASSIGNMENT)
    cell = break_visible_check(assignment)
    line = break_hidden_check(assignment)
    make_stale(assignment)
    return assignment, cell, line, validate(assignment, seed=0, jobs=2, only=set())


def printed(report, assignment, monkeypatch, capsys):
    """What `autograder validate` prints for `report`, and its exit status."""
    monkeypatch.setattr(validate_module, "validate", lambda *args, **kwargs: report)
    status = cli.main(["validate", ASSIGNMENT, "--course", str(assignment.course.root)])
    return status, flatten(capsys.readouterr().out)


@pytest.mark.slow
def test_a_visible_check_failing_on_the_reference_is_named(broken, monkeypatch, capsys):
    assignment, cell, _, report = broken
    expected = f"the visible check in cell {cell} fails on the reference solutions: AssertionError: {SYMMETRIC}"
    assert expected in report.problems[SOLUTIONS]
    assert not report.clean
    status, out = printed(report, assignment, monkeypatch, capsys)
    assert status == 1 and f"{SOLUTIONS}: {expected}" in out and "Not clean" in out


@pytest.mark.slow
def test_a_stale_release_is_named(broken, monkeypatch, capsys):
    assignment, _, _, report = broken
    status, out = printed(report, assignment, monkeypatch, capsys)
    for stale in (f"source/{ASSIGNMENT}/{ASSIGNMENT}.ipynb", f"release/{ASSIGNMENT}/{ASSIGNMENT}.ipynb"):
        line = (f"{stale} is stale against exercises/{ASSIGNMENT}/notebook.md and solutions/{ASSIGNMENT}.py:"
                f" run `autograder release {ASSIGNMENT}`")
        assert line in report.problems["release"]
        assert f"release: {line}" in out
    assert status == 1


@pytest.mark.slow
def test_a_crashing_hidden_check_is_named_by_file_and_line(broken, monkeypatch, capsys):
    assignment, _, line, report = broken
    where = f"{CHECK_FILE}:{line}: NameError: name 'torhc' is not defined"
    assert any(problem.startswith(where) and "test_naive_is_the_plain_formula" in problem
               for problem in report.problems["hidden checks"]), report.problems
    status, out = printed(report, assignment, monkeypatch, capsys)
    assert status == 1 and f"hidden checks: {where}" in out
    # the student still reads only that it could not run: no file, line or code
    seen = [check.message for cell in report.results[SOLUTIONS].cells for check in cell.checks if not check.passed]
    assert seen and all(message == f"{COULD_NOT_RUN} (NameError). Please tell your instructor."
                        for message in seen if "NameError" in message)
    assert not any("torhc" in message or "test_ex2" in message for message in seen)


def test_a_crash_is_located_for_the_instructor_only(tmp_path):
    """The plugin's record of a crashed check: its file and line for the instructor, the plain
    "could not run" for the student (no sandbox: the reference solutions, in this process)."""
    assignment = assignment_of(new_course(tmp_path), ASSIGNMENT)
    line = break_hidden_check(assignment)
    with contextlib.redirect_stdout(io.StringIO()):
        namespace = solved_namespace(assignment.solutions)
    checks = run_checks(assignment, NamespaceStudent(namespace), ["ex2"], seed=0)["ex2"].checks
    crashed = [check for check in checks if check.crash]
    assert [check.name for check in crashed] == ["test_naive_is_the_plain_formula"]
    assert crashed[0].crash == f"{CHECK_FILE}:{line}: NameError: name 'torhc' is not defined"
    assert crashed[0].message == f"{COULD_NOT_RUN} (NameError). Please tell your instructor."
    assert all(check.passed and not check.crash for check in checks if check is not crashed[0])


def test_stale_files_name_each_stale_notebook(tmp_path):
    assignment = assignment_of(new_course(tmp_path), ASSIGNMENT)
    make_stale(assignment)
    assert stale_files(assignment) == [
        f"{part}/{ASSIGNMENT}/{ASSIGNMENT}.ipynb is stale against exercises/{ASSIGNMENT}/notebook.md and"
        f" solutions/{ASSIGNMENT}.py: run `autograder release {ASSIGNMENT}`" for part in ("source", "release")]


def test_validate_releases_an_assignment_never_released(tmp_path, monkeypatch, capsys):
    course = make_gradebook(new_course(tmp_path))
    for part in ("source", "release"):
        shutil.rmtree(course / part / ASSIGNMENT)
    assignment = assignment_of(course, ASSIGNMENT)
    clean = Validation(ASSIGNMENT, 0, {}, {}, {}, 0.0)  # validating itself is tested above
    status, out = printed(clean, assignment, monkeypatch, capsys)
    assert status == 0, out
    assert f"{ASSIGNMENT} had no release yet: released it first, as `autograder release {ASSIGNMENT}` does" in out
    assert assignment.source_notebook.is_file() and assignment.release_notebook.is_file()
    assert "No such file" not in out


@pytest.mark.slow
@pytest.mark.usefixtures("sandbox_required")
def test_a_check_that_breaks_while_grading_is_a_problem_for_the_ta(broken, tmp_path):
    """`autograder grade` (the batch, and so the service's regrade) lists a broken check among the
    problems (exit 1), by file and line; the student's result says only that it could not run."""
    from autograder.outputs.folder import GradedFolder
    from autograder.outputs.results import ResultFiles
    from autograder.runs.batch import grade_batch
    from helpers import make_notebook, write

    assignment, _, line, _ = broken
    inbox = tmp_path / "inbox"
    inbox.mkdir()
    write(inbox, "ada", make_notebook({}, assignment=ASSIGNMENT))
    folder = GradedFolder(tmp_path / "out").make()
    report = grade_batch(assignment, [inbox], [ResultFiles(folder)], out_dir=folder, jobs=1, seed=0)
    said = " ".join(text for _, text in report.problems)
    assert f"{CHECK_FILE}:{line}: NameError" in said, report.problems
    assert "torhc" not in " ".join(check.message for cell in report.results[0].cells for check in cell.checks)
