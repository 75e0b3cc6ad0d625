"""The result record: what grading one submission produced, and the one place it is read and written.

Grading builds a `Result`; grades.csv, the gradebook, feedback pages, the class
report, Gradescope's results.json and resuming a batch all read it back through
this module. On disk a result is a JSON file in Gradescope's results.json schema
(with our details under `extra_data`), so it can be uploaded as it is; nothing
outside this module needs to know that layout.

Every write is atomic (`write_atomically`): a batch killed at any point leaves
either the previous file or the new one, never half of one.
"""
import json
import re
from dataclasses import dataclass, field
from pathlib import Path

from autograder.course import write_atomically

GRADED, INVALID, ERROR = "graded", "invalid", "error"  # error: the grader's fault, retried next run
FINISHED = (GRADED, INVALID)  # a result that a rerun keeps


@dataclass
class CheckOutcome:
    """One hidden check on one case: did it pass, and what the student reads if not."""

    name: str
    description: str
    passed: bool
    weight: float = 1.0
    message: str = ""
    # For the TA and the instructor, never the student: where and why the check itself broke
    # ("<check file>:<line>: NameError: ...", checks.outcomes.crash_of); "" when it ran. The
    # student's message only says that it could not run. See `Result.check_crashes`.
    crash: str = ""
    # It fails as a consequence of the mistake its cell's feedback names ("above") or of an exercise
    # it builds on ("Exercise 3"): the feedback lists it under that cause, not as a failure of its own.
    because: str = ""
    # A diagnosis: the names of the error model's mistakes it named, for the instructor's tools
    # (`autograder validate` repairs them in the student's code, checks/repair.py).
    cause: list = field(default_factory=list)


@dataclass
class CellScore:
    """The points for one graded cell (an nbgrader grade_id) and the checks behind them."""

    name: str
    score: float
    max_score: float
    output: str = ""  # the feedback text for this cell
    checks: list = field(default_factory=list)  # CheckOutcome
    # None of its answer cells differs from the release's stub (grading/notebook.py `unanswered`,
    # decided on the grader's side): a student reads one line, "not answered yet", and none of its
    # checks or tracebacks; the checks stay here for the TA.
    unanswered: bool = False

    @property
    def passed(self):
        return self.score == self.max_score


@dataclass
class CellError:
    """An exception a cell of the notebook raised while it ran."""

    cell: str
    error: str


@dataclass
class View:
    """What a student may see of a result at one visibility level below its highest (0: before the
    due date; 1: after it, when some checks are the TA's alone; course/visibility.py): the checks
    up to that level, each message, consequence and withheld point judged from them alone, as if
    the others never ran, and the notes as they stood then. `cells` are CellScores whose points
    are the shares of these checks in their cell."""
    level: int
    cells: list = field(default_factory=list)
    notes: list = field(default_factory=list)


def cell_in_words(name, capital=False):
    """A notebook cell's name as words: "cell ex3_answer"; a cell the student added is already
    named "cell 4" (grading/notebook.py), and stays "cell 4", never "cell cell 4"."""
    return ("Cell " if capital else "cell ") + (name[len("cell "):] if name.startswith("cell ") else name)


@dataclass
class Result:
    student_id: str
    assignment: str
    status: str  # GRADED, INVALID or ERROR
    score: float = 0.0
    cells: list = field(default_factory=list)  # CellScore, in the notebook's order
    output: str = ""  # the summary a student reads first
    notes: list = field(default_factory=list)  # things a person should know (tampering, crashes)
    cell_errors: list = field(default_factory=list)  # CellError
    path: str = ""  # the submitted file
    notebook_sha256: str = ""
    answers_key: str = ""  # what was run and how (see runs/identical.py): equal keys, equal results
    reused: bool = False  # copied from an identical answer's result instead of run again
    # Why identical answers in a later batch may be given this result without running them
    # ("" = they may not: its process died, was killed or timed out; see runs/identical.py).
    reusable: str = ""
    seed: int = None
    submitted_at: str = ""  # ISO time the submission was handed in, when known
    # Points deducted for lateness: out of `score`, which stops at 0, and out of the final grade
    # (outputs/final.py), which takes the rest from the written answers' points.
    late_penalty: float = 0.0
    late_note: str = ""  # why, in words; "" when on time or with no late policy
    sandbox: str = ""  # "bubblewrap", "none" (--unsafe-no-sandbox), "" (never ran)
    # The LMS's identities of the student, as the intake read them from where the file came
    # from ({"canvas_id": "12345", "lms_name": "doejane"}): the LMS files use them without a roster.
    lms: dict = field(default_factory=dict)
    execution_time: float = 0.0
    timings: dict = field(default_factory=dict)  # seconds per step, for benchmarks
    # Checks hidden from students at some time (course/visibility.py): the split into levels it was
    # graded with (`Visibility.key()`, "" when nothing was hidden), the levels its checks had, and
    # a View for each level below the highest (the whole result is the highest).
    visibility: str = ""
    levels: list = field(default_factory=list)
    views: list = field(default_factory=list)
    # The sanitized notebook it was graded from, on its way to the outputs that want it
    # (autograded/); never written to the result file, and dropped once the outputs have it.
    graded_notebook: dict = field(default=None, repr=False, compare=False)

    @property
    def raw_score(self):
        """The points before any late penalty: the cells' (the score stops at 0, the penalty may not)."""
        if self.cells:
            return round(sum(cell.score for cell in self.cells), 2)
        return round(self.score + self.late_penalty, 2)

    @property
    def max_score(self):
        return sum(cell.max_score for cell in self.cells)

    @property
    def scores(self):
        """{grade_id: points}"""
        return {cell.name: cell.score for cell in self.cells}

    @property
    def finished(self):
        return self.status in FINISHED

    @property
    def unsandboxed(self):
        return self.sandbox == "none"

    def add_note(self, note):
        self.notes.append(note)
        self.output += f"\nNote: {note}"

    def failed_checks(self):
        """(cell name, CheckOutcome) for every check that failed with a message."""
        return [(cell.name, check) for cell in self.cells for check in cell.checks
                if not check.passed and check.message]

    def check_crashes(self):
        """(cell name, check name, crash) for every hidden check that broke on this submission
        instead of judging it (a typo in the check: `CheckOutcome.crash`). For TAs only: the
        student's page says only that the check could not run."""
        return [(cell.name, check.name, check.crash) for cell in self.cells for check in cell.checks if check.crash]

    # -- Gradescope's results.json schema, our on-disk format ------------------------------
    def view(self, level):
        """The View at `level`, or None (the whole result is the view at its highest level)."""
        return next((view for view in self.views if view.level == level), None)

    def to_json(self, titles=None):
        """A dict in Gradescope's schema. `titles` ({grade_id: title}) names the tests as
        students see them on Gradescope; the grade id is then kept in each test's extra_data."""
        titles = titles or {}
        tests = _tests_json(self.cells, titles)
        extra = {"student_id": self.student_id, "path": self.path, "assignment": self.assignment,
                 "status": self.status, "seed": self.seed, "sandbox": self.sandbox, "notes": list(self.notes),
                 "cell_errors": [vars(error).copy() for error in self.cell_errors],
                 "notebook_sha256": self.notebook_sha256, "answers_key": self.answers_key, "reused": self.reused,
                 "reusable": self.reusable,
                 "submitted_at": self.submitted_at, "late_penalty": self.late_penalty, "late_note": self.late_note,
                 "lms": dict(self.lms), "timings": dict(self.timings)}
        if self.visibility:
            extra["visibility"] = {"key": self.visibility, "levels": list(self.levels),
                                   "views": [{"level": view.level, "notes": list(view.notes),
                                              "tests": _tests_json(view.cells, {})} for view in self.views]}
        return {"score": self.score, "execution_time": self.execution_time, "output": self.output,
                "visibility": "visible", "stdout_visibility": "hidden", "tests": tests, "extra_data": extra}

    @classmethod
    def from_json(cls, data):
        """The record back from `to_json`'s dict; ValueError when it is not one."""
        try:
            extra = data["extra_data"]
            cells = _cells_of(data.get("tests", []))
            hiding = extra.get("visibility") or {}
            views = [View(int(view["level"]), _cells_of(view.get("tests", [])), [str(n) for n in view.get("notes", [])])
                     for view in hiding.get("views", [])]
            return cls(student_id=str(extra["student_id"]), assignment=str(extra.get("assignment", "")),
                       status=str(extra["status"]), score=float(data["score"]), cells=cells,
                       output=data.get("output", ""), notes=list(extra.get("notes", [])),
                       cell_errors=[CellError(**error) for error in extra.get("cell_errors", [])],
                       path=extra.get("path", ""), notebook_sha256=extra.get("notebook_sha256", ""),
                       answers_key=str(extra.get("answers_key", "")), reused=bool(extra.get("reused", False)),
                       reusable=str(extra.get("reusable", "")),
                       submitted_at=str(extra.get("submitted_at", "")),
                       late_penalty=float(extra.get("late_penalty", 0.0)), late_note=str(extra.get("late_note", "")),
                       seed=extra.get("seed"), sandbox=extra.get("sandbox", ""),
                       lms={str(k): str(v) for k, v in dict(extra.get("lms") or {}).items()},
                       execution_time=float(data.get("execution_time", 0.0)), timings=dict(extra.get("timings", {})),
                       visibility=str(hiding.get("key", "")), levels=[int(n) for n in hiding.get("levels", [])],
                       views=views)
        except (KeyError, TypeError, AttributeError, ValueError) as error:
            raise ValueError(f"not a result record: {error}") from None

    def copy_for(self, student_id, path, notebook_sha256):
        """This result for another submission with the same answers (`reused`)."""
        copy = Result.from_json(self.to_json())
        copy.output = copy.output.replace(f"{self.student_id}: ", f"{student_id}: ", 1)
        copy.student_id, copy.path, copy.notebook_sha256 = student_id, str(path), notebook_sha256
        copy.reused, copy.execution_time, copy.timings = True, 0.0, {}
        copy.lms = {}  # the other student's own identities are the batch's to add (runs/batch.py)
        return copy

    def without_timings(self):
        """Everything but the wall-clock measurements: equal whenever the same notebook
        is graded with the same seed."""
        stable = self.to_json()
        stable.pop("execution_time")
        stable["extra_data"].pop("timings")
        return stable


def _tests_json(cells, titles):
    tests = []
    for cell in cells:
        test = {"name": titles.get(cell.name, cell.name), "score": cell.score, "max_score": cell.max_score,
                "status": "passed" if cell.passed else "failed", "output": cell.output,
                "visibility": "visible",
                "extra_data": {"checks": [_check_json(check) for check in cell.checks]}}
        if cell.unanswered:
            test["extra_data"]["unanswered"] = True
        if titles:
            test["extra_data"]["grade_id"] = cell.name
        tests.append(test)
    return tests


def _cells_of(tests):
    return [CellScore(name=test.get("extra_data", {}).get("grade_id", test["name"]),
                      score=float(test["score"]), max_score=float(test["max_score"]), output=test.get("output", ""),
                      checks=[CheckOutcome(**check) for check in test.get("extra_data", {}).get("checks", [])],
                      unanswered=test.get("extra_data", {}).get("unanswered") is True)
            for test in tests]


def _check_json(check):
    """A CheckOutcome as JSON; `crash`, `because` and `cause` only when set (most checks have none)."""
    data = vars(check).copy()
    for key in ("crash", "because", "cause"):
        if not data[key]:
            del data[key]
    return data


def broken_checks(results, shown=8):
    """The hidden checks that broke (`Result.check_crashes`) across `results`, each crash once:
    [("", one line for the TA)], in the form of a batch's problems (runs/batch.py), naming the
    check, where and why it broke, and the students it broke on."""
    students = {}
    for result in results:
        for cell, name, crash in result.check_crashes():
            students.setdefault((cell, name, crash), []).append(result.student_id)
    lines = []
    for (cell, name, crash), who in sorted(students.items()):
        who = sorted(set(who))
        named = ", ".join(who[:shown]) + (f" and {len(who) - shown} more" if len(who) > shown else "")
        count = "1 student" if len(who) == 1 else f"{len(who)} students"
        lines.append(("", f"the hidden check {cell} {name} broke ({crash}) on {count} ({named}): they read only that"
                          " it could not run, and lost its points. Fix the check and grade again: results"
                          " made with other checks are regraded"))
    return lines


# A consequence that no run showed (CheckOutcome.because starts with it): the mistake is named in a
# check's own words, which no repair run can undo, so the page says the check fails too, not why.
UNTESTED = "untested: "


def consequence_words(because):
    """How a consequence is said: "fails because of the mistake above" (or "of Exercise 3"), shown
    by a run with that mistake repaired; "fails too: ..." where no run showed it (UNTESTED)."""
    if because.startswith(UNTESTED):
        cause = because.removeprefix(UNTESTED)
        # (what is above may be a named mistake or only where the values differ: both are to fix first)
        fixed = "what is above is fixed" if cause == "above" else f"{cause} passes"
        return f"fails too: once {fixed}, run the checks again to see whether this one passes"
    return "fails because of the mistake above" if because == "above" else f"fails because of {because} (see above)"


def _joined(because, other):
    """The `because` of a group of cases from two of its cases' ("" when they name different causes;
    untested when one of them is)."""
    if because is None or because == other:
        return other
    if because.removeprefix(UNTESTED) == other.removeprefix(UNTESTED):
        return UNTESTED + other.removeprefix(UNTESTED)
    return ""


def grouped_checks(checks):
    """Checks that share a description (one check run on several cases) as one entry each:
    {"description", "cases", "failed", "message", "note", "because"}, the message of the first
    failing case; "note" when no case carries points (a diagnosis: it explains, it does not grade);
    "because" when every failing case fails as a consequence of a named cause (CheckOutcome.because).
    Consequences come right after the entries that say their cause, so the feedback shows them
    under it. Feedback shows one line per entry: the same words once per case would help no one."""
    groups = {}
    for check in checks:
        group = groups.setdefault(check.description, {"description": check.description, "cases": 0,
                                                      "failed": 0, "message": "", "note": True, "because": None})
        group["note"] = group["note"] and not check.weight
        group["cases"] += 1
        if not check.passed:
            group["failed"] += 1
            group["message"] = _with_another_way(group["message"], check.message)
            because = getattr(check, "because", "")
            group["because"] = _joined(group["because"], because) if because else ""
    listed = list(groups.values())
    for group in listed:
        group["because"] = (group["because"] or "") if not group["message"] else ""
        group["because_text"] = consequence_words(group["because"]) if group["because"] else ""
    causes = [group for group in listed if group["failed"] and group["message"]]
    if not causes:  # the cause is not among these (not shown yet): no "because" to point to
        for group in listed:
            group["because"] = group["because_text"] = ""
        return listed
    following = [group for group in listed if group["because"]]
    rest = [group for group in listed if not group["because"]]
    last_cause = max(rest.index(group) for group in causes)
    return rest[:last_cause + 1] + following + rest[last_cause + 1:]


ANOTHER_WAY = " Another case of this check fails in another way: "


def _with_another_way(said, message):
    """A group's message once `message`, a further failing case's, is counted: the first case's words,
    and one other case's where it fails in another way (not the same words with other sizes): a
    check run on several cases can meet two mistakes, and the second must not go unsaid."""
    if not said or not message:
        return said or message
    if ANOTHER_WAY in said or _kind(message) == _kind(said) or set(_lines(message)) & set(_lines(said)):
        return said  # (the same failure, or one at a line already quoted: said once)
    return said + ANOTHER_WAY + message


def _lines(message):
    """The student's lines a message quotes ("line 12, `...`", "your line 12: ...")."""
    return re.findall(r"\bline (\d+)[,:]", message)


def _kind(message):
    """A message without its numbers and the lists and sizes it quotes: what kind of failure it says."""
    text = re.sub(r"\([^()]*\)|\[[^\[\]]*\]", "", message)
    return re.sub(r"\d+(\.\d+)?|\b(True|False|None)\b", "#", text)[:60]


# -- results/<student>.json -----------------------------------------------------------------
def result_path(out_dir, student_id):
    return Path(out_dir) / f"{student_id}.json"


def write_result(out_dir, result, path=None):
    """results/<student>.json (or `path`), atomically."""
    return write_atomically(path or result_path(out_dir, result.student_id), json.dumps(result.to_json(), indent=1))


def read_result(out_dir, student_id, path=None):
    """The student's result (or the one at `path`), or None when there is none or it cannot be read."""
    return _load(path or result_path(out_dir, student_id))


def all_results(out_dir):
    """Every result in the folder, by student id. Dot-files (the batch's own) and files
    that are not results are left out."""
    results = []
    for path in sorted(Path(out_dir).glob("*.json")):
        if not path.name.startswith("."):
            result = _load(path)
            if result is not None:
                results.append(result)
    return results


def _load(path):
    try:
        return Result.from_json(json.loads(path.read_text()))
    except (OSError, ValueError):  # JSONDecodeError is a ValueError
        return None
