"""Is the error model right? Every mutant's edit applies, the exercise's probe sees it differ
from the reference and from every other mutant, and the diagnosis names exactly it; pairs of
mutants that run to the end are named as both. `autograder validate` runs this (in this
process: mutants are the reference with an edit, trusted code), and so do the tests."""
import importlib
import itertools
from dataclasses import dataclass, field

from autograder.checks import errormodel
from autograder.checks.runner import _this_course_first

SEED = 11


@dataclass
class ErrorModelReport:
    mutants: int = 0
    pairs: int = 0  # pairs that combine and run to the end on the probe
    pairs_named: int = 0  # of those, named as the pair itself
    pairs_misnamed: list = field(default_factory=list)  # named as a mistake outside the pair (behaves alike)
    problems: list = field(default_factory=list)


def probe_of(assignment, exercise):
    """The probe of the exercise's diagnosis check (checklib.diagnosis), or None."""
    _this_course_first(assignment)
    module = importlib.import_module(f"{assignment.name}.checks.test_{exercise}")
    return getattr(getattr(module, "test_diagnosis", None), "probe", None)


def check_error_model(assignment, pairs=True, seed=SEED):
    report = ErrorModelReport()
    resources = assignment.resources()
    try:
        model = errormodel.load(assignment.folder)
    except errormodel.ErrorModelError as error:
        report.problems.append(str(error))
        return report
    for exercise, mutants in model.items():
        probe = probe_of(assignment, exercise)
        if probe is None:
            report.problems.append(f"{exercise}: mutants but no diagnosis check (test_diagnosis = diagnosis(probe))"
                                   f" in checks/test_{exercise}.py")
            continue
        seen = lambda chosen: errormodel.observations_of(assignment.solutions, chosen, probe, seed, resources)
        try:
            reference = seen(())
            singles = {mutant.name: seen((mutant,)) for mutant in mutants}
        except errormodel.ErrorModelError as error:
            report.problems.append(f"{exercise}: {error}")
            continue
        if any(isinstance(value, errormodel.Raised) for value in reference):
            report.problems.append(f"{exercise}: the probe fails on the reference: {reference[-1].text}")
            continue
        report.mutants += len(mutants)
        for number, mutant in enumerate(mutants):
            if errormodel.same(singles[mutant.name], reference):
                report.problems.append(f"{exercise}: the probe cannot see mutant {mutant.name!r}")
                continue
            twins = [other.name for other in mutants[:number] if errormodel.same(singles[mutant.name], singles[other.name])]
            if twins:
                report.problems.append(f"{exercise}: the probe cannot tell {mutant.name!r} from {twins[0]!r}")
                continue
            named = errormodel.recognise(singles[mutant.name], probe, assignment.solutions, mutants, seed, resources)
            if named != (mutant,):
                report.problems.append(f"{exercise}: mutant {mutant.name!r} is diagnosed as"
                                       f" {[m.name for m in named] or 'nothing'}")
        for pair in itertools.combinations(mutants, 2) if pairs else ():
            observed = seen(pair)
            if observed is None or isinstance(observed[-1], errormodel.Raised):
                continue  # the edits clash, or one mistake stops the code before the other shows
            named = errormodel.recognise(observed, probe, assignment.solutions, mutants, seed, resources)
            report.pairs += 1
            report.pairs_named += named == pair
            if len(named) == 2 and named != pair:
                report.problems.append(f"{exercise}: the pair {[m.name for m in pair]} is diagnosed as"
                                       f" {[m.name for m in named]}")
            elif named and not set(named) <= set(pair):
                report.pairs_misnamed.append(f"{exercise}: {' + '.join(m.name for m in pair)} behaves like"
                                             f" {named[0].name} on the probe")
    return report
