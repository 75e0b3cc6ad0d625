"""The recipes of docs/architecture.md ("Where a change goes"), carried out as written.

Each test makes the change a recipe describes, in the files it names and nowhere else, on a
scratch copy of the package, and runs the command that should then have the change. A recipe
that misses a file (a list kept elsewhere, a choice written out in the command) fails here.
"""
import json
import os
import shutil
import subprocess
import sys

import pytest

from autograder.record import GRADED, write_result

from helpers import ASSIGNMENT, PACKAGE_CHECKOUT, append_to_first_answer, cli, example, make_result, new_course, write

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


TOY_COMMAND = '''

def cmd_hello(args):
    """Greet the course's assignments, or refuse without a course."""
    for assignment in chosen(args):
        console.print(f"hello {assignment.name}")
    return 0


_add_commands = add_commands


def add_commands(sub):
    _add_commands(sub)
    p = sub.add_parser("hello", help="say hello to each assignment")
    p.add_argument("assignments", nargs="*")
    p.set_defaults(func=cmd_hello)
'''


def test_a_new_command_is_a_function_and_its_parser_in_its_groups_module(tmp_path):
    steps = recipe("Add a command")
    assert "`autograder/cli/`" in steps and "add_commands" in steps and "GROUPS" in steps
    copy, env = scratch_package(tmp_path)
    group = copy / "autograder" / "cli" / "course.py"
    text = group.read_text().replace("from autograder.cli.common import console, course_of",
                                     "from autograder.cli.common import chosen, console, course_of")
    group.write_text(text + TOY_COMMAND)  # the group's own module: nothing else changes
    course = new_course(tmp_path)
    done = cli("hello", "--course", course, env=env, cwd=tmp_path)
    assert done.returncode == 0 and "hello causal_attention" in done.stdout, done.stdout + done.stderr
    assert "--course" in cli("hello", "--help", env=env, cwd=tmp_path).stdout  # every command takes --course
    refused = cli("hello", "no_such_assignment", "--course", course, env=env, cwd=tmp_path)
    assert refused.returncode == 2 and "Traceback" not in refused.stdout + refused.stderr  # main's one line


TOY_OUTPUT = '''"""A toy output: the students graded, one per line."""
from autograder.outputs.base import Output


class GradedList(Output):
    what = "the list of students graded"

    def __init__(self, folder):
        self.folder = folder

    def finish(self, results):
        self.folder.graded_list.write_text("".join(f"{result.student_id}\\n" for result in results))
        return []
'''


@pytest.mark.slow
@pytest.mark.usefixtures("sandbox_required")
def test_a_new_output_is_a_module_and_one_entry_in_the_list_the_recipe_names(tmp_path):
    steps = recipe("Add an output format")
    for named in ("`autograder/outputs/`", "`GradedFolder` (`autograder/outputs/folder.py`)",
                  "`standard_outputs` in `autograder/runs/recording.py`"):
        assert named in steps
    copy, env = scratch_package(tmp_path)
    package = copy / "autograder"
    (package / "outputs" / "graded_list.py").write_text(TOY_OUTPUT)
    feedback = '    feedback = property(lambda self: self.root / "feedback")\n'
    edit(package / "outputs" / "folder.py", feedback,
         '    graded_list = property(lambda self: self.root / "graded.txt")\n' + feedback)
    recording = package / "runs" / "recording.py"
    edit(recording, "class_report(assignment, folder, source)]", "class_report(assignment, folder, source), GradedList(folder)]")
    edit(recording, "\n\ndef standard_outputs(", "\nfrom autograder.outputs.graded_list import GradedList\n\n\ndef standard_outputs(")
    course = new_course(tmp_path)
    (tmp_path / "in").mkdir()
    write(tmp_path / "in", "ada", example("ada"))
    done = cli("grade", ASSIGNMENT, tmp_path / "in", "--course", course, env=env, cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert (course / "graded" / ASSIGNMENT / "graded.txt").read_text() == "ada\n"


def edit(path, old, new):
    """`path` with `old` (there once) replaced by `new`."""
    text = path.read_text()
    assert text.count(old) == 1, (path, old)
    path.write_text(text.replace(old, new))


PROBE_SCRIPT = '''
from autograder.grading.sandbox.limits import Limits
from autograder.grading.sandbox.process import Sandbox
from autograder.grading.sandbox.proxy import SandboxStudent

box = Sandbox(0, Limits(timeout=15, memory_bytes=2**30))
box.start()
try:
    box.run([("cell0", "v = 3.5")], seed=0)
    print("answered:", SandboxStudent(box).type_name("v"))
finally:
    box.close()
'''


@pytest.mark.slow
@pytest.mark.usefixtures("sandbox_required")
def test_a_new_probe_is_a_method_and_a_name_in_the_files_the_recipe_names(tmp_path):
    steps = recipe("Change the sandbox")
    for named in ("`NamespaceStudent`", "`PROBES` of `autograder/wire.py`"):
        assert named in steps
    copy, env = scratch_package(tmp_path)
    package = copy / "autograder"
    value = '    def value(self, name):\n'
    edit(package / "inside" / "student.py", value,
         '    def type_name(self, name):\n        return type(self._get(name)).__name__\n\n' + value)
    edit(package / "wire.py", 'PROBES = ("kind", ', 'PROBES = ("type_name", "kind", ')
    done = subprocess.run([sys.executable, "-c", PROBE_SCRIPT], capture_output=True, text=True, env=env, cwd=tmp_path,
                          timeout=120)
    assert "answered: float" in done.stdout, done.stdout + done.stderr  # the grader's proxy asks it in the sandbox


@pytest.mark.slow
@pytest.mark.usefixtures("sandbox_required")
def test_a_limit_set_in_assignment_toml_needs_only_the_settings_the_recipe_names(tmp_path):
    steps = recipe("Add a per-submission limit")
    assert "`LimitsSettings`" in steps and "`LimitsSettings.sandbox_limits`" in steps
    copy, env = scratch_package(tmp_path)
    settings = copy / "autograder" / "course" / "settings.py"
    memory = '    memory_mb: int | None = setting('
    edit(settings, memory, '    max_file_mb: int | None = setting(None, "megabytes", "Any one file, in MB.",'
                           ' "max_file_mb = 16")\n' + memory)
    converted = '        return limits\n'
    edit(settings, converted, '        if self.max_file_mb is not None:\n'
                              '            limits["max_file_bytes"] = int(self.max_file_mb) * 2**20\n' + converted)
    course = new_course(tmp_path)
    toml = course / "exercises" / ASSIGNMENT / "assignment.toml"
    toml.write_text(toml.read_text() + "\n[limits]\nmax_file_mb = 1\n")
    (tmp_path / "in").mkdir()
    write(tmp_path / "in", "ada", append_to_first_answer(example("ada"), "open('big.bin', 'wb').write(bytes(2 * 2**20))"))
    done = cli("grade", ASSIGNMENT, tmp_path / "in", "--course", course, env=env, cwd=tmp_path)
    result = json.loads((course / "graded" / ASSIGNMENT / "ada.json").read_text())
    # a 2 MB file, over the 1 MB set (the sandbox's own limit is 16 MB): her first answer's cell stops there
    assert result["extra_data"]["status"] == "graded", done.stdout + done.stderr
    assert [error["cell"] for error in result["extra_data"]["cell_errors"]] == ["ex1_answer"]
    assert "File too large" in result["extra_data"]["cell_errors"][0]["error"]
