"""Repair runs: which cells a submission runs again, fixed, to test what its feedback says follows.

Feedback says a failing check "fails because of the mistake above" (a mistake its cell's
diagnosis named), or that a cell should wait: "fix Exercise 3 first". Both are claims about
code that does not exist yet: the student's, with that mistake fixed. A repair run makes it. In a
sealed fork of the submission (grading/sandbox/proxy.py `SandboxStudent.repairing`) it runs

- `own`: the cell's answer with the named mistakes undone in the student's own words
  (checks/repair.py), where they can be;
- `upstream`: the same for the failing exercises the cell builds on, where each named its
  mistakes in the mutants' words; where one did not, `reference`: the reference's answers to
  those exercises in place of the student's,

and every later cell up to the checked exercise's last one (a variable made with the class is
made again), then the exercise's checks run again there. A check that still fails keeps its own
words (errormodel.mark_unexplained). A run tells nothing where a cell that ran cleanly the first
time now stops on what the sealed fork alone refuses (`Repair.lines_up`).

Whether a check passes in the fork shows on the page (a consequence line, or the check's own
words). Code that read a reference answer there could spell it out that way, a bit per check:
so an `own` or `upstream` repair holds nothing but the student's code and the mutants' `old`
fragments (what the diagnosis tells the student to write anyway), and a `reference` repair is
read as one bit, whether every check it asked again passes (checks/plugin.py `run_repairs`).
"""
from dataclasses import dataclass

from autograder.checks.repair import repaired
from autograder.course.regions import strip_solution_markers


@dataclass(frozen=True)
class Repair:
    grade_id: str  # the graded cell whose checks are asked again
    kind: str  # "own", "upstream" or "reference" (see the module's docstring)
    cells: tuple  # ((name, source), ...): run first, in order
    raised: tuple  # (bool, ...): whether each of them raised when the submission ran
    fixed: tuple = ()  # ((name, source), ...): the cells it changes; repairs alike share one run (`merged`)
    span: tuple = (0, 0)  # (first, last) index of `cells` among the submission's cells

    def lines_up(self, raised_now):
        """Whether the run can tell anything: it ran, and no cell that ran cleanly before stopped
        now on what only the repair's fork does to it (a file opened or a module imported for the
        first time, which the seal refuses; its shorter time). Another new error is the repair's
        own outcome: the student's later code relies on the mistake, and the checks then say so."""
        return raised_now is not None and len(raised_now) == len(self.cells) and not any(
            now in ONLY_IN_A_REPAIR and not before for now, before in zip(raised_now, self.raised))


ONLY_IN_A_REPAIR = {"PermissionError", "OSError", "FileNotFoundError", "ModuleNotFoundError", "ImportError",
                    "TimeoutError"}


class Planner:
    """The repair runs one submission can have. `cells` are [(name, source)] as it ran them,
    `raised` {name: whether it raised then}, `owners` {cell name: graded cell it leads up to}
    (grading/notebook.py), `model` the error model {exercise: [Mutant]}, `reference` the
    reference's answer regions {name: text}, `unanswered` the graded cells left as released."""

    def __init__(self, cells, raised, owners, model, reference, unanswered=()):
        self.cells, self.raised, self.owners = list(cells), dict(raised), owners
        self.model, self.reference, self.unanswered = model, reference, set(unanswered)

    def own(self, grade_id, causes):
        """The mutants `causes` (names) of `grade_id` undone in the student's cells, or None."""
        if grade_id in self.unanswered:
            return None
        fixed = self._undone({grade_id: causes})
        return None if fixed is None else self._run(grade_id, "own", fixed)

    def upstream(self, grade_id, causes):
        """The mutants `causes` ({failing exercise it builds on: names}) undone there, or, where
        that cannot be done, the reference's answers to those exercises in their place; or None
        (also for a part not answered yet, or one built on parts not answered: nothing to test)."""
        if self.unanswered & ({grade_id} | set(causes)):
            return None
        fixed = self._undone(causes)
        if fixed is not None:
            return self._run(grade_id, "upstream", fixed)
        answers = {name: strip_solution_markers(text) for name, text in self.reference.items()
                   if self.owners.get(name) in causes}
        return self._run(grade_id, "reference", answers) if answers else None

    def _undone(self, causes):
        """{cell: source} with every named mutant undone (checks/repair.py), or None if one cannot be."""
        mutants = [mutant for exercise, names in causes.items() for mutant in self.model.get(exercise, [])
                   if mutant.name in names]
        if not causes or not all(causes.values()) or len(mutants) != sum(map(len, causes.values())):
            return None
        given = dict(self.cells)
        return repaired({cell: given.get(cell, "") for mutant in mutants for cell, _, _ in mutant.edits}, mutants,
                        self.reference)

    def _run(self, grade_id, kind, replaced):
        names = [name for name, _ in self.cells]
        first = min((names.index(name) for name in replaced if name in names), default=None)
        last = max((index for index, name in enumerate(names) if self.owners.get(name) == grade_id), default=None)
        if first is None or last is None or last < first:
            return None
        fixed = tuple(sorted((name, source) for name, source in replaced.items() if name in names))
        return self._span(grade_id, kind, dict(fixed), first, last)

    def _span(self, grade_id, kind, replaced, first, last):
        cells = tuple((name, replaced.get(name, source)) for name, source in self.cells[first:last + 1])
        return Repair(grade_id, kind, cells, tuple(self.raised.get(name, False) for name, _ in cells),
                      tuple(sorted(replaced.items())), (first, last))

    def merged(self, repairs):
        """One run for repairs that change the same cells (`Repair.fixed`): from the first changed
        cell to the last cell any of them checks. The checks are asked after all of them ran, as in
        the submission itself."""
        first, last = min(repair.span[0] for repair in repairs), max(repair.span[1] for repair in repairs)
        return self._span(repairs[0].grade_id, repairs[0].kind, dict(repairs[0].fixed), first, last)

