"""Root cause once: one cause, said once, where it is.

Within a cell: when one failing check names the mistake (verdict.NamedMistake), the
cell's other failing checks add nothing (their generic words, "check the causal mask",
would send the student to code that is right), and no message is shown twice. Where the
error model names the mistake, that is tested, not assumed: a failing check that the named
mistake alone passes (errormodel.mark_unexplained) is a second mistake, and keeps its words.

Across cells: a cell that builds on a broken exercise is not blamed for it.

When the student's CausalAttention is wrong, the multi-head wrapper built from it
fails too, and its checks would send the student to the wrapper's correct code.
An assignment names what builds on what in `assignment.toml`:

    [builds_on]
    ex5 = ["ex3"]          # Exercise 5 uses the class written in Exercise 3

If a cell loses points while a cell it builds on also does, its failing checks say
one thing: fix that exercise first. The points stay as the checks gave them; only
the words change, and they are true whatever the cell's own code is.
"""
import re

from autograder.checks.outcomes import at_own_line, raised_error
from autograder.checks.verdict import short
from autograder.record import UNTESTED

# What a cascade message looks like (authoring/corpus.py scores diagnoses by it).
UPSTREAM = re.compile(r"[Ff]ix Exercise \S+(?: and Exercise \S+)* first")


def exercise_number(grade_id):
    """'ex8_model' -> '8' (how the notebook numbers its exercises)."""
    found = re.match(r"ex(\d+)", grade_id)
    return found.group(1) if found else grade_id


def upstream_message(broken):
    names = " and ".join(f"Exercise {exercise_number(cell)}" for cell in broken)
    verb = "does not pass its own checks" if len(broken) == 1 else "do not pass their own checks"
    return (f"This part builds on {names}, which {verb} yet: fix {names} first."
            " Then these checks will show whether this part is right on its own.")


def still_wrong_once_fixed(broken, said, right=False):
    """A cell's diagnosis found by a repair run with the mistakes of `broken` (the failing cells it
    builds on) undone (`right`: with the reference's answers to them): it still fails, and `said`
    is what its diagnosis names there ("" for nothing)."""
    names = " and ".join(f"Exercise {exercise_number(cell)}" for cell in broken)
    mistakes = f"{names} right" if right else (
        "the mistake named there" if len(broken) == 1 else "the mistakes named there")
    return (f"This part builds on {names}, which {'does' if len(broken) == 1 else 'do'} not pass"
            f" {'its' if len(broken) == 1 else 'their'} own checks yet: fix {names} first. With {mistakes}"
            f"{'' if right else ' fixed'}, this part still fails on its own" + (f": {said}" if said else
                                                           f". Once {names} {'passes' if len(broken) == 1 else 'pass'},"
                                                           " compare this part with the exercise text."))


def still_failing_wait(cells, repaired):
    """Rewrite, in place: in a cell whose repair run undid the mistakes of the exercises it builds
    on (`repaired`: {grade id: (kind, {check name: passed})}) and which still fails there, said by
    its diagnosis (`still_wrong_once_fixed`), the checks that still fail say nothing of their own:
    their words describe it built on the broken exercise. None of them is said to follow from it
    either (errormodel.mark_unexplained); those the repair made pass are its consequences."""
    for grade_id, (kind, passed) in repaired.items():
        cell = cells.get(grade_id)
        if kind not in ("upstream", "reference") or cell is None or not any(
                check.diagnosis and UPSTREAM.search(check.message) for check in cell.checks):
            continue
        for check in cell.checks:
            if not check.passed and not check.diagnosis and passed.get(check.name) is False:
                check.message, check.unexplained = "", True
    return cells


def root_cause_once(cells, builds_on):
    """Rewrite, in place, the messages of failing checks in cells whose upstream cells fail.

    `cells` is {grade id: runner.CellResult}; `builds_on` is {grade id: [grade ids]}."""
    for grade_id, upstream in builds_on.items():
        cell = cells.get(grade_id)
        if cell is None or cell.fraction >= 1:
            continue
        # (a cell with no checks in this view, all hidden until later, has not failed in it)
        broken = [name for name in upstream if name in cells and cells[name].checks and cells[name].fraction < 1]
        if not broken:
            continue
        message = upstream_message(broken)
        # a check the upstream mistakes alone pass (errormodel.mark_unexplained) is this cell's own
        failing = [check for check in cell.checks if not check.passed and not getattr(check, "unexplained", False)]
        if not failing:
            continue
        kept = next((check for check in failing  # a diagnosis that already found the upstream cause
                     if getattr(check, "diagnosis", False) and UPSTREAM.search(check.message)), None)
        for check in failing:
            if kept is not None:
                check.message = check.message if check is kept else ""
            else:
                check.message, message = message, ""  # said once, on the first failing check
    return cells


def one_cause_per_cell(cells):
    """Rewrite, in place: in each cell, the named mistake alone, and every message once.
    The error model's diagnosis (checks/errormodel.py) outranks a check that names a mistake
    from what it alone saw: it compared the whole behaviour with every known mistake and pair."""
    for cell in cells.values():
        failing = [check for check in cell.checks if not check.passed]
        diagnosed = any(getattr(check, "diagnosis", False) and check.message for check in failing)
        named = any(getattr(check, "named", False) and check.message for check in failing)  # quieted: not counted
        speaking = " ".join(check.message for check in failing if check.message and (
            getattr(check, "diagnosis", False) if diagnosed else getattr(check, "named", False)))
        seen, crashes = set(), set()
        for check in failing:
            said = _explanation(check.message)
            crash = raised_error(check.message)
            if crash and (diagnosed or named) and not at_own_line(check.message) and not _explains(speaking, crash):
                # An error raised before any line of the student's code ran (a class without a
                # forward method) is not what the named mistake computes: a second mistake, said once.
                if crash in crashes:
                    check.message = ""
                crashes.add(crash)
            elif said in seen or (not getattr(check, "unexplained", False) and (
                    (diagnosed and not getattr(check, "diagnosis", False))
                    or (named and not getattr(check, "named", False)))):
                check.message = ""
            seen.add(said)
    return cells


def _explains(speaking, crash):
    """Whether the speaking message is about this error: it quotes a name the error names
    (`mask` and "no attribute 'mask'"), or it is itself about an error."""
    if " raised " in speaking or not speaking:
        return True
    names = set(re.findall(r"`([A-Za-z_][A-Za-z0-9_.]*)`", speaking))
    words = set(re.findall(r"[A-Za-z_][A-Za-z0-9_]*", crash))
    return bool({name.rsplit(".", 1)[-1] for name in names} & words)


def consequences(cells):
    """Mark, in place, the failing checks that say nothing because another check of their cell
    names the cause (one_cause_per_cell, root_cause_once, outcomes.quiet_consequences): their
    `because` is "above" (a mistake named in the same cell) or the exercises it builds on ("Exercise
    3"). The feedback lists them under the cause as failing because of it, not as failures of
    the parts their titles name. A cell where no check speaks marks nothing: there is no named
    cause for them to follow from."""
    for cell in cells.values():
        failing = [check for check in cell.checks if not check.passed]
        said = [check.message for check in failing if check.message]
        if not said:
            continue
        upstream = next((found for message in said if (found := UPSTREAM.search(message))), None)
        because = upstream.group(0).removeprefix("fix ").removeprefix("Fix ").removesuffix(" first") if upstream else "above"
        for check in failing:
            # (one that the named mistake does not explain, quieted by a failing check it needs, is
            # not said to follow from it: errormodel.mark_unexplained)
            if not (check.message or getattr(check, "diagnosis", False) or getattr(check, "unexplained", False)):
                # (no run showed that it follows: record.consequence_words says it "fails too")
                check.because = f"{UNTESTED}{because}" if getattr(check, "untested", False) else because
    return cells


def missing_because_crashed(cells, cell_errors):
    """Rewrite, in place: a check that found a notebook variable missing, in an exercise whose
    own notebook cell (named `<grade id>_...`) raised an error, says that error is why.
    `cell_errors` are the cell report's entries with an error ({"cell", "error"})."""
    for grade_id, cell in cells.items():
        crashed = next((entry for entry in cell_errors if entry["cell"].startswith(f"{grade_id}_")), None)
        failing = [check for check in cell.checks if not check.passed]
        if crashed is None or not any("is not defined" in check.message for check in failing):
            continue
        error = crashed["error"].strip().splitlines()[-1] if crashed["error"].strip() else "an error"
        error = short(error, 300)  # the student's own error text, which the sandbox reported
        if "is not defined" in error:  # the crash is the missing name itself: the check's words say it best
            continue
        message = (f"Your cell {crashed['cell']} stopped with an error ({error}), so what it should make"
                   " was never made: fix that error first.")
        for check in failing:
            check.message, message = message, ""
    return cells


def _explanation(message):
    """What a message says is wrong, without what it was looking at: two checks that name the
    same mistake in different outputs ("the outputs are not right: X", "the weights of each
    head are not right: X") or on different inputs ("For scores far from zero, ...: X", "For
    scores whose future is far above the past, ...: X") say it once."""
    said = message.split(" are not right: ", 1)[-1]
    return said.split(": ", 1)[1] if said.startswith("For ") and ": " in said else said


def what_fixing_earns(cells, repaired, points):
    """Add, in place, to each diagnosis whose named mistakes a repair run undid in the student's own
    code (`repaired`: {grade id: (kind, {check name: passed})}, checks/plugin.py `run_repairs`) what
    fixing them earns in this view: the checks that then pass, and the points (`points`: {grade
    id: the cell's points}). Said only from that run, never guessed."""
    for grade_id, (kind, passed) in repaired.items():
        cell = cells.get(grade_id)
        said = next((check for check in cell.checks if check.diagnosis and check.message), None) if cell else None
        if kind != "own" or said is None:
            continue
        failing = [check for check in cell.checks if not check.passed and not check.diagnosis]
        fixed = [check for check in failing if passed.get(check.name)]
        total = sum(check.weight for check in cell.checks)
        gained = points.get(grade_id, 0) * sum(check.weight for check in fixed) / total if total else 0
        which = "both" if said.message.startswith("Two things to fix") else "this"
        if not fixed:
            said.message += f" Fixing {which} alone makes no other check pass yet: something else is wrong here too."
        else:
            more = f"{len(fixed)} more check{'s' if len(fixed) != 1 else ''}"
            rest = "" if len(fixed) == len(failing) else "; something else is wrong here too"
            said.message += f" Fixing {which} makes {more} pass (+{round(gained, 2):g} points){rest}."
    return cells
