"""A course is a directory; an assignment is one folder in it.

    COURSE/
      nbgrader_config.py            makes COURSE an nbgrader course directory
      exercises/<assignment>/       everything about one assignment but its solution code:
        assignment.toml               title, course order, limits, sandbox settings (settings.py)
        notebook.md                   the notebook's text and the role of every cell
        checks/test_<cell>.py         hidden checks, one file per graded cell
        corpus.toml                   realistic mistakes and alternative styles
        examples.toml                 the demo's example students
        sandbox.py (optional)         resources probes may hand to student code, and
                                      a warm-up, run inside the sandbox
      solutions/<assignment>.py     the single source of the assignment's code
      source/, release/             generated nbgrader trees (never edited by hand)
      submitted/, autograded/, graded/, gradebook.db   what grading writes

The engine knows no assignment: it finds them here.
"""
import contextlib
import hashlib
import hmac
import os
import secrets
import shutil
import tomllib
from dataclasses import dataclass
from functools import cached_property, lru_cache
from pathlib import Path

from autograder.course.errors import CourseError
from autograder.course.settings import AssignmentSettings

PACKAGE_CHECKOUT = Path(__file__).resolve().parent.parent.parent
SETTINGS = "assignment.toml"


@dataclass(frozen=True)
class Course:
    root: Path

    @staticmethod
    def locate(given=None):
        """`given`; else the nearest folder at or above the current one that holds exercises/;
        else the course bundled with this package."""
        if given is not None:
            root = Path(given).resolve()
            if not root.is_dir():
                raise CourseError(f"there is no course folder {root}")
            return Course(root)
        here = Path.cwd().resolve()
        for folder in [here, *here.parents]:
            if _is_course(folder):
                return Course(folder)
        return Course(bundled_course())

    # -- assignments ----------------------------------------------------------
    def assignments(self):
        """Every assignment of the course, in course order (`order`, then name)."""
        found = [Assignment(self, path.parent.name) for path in (self.root / "exercises").glob(f"*/{SETTINGS}")]
        return sorted(found, key=lambda a: (a.order, a.name))

    def names(self):
        return [a.name for a in self.assignments()]

    def assignment(self, name):
        if not (self.root / "exercises" / name / SETTINGS).is_file():
            known = ", ".join(self.names()) or "none yet (create one with `autograder new NAME`)"
            raise CourseError(f"the course {self.root} has no assignment {name!r} (it has: {known})")
        return Assignment(self, name)

    # -- what grading writes ------------------------------------------------------
    gradebook = property(lambda self: self.root / "gradebook.db")
    submitted = property(lambda self: self.root / "submitted")
    autograded = property(lambda self: self.root / "autograded")

    def graded(self, name):
        return self.root / "graded" / name


def derive_seed(key, seed, label):
    """The seed for `label` (a check's name, "cells") from the batch's `seed`: a keyed hash (HMAC-SHA256
    with `key`, Assignment.seed_key), so knowing one derived seed, or all of them, tells nothing of the
    batch's seed or of the others. The same for the same batch: a resumed batch grades alike."""
    mac = hmac.new(key, f"{seed}:{label}".encode(), hashlib.sha256).digest()
    return int.from_bytes(mac[:4], "big") % 2**31


@dataclass(frozen=True)
class Assignment:
    course: Course
    name: str

    @property
    def folder(self):
        return self.course.root / "exercises" / self.name

    @cached_property
    def settings(self):
        """assignment.toml as read (a dict; this object's own copy), once it is known to be right:
        an unknown key or a wrong type is a CourseError naming its line. Read `config` for the
        typed values and their defaults."""
        path = self.folder / SETTINGS
        try:
            text = path.read_text()
            raw = tomllib.loads(text)
        except (OSError, tomllib.TOMLDecodeError) as error:
            raise CourseError(f"{path} cannot be read: {error}") from None
        AssignmentSettings.from_dict(raw, path, text)
        return raw

    @property
    def config(self):
        """The typed settings (autograder/course/settings.py, AssignmentSettings), from `settings`."""
        return AssignmentSettings.from_dict(self.settings, self.folder / SETTINGS)

    @property
    def title(self):
        title = self.config.title
        return self.name if title is None else title

    @property
    def order(self):
        return self.config.order

    @property
    def limits(self):
        """Grading limits in `Limits` terms (timeout seconds, memory bytes)."""
        return self.config.limits.sandbox_limits()

    @property
    def builds_on(self):
        """{graded cell: [graded cells it uses]} from `[builds_on]` (see checks/rootcause.py)."""
        table = self.config.builds_on
        unknown = sorted({cell for cell, upstream in table.items() for cell in [cell, *upstream]}
                         - set(self.grade_ids()))
        if unknown:
            raise CourseError(f"{self.folder / SETTINGS} [builds_on] names cells without checks: {', '.join(unknown)}")
        return table

    @property
    def late_settings(self):
        """The `[late]` table as written (a dict, for runs/late.py LatePolicy.from_settings), or None."""
        return self.config.late_table

    @property
    def preimport(self):
        """Modules the sandbox imports once, before it forks a child per submission."""
        return list(self.config.sandbox.preimport)

    # -- files --------------------------------------------------------------------
    notebook_text = property(lambda self: self.folder / "notebook.md")
    checks = property(lambda self: self.folder / "checks")
    corpus = property(lambda self: self.folder / "corpus.toml")
    examples = property(lambda self: self.folder / "examples.toml")

    @property
    def sandbox_code(self):
        """The assignment's sandbox-side code (resources, warm-up), or None."""
        path = self.folder / "sandbox.py"
        return path if path.is_file() else None

    solutions = property(lambda self: self.course.root / "solutions" / f"{self.name}.py")
    source_notebook = property(lambda self: self.course.root / "source" / self.name / f"{self.name}.ipynb")
    release_notebook = property(lambda self: self.course.root / "release" / self.name / f"{self.name}.ipynb")

    @property
    def warm_up_on_release(self):
        """Whether the sandbox runs the untouched release once before forking (see agent.py)."""
        return self.config.sandbox.warm_up_on_release

    def release_cells(self):
        """The release notebook's code cells, [(name, code)], as the untouched release runs them;
        [] if there is no release yet or it cannot be read."""
        import json

        try:
            notebook = json.loads(self.release_notebook.read_text())
            cells = [cell for cell in notebook["cells"] if cell.get("cell_type") == "code"]
            return [(f"release cell {index + 1}",
                     "".join(cell["source"]) if isinstance(cell["source"], list) else str(cell["source"]))
                    for index, cell in enumerate(cells)]
        except (OSError, ValueError, KeyError, TypeError):
            return []

    def sandbox_files(self):
        """{file name: bytes} the sandbox gets of this assignment: its sandbox code, its settings
        and the release's code cells (public: every student has them) to warm up on."""
        import json

        sandbox = self.config.sandbox
        settings = {"preimport": list(sandbox.preimport)}
        if sandbox.warm_up_seconds is not None:
            settings["warm_up_seconds"] = sandbox.warm_up_seconds
        files = {"settings.json": json.dumps(settings).encode()}
        if self.sandbox_code:
            files["assignment_sandbox.py"] = self.sandbox_code.read_bytes()
        if self.warm_up_on_release and (cells := self.release_cells()):
            files["release_cells.json"] = json.dumps(cells).encode()
        return files

    @cached_property
    def seed_key(self):
        """A key no student knows: the digest of the assignment's solutions. Every seed grading hands
        to student code is derived from the batch's seed with it (`derive_seed`), so none tells the
        batch's seed, or another check's. (Not of the checks: then editing a hidden check would change
        the inputs, and so the words, of every shown one.)"""
        try:
            return hashlib.sha256(b"seeds\0" + self.solutions.read_bytes()).digest()
        except OSError:
            return hashlib.sha256(b"seeds\0" + self.name.encode()).digest()

    def resources(self):
        """RESOURCES of the assignment's sandbox code, for a student answered in this process."""
        return _resources(str(self.sandbox_code)) if self.sandbox_code else {}

    def hints(self):
        """((error text, hint), ...) from hints.toml: what to tell a student whose code raised."""
        path = self.folder / "hints.toml"
        if not path.is_file():
            return ()
        try:
            hints = tomllib.loads(path.read_text()).get("hint", [])
        except tomllib.TOMLDecodeError as error:
            raise CourseError(f"{path} is not valid TOML: {error}") from None
        return tuple((hint["when"], hint.get("say", "")) for hint in hints)

    def grade_ids(self):
        """The graded cells that have hidden checks (test_<cell>.py)."""
        return sorted(p.stem.removeprefix("test_") for p in self.checks.glob("test_*.py"))


def _is_course(folder):
    """A folder with exercises/ and an nbgrader config (as `autograder init` makes), or assignments."""
    exercises = folder / "exercises"
    return exercises.is_dir() and ((folder / "nbgrader_config.py").is_file() or any(exercises.glob(f"*/{SETTINGS}")))


@lru_cache(maxsize=None)
def _resources(path):
    import runpy

    return dict(runpy.run_path(path).get("RESOURCES", {}))


def bundled_course():
    """The course this package comes with (its own checkout)."""
    if not (PACKAGE_CHECKOUT / "exercises").is_dir():
        raise CourseError("no course here: run in a course folder (one with exercises/), pass --course DIR,"
                          " or create one with `autograder init DIR`")
    return PACKAGE_CHECKOUT


GRADING_ONLY_LEAVES_OUT = ("corpus.toml", "examples.toml")  # authoring material grading never reads


def copy_assignment(assignment, target, grading_only=False):
    """target/: a course with this one assignment (config, exercise folder, solutions, source and
    release) and nothing graded. Grading there never touches the real course's outputs.
    `grading_only` leaves out the corpus and the examples (a Gradescope bundle has no use for them)."""
    target = Path(target)
    target.mkdir(parents=True, exist_ok=True)
    root = assignment.course.root
    if (root / "nbgrader_config.py").is_file():
        shutil.copy(root / "nbgrader_config.py", target)
    ignore = shutil.ignore_patterns("__pycache__")
    left_out = shutil.ignore_patterns("__pycache__", *GRADING_ONLY_LEAVES_OUT) if grading_only else ignore
    shutil.copytree(assignment.folder, target / "exercises" / assignment.name, ignore=left_out)
    (target / "solutions").mkdir(exist_ok=True)
    shutil.copy(assignment.solutions, target / "solutions")
    for part in ("source", "release"):
        if (root / part / assignment.name).is_dir():
            shutil.copytree(root / part / assignment.name, target / part / assignment.name, ignore=ignore)
    return Course(target).assignment(assignment.name)


def copy_course(course, target):
    """target/: a copy of the whole course (every assignment), nothing graded."""
    for assignment in course.assignments():
        copy_assignment(assignment, target)
    return Course(Path(target).resolve())


def utf8(text):
    """`text` as UTF-8, whatever the locale. A lone surrogate (a student's error text can hold
    one) becomes U+FFFD instead of stopping the batch with a UnicodeEncodeError."""
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError:
        return text.encode("utf-16", "surrogatepass").decode("utf-16", "replace").encode("utf-8")


def write_atomically(path, data, mode=0o666):
    """Write text or bytes to `path` through a temporary file and a rename: a reader (or a
    kill -9) never sees half a file. The temporary file's name is short whatever `path`'s
    is: a name near the file system's 255 bytes must not become one over it. `mode`: the
    file's permissions from its first byte (less the umask), 0o600 for a secret."""
    path = Path(path)
    if isinstance(data, str):
        data = utf8(data)
    temporary = path.with_name(f".{os.getpid()}-{secrets.token_hex(6)}.partial")  # threads write too
    try:
        descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)  # 0o666: as write_bytes would
        with open(descriptor, "wb") as handle:
            handle.write(data)
        os.replace(temporary, path)
    except BaseException:
        with contextlib.suppress(OSError):
            temporary.unlink()
        raise
    return path
