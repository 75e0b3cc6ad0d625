"""A course is a directory and the engine knows no assignment: an instructor creates a course
with `autograder init`, adds assignments with `autograder new`, edits them, then builds,
releases, validates and grades, all without touching this package."""
import csv
import re
import subprocess
from pathlib import Path

import pytest

from autograder.course import PACKAGE_CHECKOUT, Course, CourseError

from helpers import COURSE, cli


def autograder(*args, cwd):
    done = cli(*args, cwd=cwd)
    assert done.returncode == 0, f"autograder {' '.join(map(str, args))}:\n{done.stdout[-3000:]}{done.stderr[-3000:]}"
    return done.stdout


def package_state():
    """What git sees in this package's checkout: a command must not change it."""
    return subprocess.run(["git", "status", "--porcelain", "--untracked-files=all"], cwd=PACKAGE_CHECKOUT,
                          capture_output=True, text=True).stdout


@pytest.mark.slow
@pytest.mark.usefixtures("sandbox_required")
def test_an_instructor_builds_a_course_of_two_assignments_from_scratch(tmp_path):
    before = package_state()
    autograder("init", "mycourse", cwd=tmp_path)
    course = tmp_path / "mycourse"
    autograder("new", "warmup", cwd=course)
    autograder("new", "scaling", cwd=course / "exercises")  # found from any folder inside the course
    assert Course(course).names() == ["warmup", "scaling"]  # course order: as created
    # An instructor's edits: another style of solution, and one more hidden check.
    solution = course / "solutions" / "warmup.py"
    solution.write_text(solution.read_text().replace("return x * factor", "return factor * x"))
    check = course / "exercises" / "scaling" / "checks" / "test_ex1.py"
    check.write_text(check.read_text() + '''

def test_keeps_the_shape(student, rng):
    """Keeps the shape of a 3-d tensor"""
    x = torch.randn(2, 3, 4, generator=rng)
    expect_tensor(student.call("scale", x, -1.0), "scale(x, -1.0)", shape=(2, 3, 4))
''')
    autograder("release", cwd=course)
    drifted = cli("validate", "warmup", cwd=course)
    assert drifted.returncode != 0 and "'ex1-returns-x'" in drifted.stdout  # the corpus must follow the edit
    for name in ("corpus.toml", "errors.toml"):
        path = course / "exercises" / "warmup" / name
        path.write_text(path.read_text().replace("old = \"return x * factor\"", "old = \"return factor * x\""))
        if name == "corpus.toml":  # and so must the error model
            drifted = cli("validate", "warmup", cwd=course)
            assert drifted.returncode != 0 and "mutant 'adds-factor' does not apply" in drifted.stdout, drifted.stdout
    for name in ("warmup", "scaling"):
        assert (course / "release" / name / f"{name}.ipynb").is_file()
        out = autograder("validate", name, cwd=course)
        assert "Clean" in out, out
        assert "Sandbox: warmed up on the untouched release" in out, out
    out = autograder("demo", cwd=course)  # the example students of both, graded in sandboxes
    demo = course / "demo"  # ... in the course's demo copy, never its own class
    for name in ("warmup", "scaling"):
        rows = {r["student_id"]: r for r in csv.DictReader(open(demo / "graded" / name / "grades.csv"))}
        assert float(rows["ada"]["total"]) == 1 and float(rows["dee"]["total"]) == 0, rows
    scaling = (demo / "graded" / "scaling" / "ada.json").read_text()
    assert "Keeps the shape of a 3-d tensor" in scaling  # the edited check ran
    assert (demo / "gradebook.db").is_file() and "Course:" in out
    assert not (course / "graded").exists() and not (course / "submitted").exists()
    assert package_state() == before  # nothing written into the package


def test_commands_name_what_is_missing(tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    done = cli("grade", "nothing", tmp_path, "--course", empty)
    assert done.returncode == 2 and "has no assignment 'nothing'" in done.stdout
    assert "Traceback" not in done.stdout + done.stderr
    with pytest.raises(CourseError, match="already holds a course"):
        from autograder.authoring.scaffold import init_course

        init_course(COURSE.root)
    from autograder.authoring.scaffold import new_assignment

    with pytest.raises(CourseError, match="cannot name an assignment"):
        new_assignment(COURSE, "Bad-Name")
    with pytest.raises(CourseError, match="already has an assignment"):
        new_assignment(COURSE, COURSE.names()[0])


def test_the_sandbox_gets_the_release_to_warm_up_on_unless_the_assignment_says_no():
    """The release's code cells, as the untouched release runs them (public: no solution, no
    hidden check), go to the sandbox with its settings; `warm_up_on_release = false` keeps them out."""
    import json

    assignment = Course(COURSE.root).assignment(COURSE.names()[-1])
    release = json.loads(assignment.release_notebook.read_text())
    code = ["".join(c["source"]) for c in release["cells"] if c["cell_type"] == "code"]
    cells = json.loads(assignment.sandbox_files()["release_cells.json"])
    assert [source for _, source in cells] == code and len(code) > 3
    solution = assignment.solutions.read_text()
    assert not any("BEGIN SOLUTION" in source or "HIDDEN" in source for source in code)
    assert "raise NotImplementedError" in "".join(code) and "raise NotImplementedError" not in solution
    sandbox = assignment.settings.setdefault("sandbox", {})  # this object's own copy
    sandbox["warm_up_seconds"] = 5
    assert json.loads(assignment.sandbox_files()["settings.json"])["warm_up_seconds"] == 5
    sandbox["warm_up_seconds"] = "soon"
    with pytest.raises(CourseError, match="warm_up_seconds: a number of seconds"):
        assignment.sandbox_files()
    sandbox["warm_up_seconds"], sandbox["warm_up_on_release"] = 5, False
    assert "release_cells.json" not in assignment.sandbox_files()


@pytest.mark.slow
@pytest.mark.usefixtures("sandbox_required")
def test_validate_tells_the_instructor_whether_the_sandbox_warmed_up_on_the_release(capsys):
    """Grading does not fail when the sandbox cannot warm up on the release (it is only
    slower), so `validate` is where an instructor learns it, and why."""
    from autograder.authoring.validate import release_warm_up
    from autograder.cli.instructor import _print_release_warm_up

    assignment = Course(COURSE.root).assignment(COURSE.names()[-1])
    ok = release_warm_up(assignment)
    assert ok.startswith("ok: tried in "), ok
    assignment.settings.setdefault("sandbox", {})["warm_up_seconds"] = 0.001  # this object's own copy
    slow = release_warm_up(assignment)
    assert slow == "skipped: the release took more than 0.001 s", slow
    _print_release_warm_up(slow)
    out = " ".join(capsys.readouterr().out.split())
    assert "no warm-up on the release: the release took more than 0.001 s" in out
    assert "[sandbox] warm_up_seconds" in out
    _print_release_warm_up("skipped: the release left threads or processes running")  # the agent's words
    out = " ".join(capsys.readouterr().out.split())
    assert "cannot be warmed up on safely" in out and "warm_up_seconds" not in out
    assignment.settings["sandbox"]["warm_up_on_release"] = False
    assert release_warm_up(assignment) == "no release cells"


def test_the_engine_names_no_assignment():
    """No assignment name or exercise object of the bundled course appears in the engine."""
    words = [*COURSE.names(), "BadLM", "MyData"]
    pattern = re.compile("|".join(map(re.escape, words)))
    found = [f"{path.relative_to(PACKAGE_CHECKOUT)}:{number}"
             for path in (PACKAGE_CHECKOUT / "autograder").rglob("*") if path.suffix in (".py", ".j2", ".ini", ".json")
             for number, line in enumerate(path.read_text().splitlines(), start=1) if pattern.search(line)]
    assert found == []


def autograder_imports(path):
    """[(line, module)] of every import of the `autograder` package in a Python file."""
    import ast

    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        names = ([alias.name for alias in node.names] if isinstance(node, ast.Import) else
                 [node.module or ""] if isinstance(node, ast.ImportFrom) and not node.level else [])
        found += [(node.lineno, name) for name in names if name.split(".")[0] == "autograder"]
    return found


def test_checks_import_only_autograder_checks_in_every_template_and_assignment(tmp_path):
    """docs/checks.md: a check imports `autograder.checks` and nothing else of the engine, whose
    modules may move. Every Python file `init` and `new` write, and every bundled assignment's
    checks, keep that rule."""
    from autograder.authoring.scaffold import init_course, new_assignment

    course = init_course(tmp_path / "course")
    new_assignment(course, "warmup")
    written = sorted(p for p in (tmp_path / "course").rglob("*.py"))
    checks = sorted((tmp_path / "course" / "exercises" / "warmup" / "checks").glob("*.py"))
    assert checks and set(checks) <= set(written)
    bundled = sorted(p for a in COURSE.assignments() for p in a.checks.rglob("*.py"))
    assert len(bundled) > 10
    broken = {f"{path}:{line}": module for path in [*written, *bundled] for line, module in autograder_imports(path)
              if module != "autograder.checks"}
    assert not broken, f"checks import engine modules: {broken}"
    assert any(module == "autograder.checks" for path in checks for _, module in autograder_imports(path))


def test_every_file_of_ours_the_templates_name_exists(tmp_path):
    """The files `init` and `new` write point a new instructor at the engine's files and docs;
    each path they name is there (one named autograder/course.py after it became a package)."""
    import re

    from autograder.authoring.scaffold import init_course, new_assignment

    course = init_course(tmp_path / "course")
    new_assignment(course, "warmup")
    repository = Path(__file__).resolve().parent.parent
    named = {match for path in (tmp_path / "course").rglob("*") if path.is_file() and path.suffix in (".py", ".toml", ".md")
             for match in re.findall(r"\b((?:autograder|docs)/[\w/]+\.(?:py|md))", path.read_text(errors="replace"))}
    assert named, "the templates name no file of ours: the test reads nothing"
    missing = sorted(name for name in named if not (repository / name).exists())
    assert not missing, missing
