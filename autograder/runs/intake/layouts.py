"""Whose file is this? One small reader per place submissions come from.

Each reader looks at one file's path (relative to the folder the TA named) and says whose
it is in its own terms, or that it does not recognise it. They are tried in the order of
`readers()`; the first that recognises a file wins.

    nbgrader     submitted/<student>/<assignment>/<file>   (nbgrader collect, zip_collect's output)
    pattern      any name, read by the TA's regular expression (--pattern), as nbgrader's
                 FileNameCollector does: (?P<student_id>...) required, (?P<timestamp>...) and
                 (?P<file_id>...) optional
    canvas       <name>[_late]_<user id>_<attachment id>_<uploaded name>   (Download Submissions)
    moodle       <Full Name>_<participant id>_assignsubmission_<plugin>_/<uploaded name>, or the same
                 prefix on a flat file (Download all submissions, with or without folders)
    files        <student id>.ipynb directly in the folder
"""
import re
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from autograder.course import CourseError

# Canvas: the name part is the student's sortable name squeezed to word characters; Canvas
# inserts "late" (in either case) after it for a late submission.
CANVAS = re.compile(r"(?P<name>[^\W_]\w*?)(?:_(?P<late>late))?_(?P<user>\d+)_(?P<attachment>\d+)_(?P<file>.+)",
                    re.IGNORECASE)
# Moodle replaces "_" in names with spaces, so the first "_<digits>_assignsubmission_" ends the name.
MOODLE = re.compile(r"(?P<name>[^_]+)_(?P<participant>\d+)_assignsubmission_(?P<plugin>[a-z]+)(?:_(?P<file>.*))?")
# A resubmitted file's number: Canvas's "name-1.ipynb", a browser's "name (1).ipynb".
RESUBMITTED = re.compile(r"(?P<base>.+?)(?:-(?P<dash>\d{1,3})| \((?P<paren>\d{1,3})\))")


@dataclass
class Found:
    """One file, and whose it is as far as its layout tells."""

    path: Path  # the file (absolute; inside an unpacked zip, the unpacked copy)
    shown: str  # how the TA knows it: its path from what they named
    layout: str  # the reader that recognised it
    key: str  # whose it is, in the layout's terms: the LMS's own id, or a student id
    name: str = ""  # the LMS's name for the student, when it gives one
    lms: dict = field(default_factory=dict)  # LMS identities worth keeping: {"canvas_id": "12345"}
    upload: str = ""  # the uploaded file's own name, without the LMS's prefix and a resubmission number
    order: tuple = ()  # newer sorts later: (Canvas attachment id, resubmission number)
    submitted_at: str = ""  # a time the layout gives (a pattern's timestamp)
    student_id: str = ""  # ours, once identities.py has mapped `key`
    from_zip: str = ""  # "<zip>: <member>" for a notebook found in the student's own zip

    @property
    def is_notebook(self):
        return self.path.suffix.lower() == ".ipynb"


def split_resubmission(filename):
    """(the file name without a resubmission number, that number or 0)."""
    path = PurePosixPath(filename)
    match = RESUBMITTED.fullmatch(path.stem)
    if not match:
        return path.name, 0
    return match["base"] + path.suffix, int(match["dash"] or match["paren"])


class NbgraderTree:
    """nbgrader's submitted/<student>/<assignment>/<file>; also one student's folder named alone."""

    layout = "nbgrader"

    def __init__(self, assignment, folder):
        self.assignment, self.folder = assignment, folder

    def read(self, parts, path, shown):
        if len(parts) == 3 and parts[1] == self.assignment:
            student = parts[0]
        elif len(parts) == 2 and parts[0] == self.assignment and self.folder.name:
            student = self.folder.name  # COURSE/submitted/<student> itself
        else:
            return None
        return Found(path, shown, self.layout, key=student, upload=parts[-1])


class NamedPattern:
    """The TA's regular expression, matched as nbgrader's FileNameCollector matches it: from the
    start of the path relative to the folder named (then of the file name alone)."""

    layout = "pattern"

    def __init__(self, text):
        try:
            self.regex = re.compile(text)
        except re.error as error:
            raise CourseError(f"--pattern {text!r} is not a regular expression: {error}") from None
        if "student_id" not in self.regex.groupindex:
            raise CourseError(f"--pattern {text!r} needs a (?P<student_id>...) group: the part of each file's"
                              " name that says whose it is")

    def read(self, parts, path, shown):
        relative = "/".join(parts)
        match = self.regex.match(relative) or self.regex.match(parts[-1])
        if not match or not match["student_id"]:
            return None
        groups = match.groupdict()
        name = " ".join(filter(None, (groups.get("first_name"), groups.get("last_name"))))
        upload = (groups.get("file_id") or parts[-1]) + ("" if groups.get("file_id") is None else path.suffix)
        return Found(path, shown, self.layout, key=match["student_id"], name=name, upload=upload,
                     submitted_at=groups.get("timestamp") or "")


class Canvas:
    """Canvas's Download Submissions: the student's Canvas user id is in every file's name."""

    layout = "canvas"

    def read(self, parts, path, shown):
        match = CANVAS.fullmatch(parts[-1])
        if not match:
            return None
        upload, number = split_resubmission(match["file"])
        lms = {"canvas_id": match["user"], **({"canvas_late": "yes"} if match["late"] else {})}
        return Found(path, shown, self.layout, key=match["user"], name=match["name"], lms=lms, upload=upload,
                     order=(int(match["attachment"]), number))


class Moodle:
    """Moodle's Download all submissions: a folder (or a prefix) per student, with the full name and
    the participant number, which Moodle gives per assignment. `folders_only`: the folder form
    alone, which is tried before nbgrader's tree: a student's own folder named after the assignment
    inside their Moodle folder is theirs, not a second student's."""

    layout = "moodle"

    def __init__(self, folders_only=False):
        self.folders_only = folders_only

    def read(self, parts, path, shown):
        folder = MOODLE.fullmatch(parts[0]) if len(parts) >= 2 else None
        if folder and not folder["file"]:
            upload = "/".join(parts[1:])
        else:
            folder = MOODLE.fullmatch(parts[-1]) if len(parts) == 1 and not self.folders_only else None
            if not folder or not folder["file"]:
                return None
            upload = folder["file"]
        upload, number = split_resubmission(upload)
        name = " ".join(folder["name"].split())
        return Found(path, shown, self.layout, key=name, name=name,
                     lms={"moodle_participant": folder["participant"]}, upload=upload, order=(number,))


class PlainFiles:
    """A folder of <student id>.ipynb (the id is the file's name)."""

    layout = "files"

    def read(self, parts, path, shown):
        if len(parts) != 1 or path.suffix.lower() != ".ipynb":
            return None  # anything else directly in the folder is named, not taken for a student's
        return Found(path, shown, self.layout, key=path.stem, upload=path.name)


def readers(assignment, folder, pattern=None):
    """The readers to try on each file under `folder`, in order. Moodle's folders come first: what
    is inside one is that student's, whatever its own folders are called. A pattern the TA gives
    comes before the other LMS layouts: it is their word on these names."""
    return [Moodle(folders_only=True), NbgraderTree(assignment, Path(folder)),
            *([NamedPattern(pattern)] if pattern else []), Canvas(), Moodle(), PlainFiles()]
