"""The error model (grading/errormodel.py): mutants apply, probes tell them apart, and the
diagnosis check names them in place of the cell's other messages. In process, no sandbox."""
import importlib
import itertools
import sys

import pytest

from autograder.course import copy_assignment
from autograder.grading import errormodel
from autograder.grading.plugin import CheckResult
from autograder.grading.rootcause import one_cause_per_cell
from autograder.grading.runner import CellResult, run_checks
from autograder.inside.student import NamespaceStudent

from helpers import assignment_of

ASSIGNMENTS = ("causal_attention", "self_attention")
SEED = 11


def probe_of(assignment, exercise):
    """The probe the exercise's diagnosis check runs (closed over by `test_diagnosis`)."""
    sys.path.insert(0, str(assignment.folder.parent))
    try:
        module = importlib.import_module(f"{assignment.name}.checks.test_{exercise}")
    finally:
        sys.path.remove(str(assignment.folder.parent))
    check = module.test_diagnosis
    return next(cell.cell_contents for cell in check.__closure__ if getattr(cell.cell_contents, "__name__", "") == "probe")


def observations(assignment, probe, chosen):
    ns = errormodel.namespace(assignment.solutions, chosen)
    return None if ns is None else errormodel.observe(probe, NamespaceStudent(vars(ns), assignment.resources()), SEED)


def exercises(name):
    assignment = assignment_of(name=name)
    return [(name, exercise) for exercise in errormodel.load(assignment.folder)]


ALL = [case for name in ASSIGNMENTS for case in exercises(name)]


@pytest.mark.parametrize("name, exercise", ALL, ids=[f"{n}-{e}" for n, e in ALL])
def test_every_mutant_is_seen_and_named_as_itself(name, exercise):
    """Each mutant's edit applies, the probe sees it differ from the reference and from every
    other mutant, and the diagnosis names exactly it."""
    assignment = assignment_of(name=name)
    mutants = errormodel.load(assignment.folder)[exercise]
    probe = probe_of(assignment, exercise)
    reference = observations(assignment, probe, ())
    assert reference and not any(isinstance(seen, errormodel.Failed) for seen in reference), reference
    seen_by = {}
    for mutant in mutants:
        seen = observations(assignment, probe, (mutant,))
        assert not errormodel.same(seen, reference), f"the probe cannot see {mutant.name}"
        twins = [other for other, theirs in seen_by.items() if errormodel.same(seen, theirs)]
        assert not twins, f"the probe cannot tell {mutant.name} from {twins}"
        seen_by[mutant.name] = seen
        chosen = errormodel.recognise(seen, probe, assignment.solutions, mutants, SEED, assignment.resources())
        assert [m.name for m in chosen] == [mutant.name]


@pytest.mark.slow
@pytest.mark.parametrize("name", ASSIGNMENTS)
def test_two_mistakes_are_named_as_both(name):
    """Pairs of mistakes in one exercise: nine in ten of those that run to the end are named as
    the pair, and none is named as another pair. (A pair that crashes is named by the mistake
    that crashes first; one mistake can also make another invisible, such as a mask that is
    discarded and also inverted: then what the student sees is the first one's doing.)"""
    assignment = assignment_of(name=name)
    themselves = total = 0
    for _, exercise in exercises(name):
        mutants = errormodel.load(assignment.folder)[exercise]
        probe = probe_of(assignment, exercise)
        for pair in itertools.combinations(mutants, 2):
            seen = observations(assignment, probe, pair)
            if seen is None or isinstance(seen[-1], errormodel.Failed):
                continue
            named = errormodel.recognise(seen, probe, assignment.solutions, mutants, SEED, assignment.resources())
            assert len(named) < 2 or named == pair, (pair, named)
            themselves += named == pair
            total += 1
    print(f"{name}: {themselves} of {total} pairs that run to the end are named as themselves")
    assert total >= 50 and themselves >= 0.9 * total, f"{themselves} of {total} pairs are named as themselves"


def test_a_stale_or_malformed_error_model_is_named(tmp_path):
    assignment = copy_assignment(assignment_of(), tmp_path / "course")
    errors = assignment.folder / errormodel.ERRORS
    text = errors.read_text()
    errors.write_text(text.replace('old = "n = qkt.shape[-1]", new = "n = qkt.shape[0]"',
                                   'old = "n = qkt.shape[-2]", new = "n = qkt.shape[0]"', 1))
    mutant = next(m for m in errormodel.load(assignment.folder)["ex1"] if m.name == "mask-size-from-shape0")
    with pytest.raises(errormodel.ErrorModelError, match="mask-size-from-shape0"):
        errormodel.namespace(assignment.solutions, (mutant,))
    errors.write_text(text + '\n[[mutant]]\nexercise = "ex1"\nname = "not-scaled"\nmessage = "x"\nedit = [{ old = "a", new = "b" }]\n')
    with pytest.raises(errormodel.ErrorModelError, match="two mutants of ex1 are named 'not-scaled'"):
        errormodel.load(assignment.folder)
    errors.write_text('[[mutant]]\nexercise = "ex1"\nname = "x"\n')
    with pytest.raises(errormodel.ErrorModelError, match="has no message, edit"):
        errormodel.load(assignment.folder)


def mutated_namespace(assignment, solved, exercise, *names):
    """A solved notebook's namespace whose exercise behaves like the named mutants."""
    mutants = [m for m in errormodel.load(assignment.folder)[exercise] if m.name in names]
    return {**solved, **{key: value for key, value in vars(errormodel.namespace(assignment.solutions, mutants)).items()
                         if not key.startswith("__")}}


def test_the_diagnosis_speaks_first_and_alone_for_no_points(solved):
    assignment = assignment_of()
    student = NamespaceStudent(mutated_namespace(assignment, solved, "ex3", "mask-discarded"), assignment.resources())
    cell = run_checks(assignment, student, ["ex3"], seed=4)["ex3"]
    one_cause_per_cell({"ex3": cell})
    first = cell.checks[0]
    assert first.diagnosis and first.weight == 0 and not first.passed
    assert first.message.startswith("Nothing is masked")
    assert [c.message for c in cell.checks[1:] if c.message] == []
    assert any(not c.passed for c in cell.checks[1:])  # the points are lost where they were
    without = CellResult("ex3", [c for c in cell.checks if not c.diagnosis])
    assert without.fraction == cell.fraction < 1


def test_two_mistakes_in_one_class_are_both_named(solved):
    assignment = assignment_of()
    namespace = mutated_namespace(assignment, solved, "ex6", "no-output-projection", "scaled-by-d-out")
    cell = run_checks(assignment, NamespaceStudent(namespace, assignment.resources()), ["ex6"], seed=4)["ex6"]
    message = cell.checks[0].message
    assert cell.checks[0].diagnosis and message.startswith("Two things to fix here.")
    assert "projection is missing" in message and "sqrt(d_out)" in message


def test_no_diagnosis_for_right_answers_or_unknown_mistakes(solved):
    assignment = assignment_of()
    right = run_checks(assignment, NamespaceStudent(solved, assignment.resources()), ["ex3", "ex6"], seed=4)
    assert all(not c.diagnosis for cell in right.values() for c in cell.checks)
    odd = mutated_namespace(assignment, solved, "ex6", "no-output-projection")
    projection = odd["MultiHeadAttentionOneModule"].forward

    def forward(self, x):  # a mistake no mutant makes: the output doubled
        return projection(self, x) * 2

    odd["MultiHeadAttentionOneModule"] = type("MultiHeadAttentionOneModule", (odd["MultiHeadAttentionOneModule"],),
                                              {"forward": forward})
    cell = run_checks(assignment, NamespaceStudent(odd, assignment.resources()), ["ex6"], seed=4)["ex6"]
    assert cell.fraction < 1 and not any(c.diagnosis for c in cell.checks)
    assert any("matches none of the common mistakes" in c.message for c in cell.checks)


def test_a_diagnosis_outranks_other_named_checks():
    checks = [CheckResult("ex3", "test_diagnosis", "d", 0.0, False, "Nothing is masked.", named=True, diagnosis=True),
              CheckResult("ex3", "test_values", "v", 1.0, False, "The outputs are not right: a fill of 0.", named=True),
              CheckResult("ex3", "test_leak", "l", 1.0, False, "The future leaks.")]
    cell = CellResult("ex3", checks)
    one_cause_per_cell({"ex3": cell})
    assert [c.message for c in cell.checks] == ["Nothing is masked.", "", ""]
