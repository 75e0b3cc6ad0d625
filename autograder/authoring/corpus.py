"""The grading-accuracy corpus: realistic mistakes and correct answers in other styles.

`exercises/<assignment>/corpus.toml` lists submissions. Each one starts from the
reference solutions and changes one exercise, either by text edits on the
solution (`[[entry.edit]]` with `cell`, `old`, `new`) or by replacing whole
answer cells (`[entry.code]`, answer cell = new source). Every entry says what
the grader must do with it:

    outcome = "mistake"      the graded cell `exercise` loses points, its
                             feedback matches the regex `diagnostic`, and no
                             other graded cell loses points except those in
                             `also` (cells that build on the broken one)
    outcome = "alternative"  full marks everywhere

A mistake may also name `no_better_than`: another corpus entry (the same wrong
code without a trick, such as returning the notebook's printed values for the
notebook's inputs) whose total it must not exceed; `second = "<graded cell>: <regex>"`
for a second mistake in the same answer (that cell loses points too, and its
feedback must name it), or a list of them for a third and more; and `source`: where the code comes from, for answers
taken from public code. Those measure the diagnoses on answers they were not
written for: they must be caught like any other, and their naming is scored
(`diagnose`) rather than required one by one. `held_out = "<label>"` marks entries
added (and their regexes frozen) before the diagnosis code named by the label was
written: validate reports their figure on its own, the honest one.

`diagnose` is the stricter reading of what a student sees: every mistake must be
named, and no message may point at correct code. In the exercise that holds a
mistake, each failing check's message must name it; in a cell that only builds on
it (`also`), a message must send the student to the broken exercise first.

Two entries are implicit: the reference solutions (every check passes) and the
untouched release (every check fails).
"""
import re
import tomllib
from dataclasses import dataclass, field

import nbformat

from autograder.authoring.examples import filled_notebook
from autograder.checks.rootcause import UPSTREAM
from autograder.record import GRADED, grouped_checks

SOLUTIONS, STUBS = "reference-solutions", "untouched-release"
OUTCOMES = ("mistake", "alternative")
FIELDS = {"name", "exercise", "outcome", "about", "diagnostic", "also", "edit", "code", "no_better_than",
          "second", "source", "held_out"}
# Messages that blame nothing: credit withheld until the code is also right on random inputs.
# Messages that never point at code: the withheld-credit note, and the honest "this matches no
# mistake we know, here is where it differs" (a miss if nothing names the mistake, not misleading).
NEUTRAL = re.compile(r"counts only once the same code is also right on other inputs"
                     r"|matches none of the common mistakes the grader knows")


class CorpusError(ValueError):
    """The corpus file is malformed; the message names the entry."""


@dataclass(frozen=True)
class Entry:
    name: str  # also the student id its notebook is graded under
    exercise: str  # the graded cell it is about
    outcome: str
    about: str  # what the student did, in a few words
    diagnostic: str = ""  # regex the feedback must match (mistakes)
    also: tuple = ()
    edits: dict = field(default_factory=dict)  # answer cell -> [(old, new)]
    code: dict = field(default_factory=dict)  # answer cell -> new source
    no_better_than: str = ""  # an entry whose total this one must not exceed
    second: tuple = ()  # ((graded cell, regex), ...): the further mistakes in the same answer
    source: str = ""  # where the code comes from (public code), if anywhere
    held_out: str = ""  # the diagnosis code it was added before ("value-localisation"): its honest test

    def expected(self):
        """{graded cell: [regexes its feedback must match]} for a mistake."""
        found = {self.exercise: [self.diagnostic]}
        for cell, regex in self.second:
            found.setdefault(cell, []).append(regex)
        return found

    @property
    def mistakes(self):
        """How many mistakes the entry states: its own and every further one."""
        return 1 + len(self.second)


def load(assignment, cells):
    """The entries of the assignment's corpus; `cells` are its graded cell ids."""
    path = assignment.corpus
    if not path.exists():
        return []
    try:
        data = tomllib.loads(path.read_text())
    except tomllib.TOMLDecodeError as error:
        raise CorpusError(f"{path.name} is not valid TOML: {error}") from None
    entries, seen = [], {SOLUTIONS, STUBS}
    for raw in data.get("entry", []):
        entry = _entry(raw, set(cells))
        if entry.name in seen:
            raise CorpusError(f"two entries are named {entry.name!r}")
        seen.add(entry.name)
        entries.append(entry)
    for entry in entries:
        if entry.no_better_than and entry.no_better_than not in seen - {entry.name}:
            raise CorpusError(f"corpus entry {entry.name!r}: no_better_than names no other entry"
                              f" ({entry.no_better_than!r})")
    return entries


def _entry(raw, cells):
    name = raw.get("name", "?")
    problem = None
    if set(raw) - FIELDS:
        problem = f"unknown fields {sorted(set(raw) - FIELDS)}"
    elif not re.fullmatch(r"[a-z0-9][a-z0-9_-]*", name):
        problem = "needs a name of lower-case letters, digits, - and _"
    elif raw.get("exercise") not in cells:
        problem = f"exercise should be one of {sorted(cells)}"
    elif raw.get("outcome") not in OUTCOMES:
        problem = f"outcome should be one of {OUTCOMES}"
    elif not raw.get("about"):
        problem = "needs `about`: what the student did"
    elif raw["outcome"] == "mistake" and not raw.get("diagnostic"):
        problem = "a mistake needs the `diagnostic` its feedback must show"
    elif not isinstance(raw.get("source", ""), str):
        problem = "`source` is a string: where the code comes from"
    elif not isinstance(raw.get("held_out", ""), str):
        problem = "`held_out` is a string: the diagnosis code the entry was written before"
    elif "second" in raw and not _further(raw["second"], cells):
        problem = "`second` is \"<graded cell>: <regex>\" for a second mistake, or a list of them"
    elif not isinstance(raw.get("no_better_than", ""), str):
        problem = "`no_better_than` is the name of another entry"
    elif not (raw.get("edit") or raw.get("code")):
        problem = "needs an `edit` or `code` that makes the submission"
    elif not isinstance(raw.get("also", []), list) or set(raw.get("also", [])) - cells:
        problem = f"`also` should be a list of graded cells, got {raw.get('also')!r}"
    elif any(not isinstance(edit, dict) or set(edit) != {"cell", "old", "new"}
             or not all(isinstance(v, str) for v in edit.values()) for edit in raw.get("edit", [])):
        problem = "every `edit` needs exactly `cell`, `old` and `new`, all strings"
    elif not all(isinstance(k, str) and isinstance(v, str) for k, v in raw.get("code", {}).items()):
        problem = "`code` maps answer cells to their new source (strings)"
    if problem:
        raise CorpusError(f"corpus entry {name!r}: {problem}")
    edits = {}
    for edit in raw.get("edit", []):
        edits.setdefault(edit["cell"], []).append((edit["old"], edit["new"]))
    return Entry(name=name, exercise=raw["exercise"], outcome=raw["outcome"], about=raw["about"],
                 diagnostic=raw.get("diagnostic", ""), also=tuple(raw.get("also", ())),
                 edits=edits, code=dict(raw.get("code", {})), no_better_than=raw.get("no_better_than", ""),
                 second=_further(raw.get("second", []), cells),
                 source=raw.get("source", ""), held_out=raw.get("held_out", ""))


def _further(raw, cells):
    """((cell, regex), ...) of an entry's `second`: one "<graded cell>: <regex>" or a list of
    them; None when one is malformed or names no graded cell."""
    found = []
    for text in [raw] if isinstance(raw, str) else raw if isinstance(raw, list) else [None]:
        if not isinstance(text, str) or ":" not in text or text.split(":", 1)[0].strip() not in cells:
            return None
        cell, regex = text.split(":", 1)
        found.append((cell.strip(), regex.strip()))
    return tuple(found)


def notebook(entry, release_nb, assignment):
    """The entry's submission: the release with every answer filled in, then changed."""
    try:
        nb = filled_notebook(release_nb, assignment, entry.edits)
    except ValueError as error:
        raise CorpusError(f"corpus entry {entry.name!r}: {error}") from None
    replaced = set()
    for cell in nb.cells:
        grade_id = cell.metadata.get("nbgrader", {}).get("grade_id")
        if grade_id in entry.code:
            cell.source = entry.code[grade_id]
            replaced.add(grade_id)
    if set(entry.code) - replaced:
        raise CorpusError(f"corpus entry {entry.name!r}: no answer cell {sorted(set(entry.code) - replaced)}")
    return nb


def write_submissions(assignment, entries, folder):
    """<folder>/<name>.ipynb for every entry, the solutions and the untouched release."""
    release_nb = nbformat.read(assignment.release_notebook, as_version=4)
    folder.mkdir(parents=True, exist_ok=True)
    nbformat.write(filled_notebook(release_nb, assignment, {}), folder / f"{SOLUTIONS}.ipynb")
    nbformat.write(release_nb, folder / f"{STUBS}.ipynb")
    for entry in entries:
        nbformat.write(notebook(entry, release_nb, assignment), folder / f"{entry.name}.ipynb")


def judge(entry, result, builds_on=None):
    """What is wrong with how `result` treats `entry` ([] when it is right): the points, and
    the diagnostic of entries written for the corpus (public code's naming is scored by
    `diagnose` instead). A cell that builds on the entry's exercise (`builds_on`, the
    assignment's) may lose points too when all it says is to fix that exercise first: a variable
    made with a wrong class is wrong too (its values are checked), and says so."""
    if result.status != GRADED:
        return [f"was not graded: {result.output}"]
    tests = {cell.name: cell for cell in result.cells}
    lost = [name for name, cell in tests.items() if cell.score < cell.max_score]
    if entry.outcome == "alternative":
        return [f"lost points on {name}: {_failures(tests[name])}" for name in lost]
    problems = []
    expected = entry.expected()
    for cell, regexes in expected.items():
        if cell not in lost:
            problems.append(f"not caught: {cell} got full marks")
        elif not entry.source:
            problems += [f"caught, but the feedback does not say /{regex}/: {_failures(tests[cell])}"
                         for regex in regexes if not re.search(regex, _failures(tests[cell]))]
    for name in lost:
        broken = {entry.exercise, *expected, *entry.also}
        cascade = broken & set((builds_on or {}).get(name, ())) and _says_upstream(tests[name])
        if name not in expected and name not in entry.also and not cascade:
            problems.append(f"also lost points on {name}: {_failures(tests[name])}")
    return problems


def _says_upstream(cell):
    """Whether all a cell's failing checks say is "fix Exercise N first" (once; the rest quiet)."""
    messages = [check.message for check in cell.checks if not check.passed and check.message]
    return bool(messages) and all(UPSTREAM.search(message) for message in messages)


def diagnose(entry, result, builds_on=None):
    """What the student with this mistake reads that is not right ([] when every mistake is
    named and no message points at correct code). Only for mistakes. `builds_on` is the
    assignment's: a second mistake in a cell built on the first one's is named once the
    first is fixed, so there "fix Exercise N first" is the right message."""
    if entry.outcome != "mistake":
        return []
    if result is None or result.status != GRADED:
        return ["was not graded"]
    tests = {cell.name: cell for cell in result.cells}
    expected = entry.expected()
    waits = {cell for cell in expected if set((builds_on or {}).get(cell, ())) & (set(expected) - {cell})}
    problems = []
    for cell, regexes in expected.items():
        said = " | ".join(shown_messages(tests[cell]))
        if cell in waits and UPSTREAM.search(said):
            continue
        problems += [f"{cell}: no message says /{regex}/" for regex in regexes if not re.search(regex, said)]
    for name, cell in tests.items():
        shown = shown_messages(cell)
        for message in shown:
            right = NEUTRAL.search(message) or (
                any(re.search(regex, message) for regex in expected[name]) or (name in waits and UPSTREAM.search(message))
                if name in expected else UPSTREAM.search(message))
            if not right:
                problems.append(f"{name}: misleading: {message}")
        if len(set(shown)) < len(shown):
            problems.append(f"{name}: a message is repeated")
    return problems


def shown_messages(cell):
    """The failing checks' messages as the feedback shows them (record.grouped_checks)."""
    return [group["message"] for group in grouped_checks(cell.checks) if group["message"]]


def check_outcomes(result):
    """{(graded cell, check name): passed} from a result's per-check data."""
    return {(cell.name, check.name): check.passed for cell in result.cells for check in cell.checks}


def _failures(cell):
    messages = [check.message for check in cell.checks if not check.passed]
    return " | ".join(messages) or cell.output
