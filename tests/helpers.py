"""Build submissions for grading tests: the release, filled in, with edits and extra cells."""
import os
import secrets
import subprocess
import sys

import nbformat

from autograder.course import PACKAGE_CHECKOUT, Course, copy_course
from autograder.authoring.examples import examples, filled_notebook
from autograder.grading.sandbox.process import RUN_ID

# This test session's run id, inherited by every grader it starts and carried by their
# bubblewrap processes: the tests count and stop only their own sandboxes (sandbox_processes).
os.environ.setdefault(RUN_ID, f"tests-{os.getpid()}-{secrets.token_hex(4)}")

ASSIGNMENT = "causal_attention"
COURSE = Course(PACKAGE_CHECKOUT)  # the course bundled with the package
ROOT = COURSE.root


def assignment_of(course=ROOT, name=ASSIGNMENT):
    """The `Assignment` called `name` in the course folder `course`."""
    return Course(course).assignment(name)


EXAMPLES = examples(assignment_of())
# What the example students of causal_attention score, whatever the seed: ada all right; ben with
# softmax over dim=1 in Ex3 and sqrt(d_out) per head in Ex6 (so his variables of Exercises 4, 5
# and 7, made with those classes, are wrong too); cy; dee's untouched release.
SCORES = {"ada": 26.0, "ben": 15.47, "cy": 15.66, "dee": 0.0}


def make_notebook(edits=None, after=None, untouched=False, assignment=ASSIGNMENT):
    """A submission: `edits` as in examples.toml, plus `after` = {grade id: extra code cell}."""
    found = assignment_of(ROOT, assignment)
    release = nbformat.read(found.release_notebook, as_version=4)
    nb = release if untouched else filled_notebook(release, found, edits or {})
    for grade_id, code in (after or {}).items():
        index = next(i for i, c in enumerate(nb.cells) if c.metadata.get("nbgrader", {}).get("grade_id") == grade_id)
        nb.cells.insert(index + 1, nbformat.v4.new_code_cell(code))
    return nb


CRASHES = {  # an answer cell that raises before it defines its class (fay's notebook)
    "causal_attention": {"ex5_answer": [
        ("class MultiHeadAttention", "raise RuntimeError('my notebook stops here')\nclass MultiHeadAttention")]},
    "self_attention": {"ex4_answer": [
        ("class SelfAttention_v1", "raise RuntimeError('stop')\nclass SelfAttention_v1")]},
}


def crashing_notebook(assignment=ASSIGNMENT):
    """A submission whose answers are right but one, which raises half-way (see CRASHES)."""
    return make_notebook(CRASHES[assignment], assignment=assignment)


def example(student):
    edits = EXAMPLES[student]
    return make_notebook(untouched=True) if edits is None else make_notebook(edits)


def append_to_first_answer(notebook, code):
    """A copy of `notebook` whose first code answer cell ends with `code`. A comment gives a
    submission answers of its own with the same behaviour (identical answers are graded once, see
    runs/identical.py); other code adds behaviour (a slow, crashing or hostile answer)."""
    import copy

    notebook = copy.deepcopy(notebook)
    cell = next(c for c in notebook.cells  # a code cell: markdown answers are not run, so not in the key
                if c.cell_type == "code" and c.metadata.get("nbgrader", {}).get("solution"))
    cell.source = cell.source.rstrip("\n") + "\n" + code
    return notebook


def make_result(student, cells=(), status="graded", *, score=None, fraction=None, assignment=ASSIGNMENT, **fields):
    """A record.Result for `student`. `cells`: CellScores, (grade id, score, max score) tuples, or
    {grade id: max score} with `fraction` of each earned (each cell rounded as grading rounds).
    `score` defaults to the cells' total (with a fraction, the unrounded one); any other
    Result field by name."""
    from autograder.record import CellScore, Result

    if isinstance(cells, dict):
        fraction = 1.0 if fraction is None else fraction
        total = sum(cells.values()) * fraction
        cells = [CellScore(name, round(points * fraction, 2), points) for name, points in cells.items()]
    else:
        assert fraction is None, "a fraction goes with {grade id: max score}"
        cells = [cell if isinstance(cell, CellScore) else CellScore(*cell) for cell in cells]
        total = sum(cell.score for cell in cells)
    return Result(student_id=student, assignment=assignment, status=status,
                  score=total if score is None else score, cells=cells, **fields)


def empty_answers(nb):
    """The notebook with every answer cell left empty."""
    for cell in nb.cells:
        if cell.metadata.get("nbgrader", {}).get("solution"):
            cell.source = ""
    return nb


class ReleaseDoesNotRun(AssertionError):
    """A cell of the release stopped with an error that no unanswered stub explains."""


def answer_names(source):
    """{grade id: names its answer binds} for the answer cells of the (solved) source notebook."""
    import ast

    found = {}
    for cell in source.cells:
        meta = cell.metadata.get("nbgrader", {})
        if cell.cell_type == "code" and meta.get("solution"):
            tree = ast.parse(cell.source)
            found[meta["grade_id"]] = {node.id for node in ast.walk(tree)
                                       if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store)}
            found[meta["grade_id"]] |= {node.name for node in tree.body
                                        if isinstance(node, (ast.FunctionDef, ast.ClassDef))}
    return found


def run_release(release, answers):
    """Run the release's code cells in order, as an untouched submission runs; `answers` is
    answer_names() of the solved notebook. Returns (namespace, {cell index: the error it stopped with}).

    A cell may stop only as an unanswered release must: on a stub (NotImplementedError raised by
    an answer cell's code), or on a NameError for a name that an answer cell which stopped would
    have defined. Any other error (a syntax error, a typo in given code, a NotImplementedError
    raised outside the stubs) raises ReleaseDoesNotRun: the release itself is broken."""
    import contextlib
    import io
    import traceback

    namespace, stopped, undefined, stubs = {"__name__": "__main__"}, {}, set(), set()
    for index, cell in enumerate(release.cells):
        if cell.cell_type != "code":
            continue
        meta = cell.metadata.get("nbgrader", {})
        grade_id = meta.get("grade_id") if meta.get("solution") else None  # an answer cell's
        if grade_id:
            stubs.add(f"<cell {index}>")
        try:
            code = compile(cell.source, f"<cell {index}>", "exec")
        except SyntaxError as error:
            raise ReleaseDoesNotRun(f"cell {index} does not compile: {error}") from error
        try:
            with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
                exec(code, namespace)
        except NotImplementedError as error:
            if traceback.extract_tb(error.__traceback__)[-1].filename not in stubs:
                raise ReleaseDoesNotRun(f"cell {index} raised NotImplementedError outside a stub: {error}") from error
            stopped[index] = f"NotImplementedError: {error}"
        except NameError as error:
            if error.name not in undefined:
                raise ReleaseDoesNotRun(f"cell {index} uses {error.name!r}, which no stopped answer defines") from error
            stopped[index] = f"NameError: {error}"
        except Exception as error:
            raise ReleaseDoesNotRun(f"cell {index} raised {type(error).__name__}: {error}") from error
        else:
            continue
        if grade_id:  # an unanswered answer: what its answer would define stays undefined
            undefined |= answers.get(grade_id, set())
    return namespace, stopped


def release_namespace(assignment):
    """The namespace of the assignment's release run as an untouched submission (see run_release)."""
    release = nbformat.read(assignment.release_notebook, as_version=4)
    return run_release(release, answer_names(nbformat.read(assignment.source_notebook, as_version=4)))[0]


def submit(course, assignment, notebooks):
    """Write {student: notebook} into nbgrader's submitted/<student>/<assignment>/ tree."""
    for student, notebook in notebooks.items():
        path = course / "submitted" / student / assignment / f"{assignment}.ipynb"
        path.parent.mkdir(parents=True, exist_ok=True)
        nbformat.write(notebook, path)


def cli(*args, env=None, cwd=None, timeout=900, python=sys.executable, setup="", **options):
    """`autograder ARGS...` run by `python` in a process of its own, its output captured as text:
    the CompletedProcess. `setup` is Python code that process runs first (to shorten a wait, say);
    `options` go to subprocess.run."""
    start = ["-c", f"{setup}\nimport runpy\nrunpy.run_module('autograder.cli', run_name='__main__', alter_sys=True)"] \
        if setup else ["-m", "autograder.cli"]
    return subprocess.run([python, *start, *map(str, args)], capture_output=True, text=True,
                          env=env, cwd=cwd, timeout=timeout, **options)


def write(folder, student, nb):
    path = folder / f"{student}.ipynb"
    nbformat.write(nb, path)
    return path


def required_part(found, message):
    """`found` (a part's path), else the test skips with `message`, or under CI fails: CI installs every
    part (./setup.sh), so a missing one there is a broken setup, never a test quietly not run."""
    if found is None:
        import pytest

        if os.environ.get("CI"):
            pytest.fail(message, pytrace=False)
        pytest.skip(message)
    return found


def new_course(tmp_path):
    """tmp_path/course: a copy of the bundled course, nothing graded (its folder)."""
    return copy_course(COURSE, tmp_path / "course").root


def make_gradebook(course):
    """An empty gradebook.db in the course folder `course`, as `nbgrader generate_assignment` leaves
    it. Made in this process: a grading or nbgrader process that makes it pays 3 s for nbgrader's
    `alembic heads` (conftest.py asks that once a session)."""
    from nbgrader.api import Gradebook

    from autograder.outputs.gradebook_db import gradebook_url

    Gradebook(gradebook_url(course)).close()
    return course


def sandbox_processes():
    """Processes still running as one of the sandbox uids in a sandbox this test session started
    (another grader on the machine, or another clone's tests, has its own): each sandbox process
    descends from its bubblewrap (--die-with-parent: it ends with bubblewrap), and bubblewrap
    carries the session's run id (conftest.py), also when the grader that started it has died."""
    from autograder.grading.sandbox.isolation import SANDBOX_UID_BASE

    out = subprocess.run(["ps", "-eo", "uid=,pid=,ppid=,stat=,args="], capture_output=True, text=True).stdout
    rows = [line.split(None, 4) for line in out.splitlines()]
    parents = {int(row[1]): int(row[2]) for row in rows}
    return [f"{uid} {pid} {stat} {args}" for uid, pid, _, stat, *args in rows  # zombies (Z) are already dead
            if SANDBOX_UID_BASE <= int(uid) < SANDBOX_UID_BASE + 1000 and "Z" not in stat
            and started_here(int(pid), parents)]


def started_here(pid, parents):
    """Whether process `pid` is this session's: this process or one below it, or below a process
    that carries the session's run id (`parents`: {pid: parent pid})."""
    mark = f"{RUN_ID}={os.environ[RUN_ID]}".encode()
    seen = set()
    while pid > 1 and pid not in seen:
        seen.add(pid)
        if pid == os.getpid():
            return True
        try:
            with open(f"/proc/{pid}/environ", "rb") as handle:
                if mark in handle.read().split(b"\0"):
                    return True
        except OSError:  # ended meanwhile, or not ours to read
            pass
        pid = parents.get(pid, 0)
    return False


def scores(result):
    return result.scores


def settled_sandbox_processes(expected, timeout=10):
    """sandbox_processes() once cleanup (which runs after the grader moves on) is done."""
    import time

    deadline = time.monotonic() + timeout
    while True:
        found = sandbox_processes()
        if len(found) <= expected or time.monotonic() > deadline:
            return found
        time.sleep(0.05)


def path_without_bwrap(folder):
    """A PATH with every system command but bubblewrap: a machine where it is not installed."""
    import os

    folder.mkdir(exist_ok=True)
    for source in ("/usr/local/sbin", "/usr/local/bin", "/usr/sbin", "/usr/bin", "/sbin", "/bin"):
        if not os.path.isdir(source):
            continue
        for name in os.listdir(source):
            target = folder / name
            if name != "bwrap" and not target.exists() and not target.is_symlink():
                target.symlink_to(os.path.join(source, name))
    keep = [p for p in os.environ.get("PATH", "").split(os.pathsep)
            if p and not os.path.exists(os.path.join(p, "bwrap"))]  # Python's own bin folder, for one
    return os.pathsep.join([*keep, str(folder)])


# -- a realistic class: what a TA gets at a deadline ----------------------------------
EXTRA_ANSWERS = {  # appended to the reference's first answer cell
    "slow": "_w = torch.randn(256, 256)\nfor _ in range(1500):  # an answer that trains far too long\n"
            "    _w = (_w @ _w).tanh()\n",
    "crash": "import os\nos._exit(3)  # the process ends in the middle of the notebook\n",
    "loop": "while True:  # never returns\n    pass\n",
}


def make_realistic_class(tmp, n, order_seed=None):
    """A course whose submitted/ holds the realistic class (see the module's doc); returns
    (course, {student id: 'slow' | 'crash' | 'loop' | ''}). Students are graded in the order
    of their ids: the slow, crashing and looping answers first (the kindest place for them,
    since a long answer graded last leaves the other cores idle), or, with `order_seed`, in
    an order shuffled with that seed."""
    import random

    import nbformat

    from autograder.authoring import corpus
    from autograder.authoring.examples import filled_notebook
    from autograder.course import Course
    from autograder.grading.notebook import grade_cells

    course = new_course(tmp)
    assignment = Course(course).assignment("causal_attention")
    release = nbformat.read(assignment.release_notebook, as_version=4)
    cells = list(grade_cells(nbformat.read(assignment.source_notebook, as_version=4)))
    reference = filled_notebook(release, assignment, {})
    special = {label: append_to_first_answer(reference, code) for label, code in EXTRA_ANSWERS.items()}
    notebooks = [(label, notebook) for label, notebook in special.items()] + [("untouched", release)]
    notebooks += [(entry.name, corpus.notebook(entry, release, assignment)) for entry in corpus.load(assignment, cells)]
    notebooks = notebooks[:n]
    notebooks += [(f"reference{i}", append_to_first_answer(reference, f"# student {i}\n"))  # answers of its own
                  for i in range(n - len(notebooks))]
    if order_seed is not None:
        random.Random(order_seed).shuffle(notebooks)
    kinds = {}
    for index, (label, notebook) in enumerate(notebooks):
        student = f"s{index:03d}_{label}"
        path = course / "submitted" / student / "causal_attention" / "causal_attention.ipynb"
        path.parent.mkdir(parents=True)
        nbformat.write(notebook, path)
        kinds[student] = label if label in EXTRA_ANSWERS else ""
    return course, kinds
