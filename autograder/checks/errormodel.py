"""The error model: the known ways to get an exercise wrong, and the diagnosis that names one.

Each known mistake is a *mutant*: the reference solution with a small edit, written in the
assignment's folder (`exercises/<assignment>/errors.toml`) with the one message a student who
made it should read:

    [[mutant]]
    exercise = "ex5"                      # the graded cell it belongs to
    name = "cat-on-tokens"
    message = "The heads are joined along the tokens (dim=1): ..."
    edit = [{ old = "dim=-1)", new = "dim=1)" }]   # in region <exercise>_answer, or give `cell`

A diagnosis is behavioural. The exercise's *probe* (a generator of a `student` and an rng that
yields plain observations: shapes, outputs, the text of an error) runs against the student, the
reference, every mutant and every pair of mutants, all with the same random inputs. The
student's observations equal to a mutant's name its mistake; equal to a pair's, both. Mutants
are the reference with an edit, so they run here, on the trusted side, through the same probe
API (`NamespaceStudent`) as the student's code in its sandbox.
"""
import functools
import itertools
import re
import tomllib
from dataclasses import dataclass
from pathlib import Path

import torch

from autograder.course import reference as reference_module
from autograder.inside import warm
from autograder.inside.student import NamespaceStudent
from autograder.wire import StudentError
from autograder.checks.verdict import ATOL, RTOL

ERRORS = "errors.toml"
WHERE = " (your line "  # starts where a student's error happened (inside/student.py `_where`)


def without_where(text):
    """The error text without its "(your line N: code)" end, found without a regex (the text is the
    student's to choose)."""
    head, found, tail = text.rpartition(WHERE)
    return head if found and tail.endswith(")") and tail.split(":", 1)[0].isdigit() else text


class ErrorModelError(ValueError):
    """errors.toml is malformed, or a mutant's edit does not apply (the instructor's problem)."""


@dataclass(frozen=True)
class Mutant:
    exercise: str
    name: str
    message: str
    edits: tuple  # ((region, old, new), ...)


@dataclass(frozen=True)
class Raised:
    """An observation: the code under probe raised; `text` is what it raised."""
    text: str


def step_names(folder):
    """{reference variable (or `variable.op`): what it is, in words} from errors.toml's `[steps]`:
    how localisation (checks/localise.py) names the reference's steps to students."""
    path = Path(folder) / ERRORS
    if not path.is_file():
        return {}
    return dict(_steps(str(path), path.stat().st_mtime_ns))


@functools.lru_cache(maxsize=8)
def _steps(path, _mtime):
    try:
        raw = tomllib.loads(Path(path).read_text()).get("steps", {})
    except tomllib.TOMLDecodeError as error:
        raise ErrorModelError(f"{path} is not valid TOML: {error}") from None
    if not isinstance(raw, dict) or not all(isinstance(v, str) for v in raw.values()):
        raise ErrorModelError(f"{path}: [steps] maps names of the reference's variables to words (strings)")
    return tuple(raw.items())


def load(folder):
    """{exercise: [Mutant, ...]} from `folder`/errors.toml ({} when there is none)."""
    path = Path(folder) / ERRORS
    if not path.is_file():
        return {}
    return _load(str(path), path.stat().st_mtime_ns)


@functools.lru_cache(maxsize=8)
def _load(path, _mtime):
    try:
        raw = tomllib.loads(Path(path).read_text())
    except tomllib.TOMLDecodeError as error:
        raise ErrorModelError(f"{path} is not valid TOML: {error}") from None
    model, names = {}, set()
    for number, entry in enumerate(raw.get("mutant", []), 1):
        missing = [key for key in ("exercise", "name", "message", "edit") if not entry.get(key)]
        if missing:
            raise ErrorModelError(f"{path}: mutant {number} has no {', '.join(missing)}")
        if (entry["exercise"], entry["name"]) in names:
            raise ErrorModelError(f"{path}: two mutants of {entry['exercise']} are named {entry['name']!r}")
        names.add((entry["exercise"], entry["name"]))
        edits = tuple((edit.get("cell", f"{entry['exercise']}_answer"), edit["old"], edit["new"])
                      for edit in entry["edit"])
        model.setdefault(entry["exercise"], []).append(
            Mutant(entry["exercise"], entry["name"], entry["message"].strip(), edits))
    return model


def namespace(solutions, mutants=()):
    """The reference's definitions with the edits of `mutants` made (None if they clash)."""
    edits = tuple(edit for mutant in mutants for edit in mutant.edits)
    try:
        return reference_module.load(solutions, edits)
    except reference_module.EditError:
        if len(mutants) == 1:  # one mutant must always apply: a stale error model
            raise ErrorModelError(f"mutant {mutants[0].name!r} does not apply to {solutions}") from None
        return None  # two edits of the same line cannot be combined: not a pair to try


def observe(probe, student, seed):
    """What `probe` sees of `student` with inputs from `seed`: its observations, the last one a
    `Raised` if the code under probe raised."""
    seen = []
    rng = torch.Generator().manual_seed(seed)
    try:
        for value in probe(student, rng):
            seen.append(value)
    except StudentError as error:
        seen.append(Raised(without_where(str(error))))  # the same error, whatever line of whose code raised it
    return seen


def same(a, b):
    """Observations alike: tensors of one shape and dtype kind, close (NaN where NaN), the rest equal."""
    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
        if not (isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor)) or a.shape != b.shape:
            return False
        if a.is_floating_point() != b.is_floating_point():
            return False
        return bool(torch.allclose(a.double(), b.double(), rtol=RTOL, atol=ATOL, equal_nan=True))
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same(a[key], b[key]) for key in a)
    return type(a) is type(b) and a == b


_seen_cache = {}  # (solutions, mutants, probe, seed) -> observations: the same for every student of a run


def observations_of(solutions, chosen, probe, seed, resources=None):
    """What `probe` sees of the reference with the edits of `chosen` (None if they clash)."""
    key = (str(solutions), chosen, probe, seed)
    if key not in _seen_cache:
        if len(_seen_cache) > 20_000:
            _seen_cache.clear()
        ns = namespace(solutions, chosen)
        _seen_cache[key] = None if ns is None else observe(probe, NamespaceStudent(vars(ns), resources), seed)
    return _seen_cache[key]


def recognise(seen, probe, solutions, mutants, seed, resources=None):
    """The mutant (or pair of mutants) whose observations equal `seen`, as a tuple; () when
    `seen` is the reference's own or matches none of them. Singles are tried first (the
    error model's test makes sure the probe tells them apart). A pair is named only when no
    other pair behaves the same: when mistakes hide each other, a guess would mislead."""
    def alike(chosen):
        theirs = observations_of(solutions, chosen, probe, seed, resources)
        return theirs is not None and same(seen, theirs)

    stopped = bool(seen) and isinstance(seen[-1], Raised)
    if stopped and "NotImplementedError" in seen[-1].text:
        return ()  # not answered yet: no mistake to name
    if alike(()):
        return ()
    single = next(((mutant,) for mutant in mutants if alike((mutant,))), None)
    if single or stopped:
        return single or ()  # code that stops with an error no single mistake makes: a pair would guess
    matching = [chosen for chosen in itertools.combinations(mutants, 2) if alike(chosen)]
    return matching[0] if len({message(chosen) for chosen in matching}) == 1 else ()


def message(chosen):
    """What the student reads for the recognised mutant or pair."""
    if len(chosen) == 1:
        return chosen[0].message
    return "Two things to fix here. " + " ".join(f"({n}) {m.message}" for n, m in enumerate(chosen, 1))


def warm_up():
    """Pay, once per grading process, what the first `reproduced` would pay inside a student's
    grading time: torch's first probe calls (about 0.5 s, sympy for the meta device) and, without
    this, an import of torch's compiler (about 1.5 s) that nothing here uses. Call it after the
    checks are loaded: their imports define kernels that `first_calls` keeps from importing the
    compiler (`warm.defer_dynamo`, which it calls after its own imports)."""
    warm.first_calls()


def reproduced(session, assignment, grade_id, causes, seed):
    """{check name: passed} of `grade_id`'s checks on the reference with only the mutants `causes`
    ((exercise, mutant name), ...) made: the mistakes diagnoses named, alone, run here (trusted code)
    with the submission's seed, through `session` (a runner.CheckSession), its diagnoses left out.
    None when they do not apply together."""
    model = load(assignment.folder)
    mutants = tuple(mutant for exercise, name in causes for mutant in model.get(exercise, []) if mutant.name == name)
    found = namespace(assignment.solutions, mutants) if mutants and len(mutants) == len(causes) else None
    if found is None:
        return None
    cells = session.run_views(NamespaceStudent(vars(found)), seed, cells=[grade_id], diagnoses=False).cells
    return {check.name: (check.passed, failure(check.message)) for check in cells[grade_id].checks}


_RAISED = re.compile(r"\braised (\w+(?:\.\w+)*)")


def failure(message):
    """How a check failed, in a form the student's code and a mutant can share: the kind of error
    its code raised ("raised TypeError"), or "failed" (wrong values, shapes or structure, in words
    that name the student's classes and lines, and do not compare)."""
    raised = _RAISED.search(message or "")
    return f"raised {raised.group(1)}" if raised else "failed"


def _apart(cell, upstream):
    """A failing check whose own comparison showed a mistake of its own (CheckResult.apart) is not
    explained by another: it keeps its words. Not where an exercise this cell builds on fails
    (`upstream`, their CellResults): the mistake may be in that exercise's code, which this cell runs."""
    if any(up.checks and up.fraction < 1 for up in upstream):
        return
    for check in cell.checks:
        if not check.passed and getattr(check, "apart", False):
            check.unexplained = True


def mark_unexplained(cells, outcomes, builds_on=None, repaired=None):
    """Mark, in place, the failing checks that the named mistakes do not explain; such a check
    keeps its own words: "fails because of the mistake above" and "fix Exercise 3 first" are said
    only of the others (checks/rootcause.py).

    Where a repair run fixed the named mistake in the student's own code (`repaired`: {grade id:
    {check name: passed}}, checks/plugin.py `run_repairs`), a check is explained only if it passes
    there (passed None: what it builds on still failed in that run, which then showed nothing of
    it). Elsewhere the grader runs the named mistakes alone (`outcomes(grade_id, causes)`,
    `reproduced`'s answer): a check that code passes, or fails another way (an error where it has
    wrong values, or another error), is not explained. The mistakes are the cell's own diagnosis's
    mutants or, where it has none, those of every failing cell it builds on (`builds_on`), when each
    of those named one. `autograder validate` tests what is still said by undoing the mistakes in
    the student's code (authoring/validate.py `check_repairs`). Where neither a repair nor a
    reproduction ran (the mistake is named in a check's own words), a failing check is marked
    `untested`: it is not said to fail because of the named mistake, only to fail too. A check whose
    own comparison showed a mistake of its own (`_apart`) keeps its words unless a run shows otherwise."""
    def causes_of(grade_id):
        named = next((check for check in cells[grade_id].checks if check.diagnosis and check.cause), None)
        return tuple((grade_id, name) for name in named.cause) if named is not None else ()

    for grade_id, cell in cells.items():
        _apart(cell, [cells[up] for up in (builds_on or {}).get(grade_id, ()) if up in cells])
        after = (repaired or {}).get(grade_id)
        if after is not None:
            for check in cell.checks:
                outcome = after.get(check.name, False)
                if outcome and not check.passed:
                    check.unexplained = False  # the run shows it follows: stronger than any check's reading
                if check.passed or check.diagnosis or outcome:
                    continue
                if outcome is None:  # what it builds on still failed in that run: it showed nothing of this
                    check.untested = True
                else:
                    check.unexplained = True
            continue
        causes = causes_of(grade_id)
        upstream = [up for up in (builds_on or {}).get(grade_id, ()) if up in cells and cells[up].checks
                    and cells[up].fraction < 1]
        if not causes and upstream and all(causes_of(up) for up in upstream):
            causes = tuple(cause for up in upstream for cause in causes_of(up))
        theirs = outcomes(grade_id, causes) if causes else None
        for check in cell.checks:
            if check.passed or check.diagnosis:
                continue
            if not theirs or check.name not in theirs:
                check.untested = True  # nothing ran that could show it follows from the named mistake
                continue
            passed, how = theirs[check.name]
            # (the named mistake alone failing it the same way shows it can follow from that mistake)
            check.unexplained = passed or how != failure(check.message)
    return cells
