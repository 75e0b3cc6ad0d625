"""Gradescope: build an autograder bundle, and grade one submission inside it.

`autograder gradescope ASSIGNMENT` writes a zip with Gradescope's two entry
points, `setup.sh` and `run_autograder`, next to this package and a course
holding just that assignment (its exercise folder, solutions, source and
release). On Gradescope the zip is unpacked to /autograder/source, which is
then the course; `run_autograder` calls
`python -m autograder.runs.gradescope ASSIGNMENT`, which grades the notebook in
/autograder/submission with the same sandboxed grader as `autograder grade`
and writes /autograder/results/results.json.
"""
import argparse
import json
import os
import shutil
import sys
import tempfile
import zipfile
from pathlib import Path

from autograder.course import PACKAGE_CHECKOUT, Course, CourseError, copy_assignment
from autograder.outputs.feedback import layout_of
from autograder.outputs.gradescope import ResultsJson
from autograder.record import INVALID, Result
from autograder.runs.batch import grade_batch
from autograder.runs.recording import read_source

PACKAGE = ("autograder", "pyproject.toml")  # this package, installed from the bundle by setup.sh

SETUP_SH = """#!/usr/bin/env bash
# Gradescope runs this once, as root, when it builds the autograder image.
set -euo pipefail
apt-get update
apt-get install -y python3.11 python3.11-venv bubblewrap
python3.11 -m venv /autograder/venv
/autograder/venv/bin/pip install --upgrade pip
# The CPU wheel of torch, pinned like everywhere else in the course.
/autograder/venv/bin/pip install --index-url https://download.pytorch.org/whl/cpu "torch==2.13.0"
/autograder/venv/bin/pip install numpy
/autograder/venv/bin/pip install -e /autograder/source
"""

RUN_AUTOGRADER = """#!/usr/bin/env bash
# Gradescope runs this for every submission: grade /autograder/submission into results.json.
set -euo pipefail
ROOT="${{AUTOGRADER_ROOT:-/autograder}}"
PYTHON="${{AUTOGRADER_PYTHON:-$ROOT/venv/bin/python}}"
cd "$ROOT/source"
exec "$PYTHON" -m autograder.runs.gradescope {assignment} --root "$ROOT"{flags}
"""


def build_bundle(assignment, target, unsafe_no_sandbox=False):
    """Write the Gradescope zip for `assignment` to `target`; return its path.

    `unsafe_no_sandbox` bakes the opt-out into run_autograder, for images where
    bubblewrap cannot create namespaces; without it such an image refuses to grade."""
    target = Path(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_name(f".{target.name}.partial")
    with tempfile.TemporaryDirectory(prefix="gradescope-bundle-") as scratch, \
            zipfile.ZipFile(partial, "w", zipfile.ZIP_DEFLATED) as bundle:
        _add_text(bundle, "setup.sh", SETUP_SH)
        _add_text(bundle, "run_autograder", RUN_AUTOGRADER.format(
            assignment=assignment.name, flags=" --unsafe-no-sandbox" if unsafe_no_sandbox else ""))
        for name in PACKAGE:
            _add_path(bundle, PACKAGE_CHECKOUT / name, name)
        course = copy_assignment(assignment, Path(scratch) / "course", grading_only=True).course.root
        for path in sorted(course.iterdir()):
            _add_path(bundle, path, path.name)
    partial.replace(target)  # an interrupted build never leaves a broken zip behind
    return target


def _add_text(bundle, name, text):
    info = zipfile.ZipInfo(name)
    info.external_attr = 0o755 << 16  # executable, as Gradescope expects
    bundle.writestr(info, text)


def _add_path(bundle, path, name):
    if path.is_dir():
        for child in sorted(path.rglob("*")):
            if child.is_file() and "__pycache__" not in child.parts:
                bundle.write(child, f"{name}/{child.relative_to(path)}")
    else:
        bundle.write(path, name)


def choose_notebook(submission_dir, assignment):
    """(the notebook to grade, the other notebooks) in a Gradescope submission folder."""
    folder = Path(submission_dir).resolve()
    notebooks = sorted(
        p for p in folder.rglob("*.ipynb")
        # a link could point at the instructor's own files; dot-files and __MACOSX are debris
        if not p.is_symlink() and folder in p.resolve().parents
        and not any(part.startswith(".") or part == "__MACOSX" for part in p.relative_to(folder).parts))
    if not notebooks:
        return None, []
    notebooks.sort(key=lambda p: (p.stem != assignment, len(p.name), str(p)))
    return notebooks[0], notebooks[1:]


def no_notebook_result(assignment, found):
    message = (f"No notebook was found in your submission. Upload your {assignment}.ipynb file"
               f" (found: {', '.join(found) or 'nothing'}).")
    return Result(student_id="", assignment=assignment, status=INVALID, output=message, notes=[message])


def submission_time(metadata_file, student):
    """({student: time}, {student: roster row with extension_hours}) from Gradescope's
    submission_metadata.json: when it was submitted, and how much later than the assignment's
    due date this student's own due date is (an extension). Empty when there is no file."""
    from autograder.runs.late import parse_time

    try:
        metadata = json.loads(Path(metadata_file).read_text())
        times = {student: parse_time(metadata["created_at"], "submission_metadata.json created_at")}
    except (OSError, ValueError, KeyError, TypeError):
        return {}, {}
    roster = {}
    try:
        due = parse_time(metadata["assignment"]["due_date"], "due_date")
        own = max(parse_time(user["assignment"]["due_date"], "due_date") for user in metadata["users"])
        if own > due:
            roster[student] = {"student_id": student, "extension_hours": str((own - due).total_seconds() / 3600)}
    except (KeyError, TypeError, ValueError):
        pass
    return times, roster


def grade_submission(name, root, unsafe_no_sandbox=False):
    """Grade root/submission into root/results/results.json; return its `record.Result`.

    Raises NoSandbox (nothing written) when there is no working sandbox and no opt-out."""
    from autograder.grading.sandbox.isolation import require_sandbox, unsafe_warning

    require_sandbox(unsafe_no_sandbox)
    root = Path(root)
    assignment = Course(root / "source").assignment(name)  # the bundle is the course
    submission = root / "submission"
    results_file = root / "results" / "results.json"
    results_file.parent.mkdir(parents=True, exist_ok=True)
    if os.geteuid() == 0:  # Gradescope runs us as root: keep the student's uid out of both
        for private in (root / "source", results_file.parent):
            os.chmod(private, 0o700)
    print(unsafe_warning() or "Grading in a bubblewrap sandbox.")
    notebook, others = choose_notebook(submission, assignment.name)
    if notebook is None:
        found = [p.name for p in submission.rglob("*") if p.is_file()] if submission.exists() else []
        output = ResultsJson(results_file)
        output.add(no_notebook_result(assignment.name, found))
        return output.written
    note = f"Graded {notebook.name}; also found {', '.join(p.name for p in others)}, not graded." if others else ""
    output = ResultsJson(results_file, layout_of(read_source(assignment)).titles, note)  # tests named as students see them
    with tempfile.TemporaryDirectory(prefix="gradescope-") as scratch:
        copy = copy_assignment(assignment, Path(scratch) / "course")
        inbox = Path(scratch) / "inbox"
        inbox.mkdir()
        shutil.copy(notebook, inbox / "submission.ipynb")
        times, roster = submission_time(root / "submission_metadata.json", "submission")
        report = grade_batch(copy, [inbox / "submission.ipynb"], [output], out_dir=Path(scratch) / "graded",
                             unsafe_no_sandbox=unsafe_no_sandbox, jobs=1, force=True, submitted_at=times, roster=roster)
    if output.written is None:
        raise RuntimeError("the grader failed: " + "; ".join(
            [note for result in report.graded for note in result.notes] + [why for _, why in report.problems]))
    return output.written


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m autograder.runs.gradescope",
                                     description="Grade a Gradescope submission (run by run_autograder).")
    parser.add_argument("assignment")
    parser.add_argument("--root", default="/autograder", help="Gradescope's /autograder folder")
    parser.add_argument("--unsafe-no-sandbox", action="store_true",
                        help="grade without bubblewrap (as a separate user) instead of refusing")
    args = parser.parse_args(argv)
    from autograder.grading.sandbox.isolation import NoSandbox
    from autograder.grading.selfcheck import PoisonedInterpreter

    try:
        result = grade_submission(args.assignment, args.root, args.unsafe_no_sandbox)
    except (NoSandbox, PoisonedInterpreter, CourseError) as refusal:
        print(f"The autograder refused to run: {refusal}", file=sys.stderr)
        return 2
    print(f"{args.assignment}: {result.score:g} points; results in {Path(args.root) / 'results' / 'results.json'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
