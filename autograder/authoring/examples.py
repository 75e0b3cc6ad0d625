"""Example submissions for the demo and the tests, made from the release notebook.

An assignment's `examples.toml` lists its example students. Each fills in the
release's answer cells from the solutions, then applies its edits (a realistic
mistake, a crash, nothing at all); `untouched = true` hands in the release.
"""
import tomllib
from datetime import datetime, timedelta, timezone

import nbformat

from autograder.course import CourseError
from autograder.course.regions import read_regions, strip_solution_markers

CONCEPT_ANSWER = "Masking hides future tokens so that each position only uses the past."


def examples(assignment):
    """{student id: {answer cell: [(old, new)]}, or None for the untouched release}."""
    if not assignment.examples.is_file():
        return {}
    try:
        students = tomllib.loads(assignment.examples.read_text()).get("student", [])
    except tomllib.TOMLDecodeError as error:
        raise CourseError(f"{assignment.examples} is not valid TOML: {error}") from None
    found = {}
    for student in students:
        edits = {}
        for edit in student.get("edit", []):
            edits.setdefault(edit["cell"], []).append((edit["old"], edit["new"]))
        found[student["name"]] = None if student.get("untouched") else edits
    return found


def filled_notebook(release_nb, assignment, edits):
    regions = read_regions(assignment.solutions)
    nb = nbformat.from_dict(release_nb)
    for cell in nb.cells:
        meta = cell.metadata.get("nbgrader", {})
        if not meta.get("solution"):
            continue
        if cell.cell_type == "markdown":
            cell.source = CONCEPT_ANSWER
            continue
        source = strip_solution_markers(regions[meta["grade_id"]])
        for old, new in edits.get(meta["grade_id"], []):
            if old not in source:
                raise ValueError(f"example edit {old!r} no longer fits {meta['grade_id']}")
            source = source.replace(old, new)
        cell.source = source
    return nb


def write_examples(assignment, submitted_dir):
    """Write submitted/<student>/<assignment>/<assignment>.ipynb for every example."""
    release_nb = nbformat.read(assignment.release_notebook, as_version=4)
    paths = {}
    for student, edits in examples(assignment).items():
        nb = release_nb if edits is None else filled_notebook(release_nb, assignment, edits)
        path = submitted_dir / student / assignment.name / f"{assignment.name}.ipynb"
        path.parent.mkdir(parents=True, exist_ok=True)
        nbformat.write(nb, path)
        paths[student] = path
    return paths


DEMO = "demo"  # the demo's own course, inside the course: COURSE/demo/
DEMO_MARK = ".autograder-demo"  # a folder the demo made (and may replace)


def demo_course(course):
    """COURSE/demo/: a copy of the course (exercises, solutions, source, release, nbgrader's
    config) with nothing graded, for the demo's example students. Their submissions, results,
    autograded notebooks and gradebook stay there, so they never join the real class in
    formgrader or `nbgrader export` (`cd demo && nbgrader export` shows them). Made afresh on
    every demo; a demo/ folder the demo did not make is refused, never replaced."""
    import shutil

    from autograder.course import copy_course

    target = course.root / DEMO
    if target.exists():
        if not (target / DEMO_MARK).is_file():
            raise CourseError(f"{target} exists and the demo did not make it: rename it, or run the demo in another"
                              " course (the demo grades its example students in COURSE/demo/)")
        shutil.rmtree(target)
    demo = copy_course(course, target)
    (target / DEMO_MARK).write_text("made by `autograder demo`: removed and made again by the next demo\n")
    return demo


DEMO_DUE = timedelta(days=7)


def give_demo_due_date(assignment, now=None):
    """For `serve --demo`: an assignment of the demo's copy that hides checks until a due date it
    does not have gets one DEMO_DUE from `now`, written into the copy's assignment.toml (the
    course's own is never touched), so the demo shows the page students meet before the due
    date. Returns that date, or None when nothing was written."""
    from autograder.course.visibility import Visibility

    if assignment.late_settings or not Visibility.of(assignment).until_due():
        return None
    due = ((now or datetime.now(timezone.utc)) + DEMO_DUE).replace(second=0, microsecond=0)
    settings = assignment.folder / "assignment.toml"
    text = settings.read_text(encoding="utf-8") if settings.is_file() else ""
    settings.write_text(text + f"\n[late]  # written by `serve --demo`: the demo's copy only\ndue = {due.isoformat()}\n",
                        encoding="utf-8")
    return due
