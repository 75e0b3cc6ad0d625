"""The error model (checks/errormodel.py): mutants apply, probes tell them apart, and the
diagnosis check names them in place of the cell's other messages. In process, no sandbox."""
import pytest

from autograder.authoring.errorcheck import check_error_model
from autograder.course import copy_assignment
from autograder.checks import errormodel
from autograder.checks.outcomes import CheckResult
from autograder.checks.rootcause import one_cause_per_cell
from autograder.checks.runner import CellResult, run_checks
from autograder.inside.student import NamespaceStudent

from helpers import assignment_of

ASSIGNMENTS = ("causal_attention", "self_attention")


@pytest.mark.parametrize("name", ASSIGNMENTS)
def test_every_mutant_is_seen_and_named_as_itself(name):
    """Each mutant's edit applies, the probe sees it differ from the reference and from every
    other mutant, and the diagnosis names exactly it (what `autograder validate` reports)."""
    report = check_error_model(assignment_of(name=name), pairs=False)
    assert report.problems == [] and report.mutants >= 40


@pytest.mark.slow
@pytest.mark.parametrize("name", ASSIGNMENTS)
def test_two_mistakes_are_named_as_both(name):
    """Pairs of mistakes in one exercise: nine in ten of those that run to the end are named as
    the pair, and none is named as another pair. (A pair that crashes is named by the mistake
    that crashes first; one mistake can also make another invisible, such as a mask that is
    discarded and also inverted: then what the student sees is the first one's doing.)"""
    report = check_error_model(assignment_of(name=name))
    print(f"{name}: {report.pairs_named} of {report.pairs} pairs that run to the end are named as themselves")
    assert report.problems == []
    assert report.pairs >= 50 and report.pairs_named >= 0.9 * report.pairs


def test_the_error_model_check_finds_what_is_wrong(tmp_path):
    """A mutant the probe cannot see, two it cannot tell apart, and an exercise whose checks have
    no diagnosis are each reported."""
    assignment = copy_assignment(assignment_of(), tmp_path / "course")
    errors = assignment.folder / errormodel.ERRORS
    errors.write_text(errors.read_text() + """
[[mutant]]
exercise = "ex1"
name = "comment-only"
message = "x"
edit = [{ old = "n = qkt.shape[-1]", new = "n = qkt.shape[-1]  # the same" }]

[[mutant]]
exercise = "ex6"
name = "plus-zero"
message = "x"
edit = [{ old = "return self.projection(context)", new = "return self.projection(context) + 0.0" }]

[[mutant]]
exercise = "ex4"
name = "no-probe"
message = "x"
edit = [{ cell = "ex4_script", old = "x_batch = torch.randn(20, 100, 512)", new = "x_batch = torch.randn(20, 100, 511)" }]
""")
    problems = check_error_model(assignment, pairs=False).problems
    assert "ex1: the probe cannot see mutant 'comment-only'" in problems
    assert "ex6: the probe cannot see mutant 'plus-zero'" in problems
    assert any(p.startswith("ex4: mutants but no diagnosis check") for p in problems)
    errors.write_text(errors.read_text().replace('new = "return self.projection(context) + 0.0"', 'new = "return context"'))
    problems = check_error_model(assignment, pairs=False).problems
    assert "ex6: the probe cannot tell 'plus-zero' from 'no-output-projection'" in problems


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


def test_the_language_model_is_checked_with_the_students_own_attention(solved):
    """A wrong attention module (Exercise 6) under a right language model: the model's own code is
    found right with the student's attention inside, and the student is told to fix Exercise 6."""
    from autograder.checks.rootcause import root_cause_once

    assignment = assignment_of()
    namespace = mutated_namespace(assignment, solved, "ex6", "scaled-by-d-out")
    cells = run_checks(assignment, NamespaceStudent(namespace, assignment.resources()), ["ex6", "ex8_model"], seed=4)
    one_cause_per_cell(cells)
    root_cause_once(cells, assignment.builds_on)
    lm = cells["ex8_model"]
    assert lm.fraction < 1
    said = [c.message for c in lm.checks if c.message]
    assert len(said) == 1 and said[0].startswith("Your language model itself is put together right")
    model = errormodel.load(assignment.folder)
    pick = lambda exercise, name: next(m for m in model[exercise] if m.name == name)
    edited = errormodel.namespace(assignment.solutions, (pick("ex6", "scaled-by-d-out"), pick("ex8_model", "no-positions")))
    both = {**solved, **{key: value for key, value in vars(edited).items() if not key.startswith("__")}}
    cells = run_checks(assignment, NamespaceStudent(both, assignment.resources()), ["ex6", "ex8_model"], seed=4)
    assert cells["ex6"].fraction < 1 and cells["ex8_model"].fraction < 1
    assert not any(c.diagnosis for c in cells["ex8_model"].checks)  # its own code is wrong too: not said right
    alone = run_checks(assignment, NamespaceStudent(namespace, assignment.resources()), ["ex8_model"], seed=4)
    assert alone["ex8_model"].checks[0].diagnosis  # graded alone (in-kernel): the model's own check still tells


def test_consequences_say_nothing_more_and_leave_the_cause_speaking():
    from autograder.checks.outcomes import quiet_consequences

    checks = [CheckResult("ex5", "test_heads", "h", 1.0, False, "A plain Python list."),
              CheckResult("ex5", "test_values[full]", "v", 1.0, False, "The outputs are not right: x.", named=True,
                          after=("test_heads",)),
              CheckResult("ex5", "test_book", "b", 1.0, False, "Not the book's values.", needs=("test_values",))]
    cell = CellResult("ex5", quiet_consequences(checks))
    one_cause_per_cell({"ex5": cell})  # the quieted named check no longer silences the cause
    assert [c.message for c in cell.checks] == ["A plain Python list.", "", ""]
    assert [c.passed for c in cell.checks] == [False, False, False]


def test_a_hostile_error_text_costs_the_grader_little():
    """The text of an error comes from the sandbox, where student code can write anything."""
    import time

    from autograder.checks.verdict import hint_for

    hostile = " (your line 1: " * 200_000 + "x"
    started = time.perf_counter()
    assert errormodel.without_where(hostile) == hostile
    hint_for(hostile)
    assert time.perf_counter() - started < 0.5
    assert errormodel.without_where("forward raised E: boom (your line 12: y = x.T)") == "forward raised E: boom"
    assert "mat1" not in hint_for("forward raised E: boom (your line 3: mat1 and mat2 shapes cannot be multiplied (1x2 and 3x4))")


def test_the_bias_message_needs_a_bias_option(solved):
    """Layers without bias are named as an unpassed bias option only when one was asked for."""
    from autograder.checks.checklib import paired
    from autograder.course.reference import load

    assignment = assignment_of()
    no_bias = mutated_namespace(assignment, solved, "ex3", "qkv-bias-ignored")
    student = NamespaceStudent(no_bias)
    rng = __import__("torch").Generator().manual_seed(0)
    from autograder.checks.verdict import NamedMistake

    with pytest.raises(NamedMistake, match=r"although qkv_bias=True asks for one"):
        paired(student, load(assignment.solutions), "CausalAttention", (5, 4, 9), rng, qkv_bias=True)
    paired(student, load(assignment.solutions), "CausalAttention", (5, 4, 9), rng, qkv_bias=False)  # no complaint


def test_a_diagnosis_runs_after_checks_added_below_it(tmp_path, solved):
    """An instructor who appends a check to a file still gets the diagnosis after it."""
    assignment = copy_assignment(assignment_of(), tmp_path / "course")
    checks = assignment.folder / "checks" / "test_ex6.py"
    checks.write_text(checks.read_text() + '''

def test_added_last(student):
    """An instructor's check below the diagnosis"""
    assert False, "added last and failing"
''')
    cell = run_checks(assignment, NamespaceStudent(solved, assignment.resources()), ["ex6"], seed=4)["ex6"]
    assert [c.name for c in cell.checks if not c.passed] == ["test_added_last"]
    wrong = mutated_namespace(assignment_of(), solved, "ex6", "no-output-projection")
    cell = run_checks(assignment, NamespaceStudent(wrong, assignment.resources()), ["ex6"], seed=4)["ex6"]
    assert cell.checks[0].diagnosis and "projection is missing" in cell.checks[0].message


def test_edited_references_follow_the_solutions_file_when_it_changes(tmp_path):
    """Regions are read and compiled once per text (the error model builds hundreds of edited
    references from one file), but a changed file is read again."""
    import os

    from autograder.course import reference

    solutions = tmp_path / "solutions.py"
    solutions.write_text("# %% ex1_answer\ndef scale(x):\n    return x * 2\n")
    edit = [("ex1_answer", "x * 2", "x * 3")]
    assert reference.load(solutions).scale(1) == 2 and reference.load(solutions, edit).scale(1) == 3
    solutions.write_text("# %% ex1_answer\ndef scale(x):\n    return x * 2 + 1\n")
    os.utime(solutions, ns=(10**18, 10**18))  # a new version, whatever the clock's resolution
    assert reference.edited_regions(solutions, edit)["ex1_answer"].strip().endswith("return x * 3 + 1")
    namespace = reference._execute(solutions, include_scripts=False, edits=tuple(edit))
    assert namespace.scale(1) == 4


WARMED = r"""
import sys, torch
from autograder.checks import errormodel
from autograder.checks.runner import CheckSession
from helpers import assignment_of

assignment = assignment_of()
session = CheckSession(assignment)  # the checks loaded first, as a grading worker does
errormodel.warm_up()
paid = "sympy" in sys.modules  # the meta device's first call, paid here
outcomes = errormodel.reproduced(session, assignment, "ex3", (("ex3", "fill-zero"),), 0)
session.close()
print(paid, "torch._dynamo" in sys.modules, sorted(name for name, (ok, _) in outcomes.items() if not ok))
"""


def test_a_warmed_grader_reproduces_a_mistake_without_torchs_compiler(tmp_path):
    """A grading worker pays torch's first-call costs once, while its sandbox starts
    (errormodel.warm_up): the first mistake it reproduces in its own process, whose checks move a
    module to the meta device, then neither imports torch's compiler (about 1.5 s inside one
    student's grading time) nor changes what the mistake alone fails."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    tests = Path(__file__).resolve().parent
    done = subprocess.run([sys.executable, "-c", WARMED], cwd=tests, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PYTHONPATH": f"{tests}{os.pathsep}{tests.parent}"})
    assert done.returncode == 0, done.stderr[-3000:]
    paid, compiler, failing = done.stdout.strip().splitlines()[-1].split(" ", 2)
    assert (paid, compiler) == ("True", "False")
    assert "test_reference_values" in failing and "test_moves_with_model" not in failing
