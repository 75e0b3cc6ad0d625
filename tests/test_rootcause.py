"""Root cause once (checks/rootcause.py): a cell built on a broken exercise says to fix that one first."""
from types import SimpleNamespace

import pytest

from autograder.course import CourseError
from autograder.checks.rootcause import root_cause_once
from autograder.checks.runner import CellResult

from helpers import assignment_of, new_course


def check(passed, message=""):
    return SimpleNamespace(description="d", passed=passed, message=message, weight=1.0)


def test_a_cell_built_on_a_failing_one_blames_only_the_failing_one():
    cells = {"ex3": CellResult("ex3", [check(False, "Softmax over the keys.")]),
             "ex5": CellResult("ex5", [check(True), check(False, "Concatenate the heads."),
                                       check(False, "Check the causal mask.")]),
             "ex7": CellResult("ex7", [check(False, "Its own mistake.")]),
             "ex8_model": CellResult("ex8_model", [check(False, "Add token and position embeddings.")])}
    root_cause_once(cells, {"ex5": ["ex3"], "ex7": ["ex6"], "ex8_model": ["ex6", "ex3"]})
    messages = [c.message for c in cells["ex5"].checks]
    assert messages[0] == "" and messages[2] == ""  # said once, on the first failing check
    assert messages[1].startswith("This part builds on Exercise 3, which does not pass its own checks yet:"
                                  " fix Exercise 3 first.")
    assert [c.passed for c in cells["ex5"].checks] == [True, False, False]  # the points do not change
    assert cells["ex7"].checks[0].message == "Its own mistake."  # ex6 is not failing (nor graded here)
    assert "fix Exercise 3 first" in cells["ex8_model"].checks[0].message
    assert cells["ex3"].checks[0].message == "Softmax over the keys."  # the root cause keeps its words


def test_the_bundled_assignments_say_what_builds_on_what_and_a_bad_table_is_named(tmp_path):
    assert assignment_of().builds_on["ex5"] == ["ex3"]
    course = new_course(tmp_path)
    settings = course / "exercises" / "causal_attention" / "assignment.toml"
    settings.write_text(settings.read_text().replace('ex5 = ["ex3"]', 'ex5 = "ex3"'))
    with pytest.raises(CourseError, match=r"\[builds_on\]: each entry is a list"):
        assignment_of(course).builds_on
    settings.write_text(settings.read_text().replace('ex5 = "ex3"', 'ex5 = ["ex33"]'))
    with pytest.raises(CourseError, match="names cells without checks: ex33"):
        assignment_of(course).builds_on


def test_in_a_cell_the_check_that_names_the_mistake_speaks_alone_and_nothing_is_said_twice():
    from autograder.checks.rootcause import one_cause_per_cell

    named = SimpleNamespace(description="a", passed=False, message="Softmax ran over the wrong dimension.",
                            weight=1.0, named=True)
    cells = {"ex3": CellResult("ex3", [check(False, "Check the causal mask."), named, check(True)]),
             "ex1": CellResult("ex1", [check(False, "Not scaled."), check(False, "Not scaled."),
                                       check(False, "Rows do not sum to 1.")])}
    one_cause_per_cell(cells)
    assert [c.message for c in cells["ex3"].checks] == ["", "Softmax ran over the wrong dimension.", ""]
    assert [c.message for c in cells["ex1"].checks] == ["Not scaled.", "", "Rows do not sum to 1."]
    assert [c.passed for c in cells["ex3"].checks] == [False, False, True]  # points unchanged


def test_a_missing_variable_after_its_cell_crashed_names_the_crash():
    from autograder.checks.rootcause import missing_because_crashed

    cells = {"ex4": CellResult("ex4", [check(False, "`causal_embeddings` is not defined. Store the model's output"
                                                    " in a variable with that name."), check(False, "Other.")]),
             "ex5": CellResult("ex5", [check(False, "`multihead_embeddings` is not defined.")])}
    errors = [{"cell": "ex4_script", "error": "Traceback ...\nRuntimeError: shapes do not match"},
              {"cell": "check-05", "error": "AssertionError"}]
    missing_because_crashed(cells, errors)
    assert cells["ex4"].checks[0].message == ("Your cell ex4_script stopped with an error (RuntimeError: shapes do"
                                              " not match), so what it should make was never made: fix that"
                                              " error first.")
    assert cells["ex4"].checks[1].message == ""
    assert cells["ex5"].checks[0].message == "`multihead_embeddings` is not defined."  # its own cells ran


def test_a_returned_tuple_is_named_as_such():
    import torch
    from autograder.checks.verdict import NamedMistake, expect_tensor

    with pytest.raises(NamedMistake, match="returned 2 values \\(a tuple or a list\\): return only the output"):
        expect_tensor([torch.zeros(2), torch.zeros(2)], "The output")


def test_a_crash_that_is_the_missing_name_itself_keeps_the_checks_words():
    from autograder.checks.rootcause import missing_because_crashed

    said = "`causal_embeddings` is not defined. Store the model's output in a variable with that name."
    cells = {"ex4": CellResult("ex4", [check(False, said)])}
    missing_because_crashed(cells, [{"cell": "ex4_script", "error": "NameError: name 'causal_embeddings' is not defined"}])
    assert cells["ex4"].checks[0].message == said


def test_two_checks_naming_the_same_mistake_in_different_outputs_say_it_once():
    from autograder.checks.rootcause import one_cause_per_cell

    def named(message):
        return SimpleNamespace(description=message[:5], passed=False, message=message, weight=1.0, named=True)

    cells = {"ex6": CellResult("ex6", [named("The outputs are not right: each head needs sqrt(d_head)."),
                                       named("The weights of each head are not right: each head needs sqrt(d_head)."),
                                       named("The weights are not right: the mask is inverted.")])}
    one_cause_per_cell(cells)
    assert [c.message for c in cells["ex6"].checks] == [
        "The outputs are not right: each head needs sqrt(d_head).", "",
        "The weights are not right: the mask is inverted."]  # a second mistake keeps its words


def test_checks_that_fail_because_of_a_named_mistake_are_marked_as_its_consequences():
    from autograder.checks.rootcause import consequences, one_cause_per_cell
    from autograder.record import grouped_checks

    def failing(description, message="", **flags):
        return SimpleNamespace(description=description, passed=False, message=message, weight=1.0, because="",
                               **flags)

    diagnosis = failing("Your answer, compared with the common mistakes", "Softmax over the keys: dim=-1.",
                        diagnosis=True)
    diagnosis.weight = 0.0
    moves = failing("The mask moves with the model", "Create the mask as a buffer.")
    dropout = failing("Dropout acts on the attention weights", "Dropout is in the wrong place.")
    cells = {"ex3": CellResult("ex3", [check(True), moves, dropout, diagnosis]),
             "ex5": CellResult("ex5", [failing("Wrapper shape", "Concatenate."), failing("Wrapper values")]),
             "ex6": CellResult("ex6", [failing("Shape"), failing("Values")])}  # nothing named: nothing to follow
    one_cause_per_cell(cells)
    root_cause_once(cells, {"ex5": ["ex3"]})
    consequences(cells)
    assert [c.because for c in (moves, dropout)] == ["above", "above"] and diagnosis.because == ""
    assert [c.because for c in cells["ex5"].checks] == ["", "Exercise 3"]
    assert [c.because for c in cells["ex6"].checks] == ["", ""]
    groups = grouped_checks(cells["ex3"].checks)
    # the cause first, then what follows from it, then the rest in order
    assert [g["description"] for g in groups] == ["d", "Your answer, compared with the common mistakes",
                                                  "The mask moves with the model",
                                                  "Dropout acts on the attention weights"]
    assert [g["because_text"] for g in groups[2:]] == ["fails because of the mistake above"] * 2
    # Shown without the cause (it is hidden until the due date), nothing points "above".
    assert all(not g["because"] for g in grouped_checks([moves, dropout]))


def test_a_check_the_named_mistake_alone_passes_keeps_its_own_words():
    """Issue 44: "fails because of the mistake above" is said only of a check that code with only the
    named mistake (the error model's mutant, run on the grader's side) also fails; one it passes
    shows a second mistake, and keeps its words."""
    from autograder.checks.errormodel import failure, mark_unexplained
    from autograder.checks.outcomes import CheckResult
    from autograder.checks.rootcause import consequences, one_cause_per_cell

    def result(name, passed, message="", **kw):
        return CheckResult("ex6", name, name, 1.0, passed, message, **kw)

    cells = {"ex6": CellResult("ex6", [
        result("test_diagnosis", False, "The whole mask is applied: slice it to the input.", named=True,
               diagnosis=True, cause=("unsliced-mask",)),
        result("test_reference_values[short]", False, "The outputs differ from the expected values."),
        result("test_reference_values[full]", False, "The scores are divided by sqrt(d_out), not sqrt(d_head)."),
        result("test_causal", False, "Your code failed: forward raised TypeError: softmax() missing dim"
                                     " (your line 7: w = torch.softmax(s)) Pass dim=-1."),
        result("test_rows", False, "Your code failed: forward raised IndexError: out of range (your line 4: x[9])"),
        result("test_structure", True)])}
    asked = []

    def outcomes(grade_id, names):
        asked.append((grade_id, names))
        return {"test_reference_values[short]": (False, failure("The outputs differ from the expected values.")),
                "test_reference_values[full]": (True, ""), "test_structure": (True, ""),
                "test_causal": (False, failure("The weights above the diagonal are not zero.")),
                "test_rows": (False, failure("Your code failed: forward raised IndexError: out of range"))}

    consequences(one_cause_per_cell(mark_unexplained(cells, outcomes)))
    short, full, causal, rows = cells["ex6"].checks[1:5]
    assert asked == [("ex6", (("ex6", "unsliced-mask"),))]
    assert short.message == "" and short.because == "above"  # the mutant fails it too: a consequence
    assert full.message.startswith("The scores are divided") and not full.because  # a second mistake
    # The mutant fails it another way (values, where the student's code raises): the crash is not
    # what the named mistake does, so it keeps its words.
    assert "TypeError" in causal.message and not causal.because
    # The same error, the student's line aside: the named mistake raises it too.
    assert rows.message == "" and rows.because == "above"
    unverified = {"ex6": CellResult("ex6", [result("test_diagnosis", False, "Named.", named=True, diagnosis=True),
                                            result("test_output_shape", False, "Generic words.")])}
    consequences(one_cause_per_cell(mark_unexplained(unverified, outcomes)))
    # No mutant named (a check named it, or localisation did): nothing to run, so nothing is shown to
    # follow from it. The check is listed under the mistake as failing too, not as failing because of it.
    assert unverified["ex6"].checks[1].because == "untested: above" and len(asked) == 1
    from autograder.record import consequence_words

    assert consequence_words(unverified["ex6"].checks[1].because) == (
        "fails too: once what is above is fixed, run the checks again to see whether this one passes")
    assert consequence_words("above") == "fails because of the mistake above"


def test_fix_exercise_3_first_is_said_only_of_checks_the_named_upstream_mistake_also_fails():
    """A wrapper built on a CausalAttention whose mistake the error model named: a wrapper check that
    the reference wrapper passes on that mutant is the wrapper's own mistake, and keeps its words."""
    from autograder.checks.errormodel import failure, mark_unexplained
    from autograder.checks.outcomes import CheckResult
    from autograder.checks.rootcause import consequences, one_cause_per_cell

    cells = {"ex3": CellResult("ex3", [CheckResult("ex3", "test_diagnosis", "d", 0.0, False, "Not scaled.", named=True,
                                                   diagnosis=True, cause=("not-scaled",))]),
             "ex5": CellResult("ex5", [CheckResult("ex5", "test_reference_values", "d", 1.0, False, "Values differ."),
                                       CheckResult("ex5", "test_heads_registered", "d", 1.0, False,
                                                   "Keep the heads in an nn.ModuleList.")])}
    asked = []

    def outcomes(grade_id, causes):
        asked.append((grade_id, causes))
        return {"test_reference_values": (False, failure("Values differ.")),
                "test_heads_registered": (True, "")} if grade_id == "ex5" else None

    mark_unexplained(cells, outcomes, {"ex5": ["ex3"]})
    consequences(root_cause_once(one_cause_per_cell(cells), {"ex5": ["ex3"]}))
    values, heads = cells["ex5"].checks
    assert ("ex5", (("ex3", "not-scaled"),)) in asked
    assert "fix Exercise 3 first" in values.message  # the mutant's wrapper fails it too
    assert heads.message == "Keep the heads in an nn.ModuleList." and not heads.because  # its own mistake


def test_a_repair_whose_upstream_still_fails_shows_only_what_it_made_pass():
    """Exercise 6 has two mistakes; the repair run of the language model undid the one the error model
    named, and Exercise 6 still failed there. A check of the model that passed in that run follows
    from the mistake undone; one that still failed may follow from Exercise 6's second mistake, so
    nothing is said of why (untested), and the model is not said to fail on its own."""
    from autograder.checks.errormodel import mark_unexplained
    from autograder.checks.outcomes import CheckResult
    from autograder.checks.rootcause import consequences, one_cause_per_cell, still_failing_wait
    from autograder.record import consequence_words

    def check(name, message=""):
        return CheckResult("ex8", name, name, 1.0, False, message)

    cells = {"ex6": CellResult("ex6", [CheckResult("ex6", "test_diagnosis", "d", 0.0, False, "Unsliced mask.",
                                                   named=True, diagnosis=True, cause=("unsliced-mask",))]),
             "ex8": CellResult("ex8", [check("test_output_shape", "Shapes differ."), check("test_reference_values", "Values differ.")])}
    repaired = {"ex8": ("upstream", {"test_output_shape": True, "test_reference_values": None})}
    mark_unexplained(cells, lambda *_: None, {"ex8": ["ex6"]}, {cell: passed for cell, (_, passed) in repaired.items()})
    still_failing_wait(cells, repaired)
    consequences(root_cause_once(one_cause_per_cell(cells), {"ex8": ["ex6"]}))
    shape, values = cells["ex8"].checks
    assert "fix Exercise 6 first" in shape.message  # said once, on the first
    assert values.message == "" and values.untested and not values.unexplained
    assert consequence_words(values.because) == (
        "fails too: once Exercise 6 passes, run the checks again to see whether this one passes")


def test_a_failure_is_compared_by_the_error_the_code_raised():
    from autograder.checks.errormodel import failure

    assert failure("Your code failed: forward raised RuntimeError: sizes 10 and 7 (your line 3: x = a + b)") == \
        failure("For token ids of shape (2, 5), your model failed: forward raised RuntimeError: sizes 9 and 4")
    assert failure("Your code failed: forward raised TypeError: softmax()") != failure("The weights are not right.")
    assert failure("forward raised TypeError: x") != failure("forward raised RuntimeError: x")
    assert failure("The output has shape (1, 10, 12).") == failure("The output: found NaN values.") == "failed"
