"""Which files are whose: submissions as they come from an LMS, nbgrader or a folder of notebooks.

`discover(paths, assignment)` reads what the TA names (notebooks, folders, zips) and says
which notebook of each student is graded (`Intake.submissions`), what became of every
other file it saw (`Intake.rows`), and what a person must look at (`Intake.problems`):
a file whose owner cannot be told, a file that is not a notebook, a zip that cannot be
unpacked, a student the roster does not know. Nothing it sees is dropped in silence.

One student, one notebook: of several uploads of the same file (Canvas's "name-1.ipynb",
a browser's "name (1).ipynb") the newest counts and the others are recorded as replaced;
of several different notebooks, the one named after the assignment (else the shortest
name) is graded and the student is told which.
"""
import os
from dataclasses import dataclass, field, replace
from pathlib import Path

from autograder.course import CourseError
from autograder.grading.notebook import Submission
from autograder.runs.intake.archives import DONE, ArchiveError, is_zip, unpack
from autograder.runs.intake.identities import Identities
from autograder.runs.intake.layouts import NamedPattern, readers
from autograder.untrusted import student_id as safe_student_id
from autograder.untrusted import visible

MAX_FILES = 50_000  # files looked at under one folder the TA names
MAX_DEPTH = 6
# What nbgrader, Jupyter and an OS put beside submissions, no one's work. Any other name, a dot-name
# included (nbgrader takes `.batch` for a student id), is read like the rest.
IGNORED_NAMES = {"timestamp.txt", ".DS_Store", "Thumbs.db", "desktop.ini"}
IGNORED_FOLDERS = {"__MACOSX", ".ipynb_checkpoints", "__pycache__", ".git"}
KINDS = {".py": "a Python file", ".zip": "a zip file", ".pdf": "a PDF", ".html": "a web page",
         ".txt": "a text file", ".docx": "a Word document", ".json": "a JSON file"}


@dataclass
class Row:
    """One file the intake saw and what became of it (the --dry-run table, intake.csv)."""

    student_id: str  # "" when nobody's
    file: str
    layout: str  # the reader that recognised it, or ""
    lms_id: str = ""
    name: str = ""
    outcome: str = ""  # "graded", "replaced by a newer upload (...)", "not graded: ...", a problem


@dataclass
class Intake:
    submissions: list = field(default_factory=list)  # Submission, one per student, by id
    rows: list = field(default_factory=list)  # Row, for every file seen
    problems: list = field(default_factory=list)  # (file or student, what a person must look at)


def discover(paths, assignment, roster=None, pattern=None, unpack_to=None):
    """An Intake of `paths` (notebooks, folders, zips) for the assignment named `assignment`.

    `roster`: {student id: row} (outputs/lms.py read_roster) to map LMS ids; `pattern`: the TA's
    regular expression for other names (layouts.NamedPattern); `unpack_to`: where zips are
    unpacked (needed only when a zip is named). A path that does not exist is a CourseError:
    nothing is graded from a mistyped command."""
    if pattern:
        NamedPattern(pattern)  # a bad expression stops here, before anything is read
    intake, found = Intake(), []
    for raw in paths:
        path = Path(raw).absolute()  # results name their file: later commands may run from elsewhere
        if not path.exists() and not path.is_symlink():
            raise CourseError(f"{raw} does not exist: name the submissions (notebooks, folders or zips) to grade")
        found += _read_path(path, assignment, pattern, unpack_to, intake)
    identities = Identities(roster)
    identities.assign(found)
    intake.problems += identities.problems
    _choose(found, assignment, intake, unpack_to)
    if not intake.submissions and not intake.problems:
        intake.problems.append(("", f"no submissions were found in {', '.join(str(p) for p in paths)}"))
    return intake


def _read_path(path, assignment, pattern, unpack_to, intake):
    """[Found] for one path the TA named; unrecognised files become Rows and problems."""
    if path.is_file() and is_zip(path):
        folder = _unpacked(path, path.name, unpack_to, intake)
        return [] if folder is None else _walk(_inside(folder), assignment, pattern, intake, shown=path.name)
    if path.is_dir():
        if (path / "extracted").is_dir():  # nbgrader zip_collect's downloaded/<assignment>/
            return _walk(path / "extracted", assignment, pattern, intake)
        if (path / "archive").is_dir():
            found = []
            for archive in sorted((path / "archive").iterdir()):
                folder = _unpacked(archive, f"archive/{archive.name}", unpack_to, intake) if is_zip(archive) else None
                found += [] if folder is None else _walk(_inside(folder), assignment, pattern, intake,
                                                         shown=f"archive/{archive.name}")
            return found
        return _walk(path, assignment, pattern, intake)
    # one file: the most specific reading of its path wins (nbgrader's tree, a Moodle folder, its name)
    for depth in (3, 2, 1):
        parts = path.parts[-depth:]
        if len(parts) == depth:
            item = _recognise(parts, path, str(path), readers(assignment, path.parents[depth - 1], pattern))
            if item is not None:
                return [item]
    return [_unrecognised(path, str(path), intake, pattern)]


def _unpacked(archive, shown, unpack_to, intake):
    if unpack_to is None:
        raise ValueError("discover() needs unpack_to to unpack a zip")
    try:
        folder, skipped = unpack(archive, unpack_to)
    except ArchiveError as error:
        intake.problems.append((shown, f"this zip was not unpacked: {error}; nothing in it was graded"))
        intake.rows.append(Row("", shown, "", outcome=f"not unpacked: {error}"))
        return None
    for member, why in skipped:
        intake.problems.append((f"{shown}: {member}", f"not unpacked: {why}"))
        intake.rows.append(Row("", f"{shown}: {member}", "", outcome=f"not unpacked: {why}"))
    return folder


def _inside(folder):
    """An unpacked zip's folder, or the one folder it holds when it holds nothing else."""
    entries = [p for p in folder.iterdir() if p.name != DONE and p.name not in IGNORED_FOLDERS | IGNORED_NAMES]
    return entries[0] if len(entries) == 1 and entries[0].is_dir() else folder


def _walk(folder, assignment, pattern, intake, shown=""):
    """[Found] for every file under `folder` (links and what an OS adds left out)."""
    found, count, known = [], 0, readers(assignment, folder, pattern)
    for root, folders, files in os.walk(folder):
        here = Path(root)
        depth = len(here.relative_to(folder).parts)
        folders[:] = sorted(f for f in folders if f not in IGNORED_FOLDERS)
        for link in [f for f in folders if (here / f).is_symlink()]:  # os.walk would pass it by in silence
            label = "/".join(filter(None, (shown, *(here / link).relative_to(folder).parts)))
            intake.problems.append((label, "a link to a folder, not a folder: not read"))
            intake.rows.append(Row("", label, "", outcome="not read: a link to a folder"))
            folders.remove(link)
        if depth >= MAX_DEPTH and folders:  # deeper than any layout: said, not read
            deep = "/".join(filter(None, (shown, *here.relative_to(folder).parts)))
            intake.problems.append((deep, f"holds folders more than {MAX_DEPTH} levels down, which were not read"))
            folders[:] = []
        for name in sorted(files):
            if name in IGNORED_NAMES or name == DONE or name.startswith("._"):  # ._x: a Mac's resource fork of x
                continue
            count += 1
            if count > MAX_FILES:
                intake.problems.append((str(folder), f"holds more than {MAX_FILES:,} files: only the first were read"))
                return found
            path = here / name
            parts = path.relative_to(folder).parts
            label = "/".join(filter(None, (shown, *parts))) if shown else "/".join(parts)
            if path.is_symlink():
                intake.problems.append((label, "a link, not a file: not graded"))
                intake.rows.append(Row("", label, "", outcome="not graded: a link, not a file"))
                continue
            item = _recognise(parts, path, label, known)
            found.append(item if item is not None else _unrecognised(path, label, intake, pattern))
    return [item for item in found if item is not None]


def _recognise(parts, path, label, known):
    """The Found the first of `known` (layouts.readers) makes of the file, or None."""
    for reader in known:
        item = reader.read(parts, path, label)
        if item is not None:
            return item
    return None


def _unrecognised(path, label, intake, pattern):
    """A file nobody's layout recognises: a Row and a problem, never silence."""
    if path.suffix.lower() == ".ipynb":
        why = ("cannot tell whose notebook this is: its name is not Canvas's, Moodle's or nbgrader's, nor"
               " <student id>.ipynb in the folder named" + ("" if pattern else " (--pattern REGEX reads other names)"))
    else:
        why = f"not a notebook ({_kind(path)}) and not anyone's by its name: not graded"
    intake.problems.append((label, why))
    intake.rows.append(Row("", label, "", outcome=why))
    return None


def _kind(path):
    return KINDS.get(path.suffix.lower(), f"a {path.suffix} file" if path.suffix else "a file without an extension")


def _choose(found, assignment, intake, unpack_to=None):
    """One Submission per student: their newest upload of the notebook that counts. A student who
    handed in no notebook but a zip has the notebooks in it read, as nbgrader's zip_collect would."""
    by_student = {}
    for item in found:
        by_student.setdefault(item.student_id, []).append(item)
    for student, items in sorted(by_student.items()):
        notebooks = [item for item in items if item.is_notebook]
        others = [item for item in items if not item.is_notebook]
        if not notebooks and unpack_to is not None and any(is_zip(item.path) for item in others):
            notebooks = _from_zips([item for item in others if is_zip(item.path)], unpack_to, intake)
            others = [item for item in others if not is_zip(item.path)]
        if not notebooks:
            listed = ", ".join(f"{visible(item.upload or item.path.name, 80)} ({_kind(item.path)})" for item in others)
            intake.problems.append((student, f"handed in no notebook, only {listed}: not graded (ask for the .ipynb)"))
            for item in others:
                intake.rows.append(_row(item, "not graded: not a notebook"))
            continue
        chosen, replaced, ignored = _newest(notebooks, assignment)
        submission = _submission(chosen, replaced, ignored)
        intake.submissions.append(submission)
        intake.rows.append(_row(chosen, "graded" + (f" as {submission.student_id}" if submission.renamed else "")
                                + (" (unpacked from their zip)" if chosen.from_zip else "")))
        for item in replaced:
            intake.rows.append(_row(item, f"replaced by a newer upload ({visible(chosen.path.name, 120)})"))
        for item in ignored:
            intake.rows.append(_row(item, f"not graded: {visible(chosen.path.name, 120)} was graded instead"))
        for item in others:
            intake.rows.append(_row(item, f"not graded: not a notebook ({_kind(item.path)})"))


def _from_zips(zips, unpack_to, intake):
    """The notebooks in a student's own zips (Found, theirs), unpacked with the bounds of an LMS's zip
    (archives.unpack: members, sizes, links, names); every other file in them becomes a Row."""
    found = []
    for item in zips:
        folder = _unpacked(item.path, item.shown, unpack_to, intake)
        if folder is None:
            intake.rows.append(_row(item, "not graded: the zip could not be unpacked"))
            continue
        inside = []
        for path in sorted(folder.rglob("*")):
            parts = path.relative_to(folder).parts
            if (path.is_dir() or path.name == DONE or any(part in IGNORED_FOLDERS for part in parts)
                    or path.name in IGNORED_NAMES or path.name.startswith("._")):
                continue
            member = "/".join(parts)
            if path.is_symlink() or path.suffix.lower() != ".ipynb" or len(inside) >= MAX_FILES:
                why = "a link" if path.is_symlink() else _kind(path)
                intake.rows.append(Row(item.student_id, f"{item.shown}: {member}", item.layout, outcome=f"not graded: {why}"))
                continue
            inside.append(replace(item, path=path, shown=f"{item.shown}: {member}", upload=path.name,
                                  from_zip=f"{item.upload or item.path.name}: {member}"))
        if not inside:
            intake.rows.append(_row(item, "not graded: no notebook in this zip"))
        found += inside
    return found


def _newest(notebooks, assignment):
    """(the notebook graded, [older uploads of it], [other notebooks of the student])."""
    uploads = {}
    for item in notebooks:  # uploads of the same file, by its name without a resubmission number
        uploads.setdefault((item.layout, item.upload.lower()), []).append(item)
    latest = []
    replaced = []
    for same in uploads.values():
        same.sort(key=_age)
        latest.append(same[-1])
        replaced += same[:-1]
    latest.sort(key=lambda item: (Path(item.upload).stem != assignment and item.path.stem != assignment,
                                  len(item.path.name), str(item.path)))
    return latest[0], replaced, latest[1:]


def _age(item):
    """Newer sorts later: the layout's own order (Canvas's attachment ids grow), then the file's time."""
    try:
        modified = item.path.stat().st_mtime
    except OSError:
        modified = 0.0
    return (item.order, modified, str(item.path))


def _row(item, outcome):
    lms_id = item.lms.get("canvas_id") or item.lms.get("moodle_participant") or ""
    return Row(item.student_id, item.shown, item.layout, lms_id, item.name, outcome)


def _submission(chosen, replaced, ignored):
    """A Submission whose id is safe as a file name, in a terminal and in the gradebook: a
    name that starts with a dot (`.batch` would be written over the batch's own .batch.json),
    holds control characters or is too long is graded under a safe id, and says why."""
    student, renamed = safe_student_id(chosen.student_id)
    lms = {**chosen.lms, **({"lms_name": chosen.name} if chosen.name else {})}
    return Submission(student, chosen.path, ignored=[str(item.path) for item in ignored], renamed=renamed,
                      replaced=[item.path.name for item in replaced], lms=lms, submitted_at=chosen.submitted_at,
                      layout=chosen.layout, from_zip=chosen.from_zip)
