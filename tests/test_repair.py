"""Issue 44: "fails because of the mistake above" and "fix Exercise 3 first" are said only where a
repair run shows them: the named mistakes undone in the student's own code (checks/repair.py,
grading/repairs.py), the checks asked again in a sealed fork; and validate grades every corpus
entry again with its causes repaired, to test what is still said (authoring/validate.py)."""
import pytest

from autograder.checks.repair import repaired, undo
from autograder.authoring.validate import named_causes, promises
from autograder.checks.errormodel import Mutant
from autograder.record import CellScore, CheckOutcome, Result


def test_a_mistake_in_the_mutants_words_is_undone_whatever_the_spacing():
    student = "def f(qkt, d_out):\n    w = torch.softmax(qkt / math.sqrt( d_out ),dim = 1)  # rows\n    return w\n"
    fixed = undo(student, "math.sqrt(d_out), dim=-1)", "math.sqrt(d_out), dim=1)")
    assert fixed == "def f(qkt, d_out):\n    w = torch.softmax(qkt / math.sqrt(d_out), dim=-1)  # rows\n    return w\n"


def test_nothing_is_undone_where_it_would_be_a_guess():
    twice = "a = x.sum(dim=1)\nb = y.sum(dim=1)\n"
    assert undo(twice, "sum(dim=-1)", "sum(dim=1)") is None  # which of the two?
    assert undo("w = scores\n", "scores / 2", "scores") is None  # a lone name says nothing of where
    assert undo("w = s\n", "s / 2", "") is None  # a deletion: nowhere to put it back
    assert undo("w = s.sum(dim=0)\n", "sum(dim=-1)", "sum(dim=1)") is None  # not in the student's code
    assert undo("def broken(:\n", "a b", "c d") is None  # does not tokenize


def test_a_multi_line_repair_takes_the_students_indentation():
    student = "class A:\n        def f(self, x):\n            y = x + 1\n            return y\n"
    old = "    y = x + 1\n    y = y * 2"
    assert undo(student, old, "y = x + 1") == (
        "class A:\n        def f(self, x):\n            y = x + 1\n            y = y * 2\n            return y\n")


def test_every_named_mutant_is_undone_or_none_is():
    one = Mutant("ex1", "dim", "m", (("ex1_answer", "dim=-1)", "dim=1)"),))
    two = Mutant("ex2", "triu", "m", (("ex2_answer", "torch.tril(", "torch.triu("),))
    cells = {"ex1_answer": "w = s.softmax(dim=1)", "ex2_answer": "k = torch.triu(torch.ones(3, 3))"}
    assert repaired(cells, [one, two]) == {"ex1_answer": "w = s.softmax(dim=-1)",
                                            "ex2_answer": "k = torch.tril(torch.ones(3, 3))"}
    assert repaired({"ex1_answer": "w = s.softmax(dim=1)", "ex2_answer": "k = mask"}, [one, two]) is None


def test_the_promises_are_every_check_said_to_fail_because_of_something():
    def check(name, passed, because="", cause=()):
        return CheckOutcome(name, name, passed, because=because, cause=list(cause))

    result = Result(student_id="s", assignment="a", status="graded", cells=[
        CellScore("ex3", 0, 1, checks=[check("d", False, cause=["not-scaled"]), check("v", False, "above"),
                                       check("own", False), check("ok", True)]),
        CellScore("ex5", 0, 1, checks=[check("w", False, "Exercise 3"),
                                       check("x", False, "Exercise 3 and Exercise 4")]),
        CellScore("ex6", 0, 1, checks=[check("y", False, "above")])])
    assert named_causes(result) == {"ex3": ["not-scaled"]}
    own, upstream = promises(result)
    # "above": the mistake named in the same cell (ex6's is named by a check's words, which validate
    # cannot undo; check_repairs then counts the entry as not tested)
    assert own == {("ex3", "v"), ("ex6", "y")}
    assert upstream == {("ex5", "w"): {"3"}, ("ex5", "x"): {"3", "4"}}


def test_a_repair_written_from_its_first_line_on_sits_as_deep_as_the_reference_says():
    # errors.toml writes `old` from its first line's code on; the later lines keep the reference's depth
    reference = "def f(x):\n    y = x + 1\n    if y:\n        y = 2\n    return y\n"
    old = "y = x + 1\n    if y:\n        y = 2"
    student = "def g(a):\n  y = a\n  return y\n".replace("y = a", "y = x + 1")
    one = Mutant("ex1", "m", "m", (("ex1_answer", old, "y = x + 1"),))
    assert repaired({"ex1_answer": student}, [one], {"ex1_answer": reference}) == {
        "ex1_answer": "def g(a):\n  y = x + 1\n  if y:\n      y = 2\n  return y\n"}


def test_a_repair_run_is_the_named_fix_or_the_reference_upstream_then_every_cell_up_to_the_checked_one():
    from autograder.grading.repairs import Planner

    cells = [("given", "import torch"), ("ex1_answer", "w = s.softmax(dim=1)"), ("check-01", "assert w"),
             ("ex2_answer", "class A: y = 2"), ("ex2_script", "a = A()"), ("ex3_answer", "b = a")]
    owners = {"ex1_answer": "ex1", "check-01": "ex1", "ex2_answer": "ex2", "ex2_script": "ex2", "ex3_answer": "ex3"}
    model = {"ex1": [Mutant("ex1", "dim", "m", (("ex1_answer", "dim=-1)", "dim=1)"),))],
             "ex2": [Mutant("ex2", "empty", "m", (("ex2_answer", "x = 1", "y = 2"),))]}
    reference = {"ex1_answer": "w = s.softmax(dim=-1)",
                 "ex2_answer": "### BEGIN SOLUTION\nclass A:\n    x = 1\n### END SOLUTION"}
    planner = Planner(cells, {"check-01": True}, owners, model, reference)
    own = planner.own("ex1", ("dim",))
    assert own.kind == "own" and own.cells == (("ex1_answer", "w = s.softmax(dim=-1)"), ("check-01", "assert w"))
    assert own.raised == (False, True)
    assert planner.own("ex1", ("no-such-mistake",)) is None and planner.own("ex1", ()) is None
    up = planner.upstream("ex3", {"ex2": ("empty",)})
    assert up.cells == (("ex2_answer", "class A: x = 1"), ("ex2_script", "a = A()"), ("ex3_answer", "b = a"))
    # an exercise it builds on that named no mistake: nothing to undo, so the reference's answers
    # (read as one bit: checks/plugin.py)
    ref = planner.upstream("ex3", {"ex2": ("empty",), "ex1": ()})
    assert ref.kind == "reference" and ref.cells[0] == ("ex1_answer", "w = s.softmax(dim=-1)")
    assert ("ex2_answer", "class A:\n    x = 1") in ref.cells and ref.cells[-1] == ("ex3_answer", "b = a")
    # it tells nothing where a cell that ran cleanly now stops on what only the seal refuses; another
    # new error is the repair's own outcome (the student's later code relies on the mistake)
    assert own.lines_up(["", ""]) and own.lines_up(["", "AssertionError"]) and own.lines_up(["AttributeError", ""])
    assert not own.lines_up(["PermissionError", ""]) and not own.lines_up(["ModuleNotFoundError", "AssertionError"])
    assert not own.lines_up(["TimeoutError", ""])  # stopped by the repair's shorter time
    assert own.lines_up(["", "PermissionError"])  # that cell raised before too
    assert not own.lines_up(None) and not own.lines_up([""])
    # nothing to test in a part not answered yet, or built on one
    idle = Planner(cells, {}, owners, model, reference, unanswered={"ex2"})
    assert idle.upstream("ex3", {"ex2": ("empty",)}) is None and idle.own("ex2", ("empty",)) is None
    assert idle.own("ex1", ("dim",)) is not None


def test_a_repair_run_decides_what_follows_from_the_named_mistake():
    """Where a repair run fixed the named mistake, a check is a consequence only if it passes there:
    the trusted reproduction (the mutant alone) is not asked."""
    from autograder.checks.errormodel import mark_unexplained
    from autograder.checks.outcomes import CheckResult
    from autograder.checks.runner import CellResult

    def result(name, passed, message="", **kw):
        return CheckResult("ex6", name, name, 1.0, passed, message, **kw)

    cells = {"ex6": CellResult("ex6", [result("test_diagnosis", False, "Slice the mask.", named=True, diagnosis=True,
                                              cause=("mask-not-sliced",)),
                                       result("test_short", False, "forward raised RuntimeError: sizes"),
                                       result("test_full", False, "forward raised RuntimeError: sizes"),
                                       result("test_new", False, "forward raised RuntimeError: sizes")])}

    def never(grade_id, causes):
        raise AssertionError("the repair run has answered")

    mark_unexplained(cells, never, repaired={"ex6": {"test_short": True, "test_full": False}})
    assert [check.unexplained for check in cells["ex6"].checks] == [False, False, True, True]


@pytest.mark.slow
def test_a_wrapper_with_its_own_mistakes_is_not_told_to_fix_exercise_3_first(tmp_path):
    """h44-a: the mask hides the diagonal (Exercise 3, named), and the wrapper's heads are full size
    and drop the bias option (Exercise 5's own). With Exercise 3's mistake undone in a repair run
    the wrapper's checks still fail: the wrapper is diagnosed there, and only the checks the repair
    makes pass wait for Exercise 3. Graded in the sandbox, then again by validate with the cause
    repaired."""
    from autograder.authoring.validate import grade_corpus

    from helpers import COURSE

    name = "h44-a-ex3-diagonal-masked-ex5-full-heads-bias-dropped"
    report = grade_corpus(COURSE.assignment("causal_attention"), tmp_path / "submissions", 0, 2, tmp_path / "graded",
                          only={name})
    cells = {cell.name: cell for cell in report.results[name].cells}
    assert [check.cause for check in cells["ex3"].checks if check.cause] == [["diagonal-masked"]]
    # the wrapper, diagnosed again in that repair, has its own mistakes named, both of them, in one line
    said = next(check.message for check in cells["ex5"].checks if check.name == "test_diagnosis")
    assert said.startswith("This part builds on Exercise 3") and "this part still fails on its own" in said
    assert "d_out // num_heads" in said and "qkv_bias" in said
    # its checks that still fail say nothing more, and none is said to wait for Exercise 3
    shapes = [check for check in cells["ex5"].checks if check.name.startswith("test_output_shape")]
    assert shapes and all(not check.passed and not check.message and not check.because for check in shapes)
    waiting = [check for check in cells["ex5"].checks if check.because]
    assert report.repairs.tested == [name] and report.repairs.contradicted == {}
    assert report.repairs.lines >= len(waiting) + sum(1 for check in cells["ex3"].checks if check.because)


def test_a_diagnosis_says_what_fixing_its_mistake_earns_as_the_repair_run_showed():
    from autograder.checks.outcomes import CheckResult
    from autograder.checks.rootcause import what_fixing_earns
    from autograder.checks.runner import CellResult

    def cell(*checks):
        return CellResult("ex3", [CheckResult("ex3", "test_diagnosis", "d", 0.0, False, "Not scaled.", named=True,
                                              diagnosis=True, cause=("not-scaled",)), *checks])

    def check(name, passed, weight=1.0):
        return CheckResult("ex3", name, name, weight, passed, "" if passed else "wrong")

    cells = {"ex3": cell(check("a", False, 2.0), check("b", False), check("c", True))}
    what_fixing_earns(cells, {"ex3": ("own", {"a": True, "b": True, "c": True})}, {"ex3": 4})
    assert cells["ex3"].checks[0].message == "Not scaled. Fixing this makes 2 more checks pass (+3 points)."
    cells = {"ex3": cell(check("a", False, 2.0), check("b", False), check("c", True))}
    what_fixing_earns(cells, {"ex3": ("own", {"a": True, "b": False, "c": True})}, {"ex3": 4})
    assert cells["ex3"].checks[0].message == ("Not scaled. Fixing this makes 1 more check pass (+2 points); something"
                                              " else is wrong here too.")
    cells = {"ex3": cell(check("a", False), check("c", True))}
    what_fixing_earns(cells, {"ex3": ("own", {"a": False, "c": True})}, {"ex3": 4})
    assert cells["ex3"].checks[0].message.endswith("Fixing this alone makes no other check pass yet: something else"
                                                   " is wrong here too.")
    # a repair that was not the named mistake undone (the reference's answer upstream) earns nothing said
    cells = {"ex3": cell(check("a", False))}
    what_fixing_earns(cells, {"ex3": ("reference", {"a": True})}, {"ex3": 4})
    assert cells["ex3"].checks[0].message == "Not scaled."


def test_a_part_that_still_fails_once_what_it_builds_on_is_fixed_says_so_once():
    from autograder.checks.outcomes import CheckResult
    from autograder.checks.rootcause import consequences, still_failing_wait, still_wrong_once_fixed
    from autograder.checks.runner import CellResult

    said = still_wrong_once_fixed(["ex4"], "")
    assert said == ("This part builds on Exercise 4, which does not pass its own checks yet: fix Exercise 4 first."
                    " With the mistake named there fixed, this part still fails on its own. Once Exercise 4 passes,"
                    " compare this part with the exercise text.")
    assert still_wrong_once_fixed(["ex4", "ex5"], "Two heads.").endswith(
        "do not pass their own checks yet: fix Exercise 4 and Exercise 5 first. With the mistakes named there fixed,"
        " this part still fails on its own: Two heads.")

    def check(name, passed, message=""):
        return CheckResult("ex6", name, name, 1.0, passed, message)

    cells = {"ex6": CellResult("ex6", [CheckResult("ex6", "test_diagnosis", "d", 0.0, False, said, named=True,
                                                   diagnosis=True),
                                       check("copied", False, "After the copy, it needs the transpose."),
                                       check("same", False, ""), check("ok", True)])}
    consequences(still_failing_wait(cells, {"ex6": ("upstream", {"copied": False, "same": True})}))
    _, copied, same, _ = cells["ex6"].checks
    # its words describe it built on the broken Exercise 4: not said; and not said to follow from it
    assert copied.message == "" and not copied.because
    assert same.because == "Exercise 4"  # the repair made it pass: a consequence
    assert still_wrong_once_fixed(["ex4"], "", right=True).startswith(
        "This part builds on Exercise 4, which does not pass its own checks yet: fix Exercise 4 first. With Exercise 4"
        " right, this part still fails on its own.")
