"""Issue 44: validate undoes the mistakes the feedback named in the student's own code (authoring/
repair.py) and grades it again, to test every "fails because of the mistake above" it said."""
from autograder.authoring.repair import repaired, undo
from autograder.authoring.validate import named_causes, promised
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


def test_the_promises_are_the_consequences_of_repaired_cells():
    def check(name, passed, because="", cause=()):
        return CheckOutcome(name, name, passed, because=because, cause=list(cause))

    result = Result(student_id="s", assignment="a", status="graded", cells=[
        CellScore("ex3", 0, 1, checks=[check("d", False, cause=["not-scaled"]), check("v", False, "above"),
                                       check("own", False), check("ok", True)]),
        CellScore("ex5", 0, 1, checks=[check("w", False, "Exercise 3"), check("x", False, "Exercise 3 and Exercise 4")]),
        CellScore("ex6", 0, 1, checks=[check("y", False, "above")])])
    causes = named_causes(result)
    assert causes == {"ex3": ["not-scaled"]}
    # ex6's "above" points at a mistake no diagnosis named (a check's own words): nothing to repair;
    # ex5's second check also waits for Exercise 4, which nothing named either
    assert promised(result, causes) == [("ex3", "v"), ("ex5", "w")]


def test_a_repair_written_from_its_first_line_on_sits_as_deep_as_the_reference_says():
    # errors.toml writes `old` from its first line's code on; the later lines keep the reference's depth
    reference = "def f(x):\n    y = x + 1\n    if y:\n        y = 2\n    return y\n"
    old = "y = x + 1\n    if y:\n        y = 2"
    student = "def g(a):\n  y = a\n  return y\n".replace("y = a", "y = x + 1")
    one = Mutant("ex1", "m", "m", (("ex1_answer", old, "y = x + 1"),))
    assert repaired({"ex1_answer": student}, [one], {"ex1_answer": reference}) == {
        "ex1_answer": "def g(a):\n  y = x + 1\n  if y:\n      y = 2\n  return y\n"}
