"""The recipes of docs/architecture.md ("Where a change goes"), carried out as written.

Each test makes the change a recipe describes, in the files it names and nowhere else, on a
scratch copy of the package, and runs the command that should then have the change. A recipe
that misses a file (a list kept elsewhere, a choice written out in the command) fails here.
"""
import os
import shutil
from pathlib import Path

from autograder.record import GRADED, write_result

from helpers import PACKAGE_CHECKOUT, cli, make_result, new_course

DOCS = PACKAGE_CHECKOUT / "docs" / "architecture.md"

TOY_LMS = '''

class Toy(LMS):
    """A toy LMS: students by their toy id, one points column per assignment."""

    name, title = "toy", "Toy's grade import"
    roster_columns = ("toy_id",)

    def export(self, assignments, roster=None, key=None):
        people, export = _people(assignments, roster)
        lines = ["toy_id," + ",".join(grades.title for grades in assignments)]
        for student, row in people:
            cells = [_points(grades.grades.get(student)) for grades in assignments]
            lines.append(",".join([row.get("toy_id", "?"), *cells]))
            export.exported += any(cells)
        export.text = "\\n".join(lines) + "\\n"
        return export


BY_NAME["toy"] = Toy()
'''


def scratch_package(tmp_path):
    """A copy of the package to change, and the environment that imports it instead of this one."""
    copy = tmp_path / "package"
    shutil.copytree(PACKAGE_CHECKOUT / "autograder", copy / "autograder",
                    ignore=shutil.ignore_patterns("__pycache__"))
    return copy, {**os.environ, "PYTHONPATH": str(copy)}  # (run from a folder without autograder/ in it)


def recipe(title):
    """The bullets under `### title` in docs/architecture.md."""
    text = DOCS.read_text()
    start = text.index(f"### {title}\n")
    end = text.find("\n### ", start + 1)
    return text[start:end if end > 0 else None]


def test_a_new_lms_is_one_class_in_the_file_the_recipe_names(tmp_path):
    steps = recipe("Add an LMS export")
    assert "`autograder/outputs/lms.py`" in steps and "BY_NAME" in steps
    copy, env = scratch_package(tmp_path)
    lms_file = copy / "autograder" / "outputs" / "lms.py"
    lms_file.write_text(lms_file.read_text() + TOY_LMS)  # the one file named: nothing else changes
    course = new_course(tmp_path)
    out = course / "graded" / "causal_attention"
    out.mkdir(parents=True)
    write_result(out, make_result("s1", [("ex1", 26, 26.0)], GRADED))
    write_result(out, make_result("s2", [("ex1", 13, 26.0)], GRADED))
    (tmp_path / "roster.csv").write_text("student_id,toy_id\ns1,T-1\ns2,T-2\n")
    done = cli("export", "toy", "causal_attention", "--course", course, "--roster", tmp_path / "roster.csv", env=env,
               cwd=tmp_path)
    said = " ".join(done.stdout.split())
    assert "Toy's grade import of causal_attention" in said, done.stdout + done.stderr  # its own words
    table = (out / "toy-causal_attention.csv").read_text().splitlines()
    # the roster's new id column reached the export (a roster keeps every LMS's columns)
    assert [line.split(",")[0] for line in table] == ["toy_id", "T-1", "T-2"]
    assert "{csv,canvas,moodle,toy}" in cli("export", "--help", env=env, cwd=tmp_path).stdout
