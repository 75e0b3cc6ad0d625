"""Issue 44: a second mistake is named, not hidden under the first.

A failure a check shows to be its own (`fail(apart=True)`) keeps its words beside a mistake named
elsewhere in its cell; a mistake a check can repair and go past (several values returned) is said
with what the check found past it; a parametrised check's case that fails another way is said; a
crash at the student's own line is not quieted by the check it comes after.
"""
import pytest
import torch

from autograder.checks.errormodel import mark_unexplained
from autograder.checks.outcomes import CheckResult, quiet_consequences
from autograder.checks.rootcause import consequences, one_cause_per_cell, root_cause_once
from autograder.checks.runner import CellResult
from autograder.checks.verdict import (MistakeApart, NamedMistake, expect_tensor, fail, repairs_begin, repairs_end,
                                       sized_shape)
from autograder.record import CheckOutcome, grouped_checks
from autograder.wire import StudentError


def result(grade_id, name, passed, message="", **kw):
    return CheckResult(grade_id, name, name, 1.0, passed, message, **kw)


def no_reproduction(grade_id, causes):
    return None  # a mistake named by localisation or a check's words: nothing of the error model to run


def test_a_mistake_apart_keeps_its_words_beside_a_named_one_and_the_others_fail_too():
    cells = {"ex6": CellResult("ex6", [
        result("ex6", "test_diagnosis", False, "The values first go wrong at line 29: it divides by 2.", named=True,
               diagnosis=True),
        result("ex6", "test_reference_values", False, "The outputs differ."),
        result("ex6", "test_dropout_on_weights", False, "In training mode no attention weight was dropped.",
               apart=True)])}
    consequences(one_cause_per_cell(mark_unexplained(cells, no_reproduction)))
    _, values, dropout = cells["ex6"].checks
    assert dropout.message.startswith("In training mode") and not dropout.because  # its own mistake, said
    assert values.message == "" and values.because == "untested: above"  # fails too: nothing showed why


def test_a_mistake_apart_in_a_cell_built_on_a_failing_exercise_waits_for_that_one():
    # The wrapper's dropout runs the heads' own code: a dropout mistake may be Exercise 3's.
    cells = {"ex3": CellResult("ex3", [result("ex3", "test_values", False, "Wrong scale.", named=True)]),
             "ex5": CellResult("ex5", [result("ex5", "test_dropout_on_weights", False, "No weight was dropped.",
                                              apart=True)])}
    builds_on = {"ex5": ["ex3"]}
    root_cause_once(one_cause_per_cell(mark_unexplained(cells, no_reproduction, builds_on)), builds_on)
    dropout = cells["ex5"].checks[0]
    assert not dropout.unexplained and "fix Exercise 3 first" in dropout.message


def test_a_repair_run_that_makes_a_mistake_apart_pass_wins_over_the_checks_reading():
    cells = {"ex6": CellResult("ex6", [
        result("ex6", "test_diagnosis", False, "Named.", named=True, diagnosis=True, cause=("m",)),
        result("ex6", "test_dropout_on_weights", False, "No weight was dropped.", apart=True)])}
    mark_unexplained(cells, no_reproduction, repaired={"ex6": {"test_dropout_on_weights": True}})
    assert not cells["ex6"].checks[1].unexplained  # the run showed it follows from the named mistake
    # ... and the named mistake alone failing it the same way shows it can follow from it too
    cells["ex6"].checks[1].unexplained = False
    mark_unexplained(cells, lambda grade_id, causes: {"test_dropout_on_weights": (False, "failed")})
    assert not cells["ex6"].checks[1].unexplained


def test_apart_is_a_failure_that_quiets_nothing():
    with pytest.raises(MistakeApart) as raised:
        fail("Created in another order.", apart=True)
    assert not isinstance(raised.value, NamedMistake) and isinstance(raised.value, pytest.fail.Exception)


def failed(message):
    with pytest.raises(pytest.fail.Exception) as raised:
        pytest.fail(message, pytrace=False)
    return raised.value


def test_several_values_returned_are_repaired_and_the_check_goes_on_with_the_first():
    context, weights = torch.ones(3, 2), torch.zeros(3, 3)
    token = repairs_begin()
    assert expect_tensor([context, weights], "The context vectors") is context
    ending = repairs_end(token, failed("For inputs of shape (3, 2), the context vectors are not right: scaled."))
    assert isinstance(ending, NamedMistake)
    assert str(ending.msg) == (
        "The context vectors should be one torch tensor, but your code returned 2 values (a tuple or a list):"
        " return only the output tensor, not the weights or a loss beside it. With only the first of them"
        " returned, this check still fails: for inputs of shape (3, 2), the context vectors are not right: scaled.")
    token = repairs_begin()
    expect_tensor((context, weights), "The output")
    assert str(repairs_end(token, None).msg).endswith("With only the first of them returned, this check passes.")
    token = repairs_begin()
    expect_tensor((context, weights), "The output")
    assert "this check still fails: your code failed: boom" in str(repairs_end(token, StudentError("boom")).msg)
    token = repairs_begin()
    expect_tensor((context, weights), "The output")
    assert str(repairs_end(token, KeyError("the check broke")).msg).endswith("beside it.")  # tells nothing more


def test_outside_a_check_that_takes_repairs_several_values_fail_at_once():
    with pytest.raises(NamedMistake, match="returned 2 values"):
        expect_tensor([torch.ones(2), torch.ones(2)], "The output")
    token = repairs_begin()
    with pytest.raises(NamedMistake, match="returned 2 values"):  # nothing to go on with: not a tensor first
        expect_tensor(["text", torch.ones(2)], "The output")
    assert repairs_end(token, None) is None


def test_a_shape_says_which_size_went_where():
    sizes = {"context_length": 8, "vocab_size": 50, "emb_dim": 12, "att_dim": 12, "num_heads": 3}
    assert sized_shape((50, 8), sizes) == "(50, 8), that is (vocab_size, context_length)"
    assert sized_shape((8, 12), sizes) == "(8, 12), that is (context_length, emb_dim or att_dim)"
    assert sized_shape((50, 7), sizes) == "(50, 7)"  # 7 is none of them: no names at all
    assert sized_shape((3, 3), {"a": 3, "b": 3, "c": 3}) == "(3, 3)"  # three share it: no guess


def outcome(description, passed, message=""):
    return CheckOutcome(name=description, description=description, passed=passed, message=message)


def test_a_case_that_fails_in_another_way_is_said_once_beside_the_first():
    cases = [outcome("windows", False, "For 23 tokens and stride 1, expected 19 windows, got 5."),
             outcome("windows", False, "For 23 tokens and stride 3, expected 6 windows, got 4."),
             outcome("windows", False, "dataset[0] (stride 4): input_ids holds the window's first 3 tokens."),
             outcome("windows", False, "dataset[1] (stride 2): target_ids holds its first 2 tokens.")]
    message = grouped_checks(cases)[0]["message"]
    assert message == ("For 23 tokens and stride 1, expected 19 windows, got 5. Another case of this check fails"
                       " in another way: dataset[0] (stride 4): input_ids holds the window's first 3 tokens.")


def test_a_crash_at_the_students_own_line_is_not_quieted_by_the_check_it_comes_after():
    checks = [result("ex8_data", "test_dataset_windows[5-3]", False, "Expected 6 windows, got 18."),
              result("ex8_data", "test_stride_used", False, "Your code failed: `my_batch` raised ConnectionError: no"
                     " network (your line 30: tokenizer = tiktoken.get_encoding('gpt2'))",
                     after=("test_dataset_windows",)),
              result("ex8_data", "test_batches", False, "Your code failed: iterating raised RuntimeError: stack expects"
                     " each tensor to be equal size", after=("test_dataset_windows",)),
              result("ex8_data", "test_shuffle", False, "With shuffle=True every window should appear once.",
                     after=("test_dataset_windows",))]
    quiet_consequences(checks)
    assert "ConnectionError" in checks[1].message  # my_batch's own line: the windows' check never ran it
    assert checks[2].message == ""  # raised in library code, on the windows the first check found wrong
    assert checks[3].message == ""


def test_layers_where_the_exercise_asks_for_parameters_are_not_told_to_use_layers():
    """A message that says which names are missing tells the student what the exercise asks for,
    read from the reference: here nn.Parameter, not the nn.Linear layers the student used."""
    from torch import nn

    from autograder.checks.checklib import paired
    from autograder.course import reference as reference_code
    from autograder.inside.student import NamespaceStudent
    from helpers import COURSE

    class CrossAttention(nn.Module):
        def __init__(self, d_in, d_out_kq, d_out_v):
            super().__init__()
            self.W_query, self.W_key = nn.Linear(d_in, d_out_kq), nn.Linear(d_in, d_out_kq)
            self.W_value = nn.Linear(d_in, d_out_v)

    reference = reference_code.load(COURSE.root / "solutions" / "self_attention.py")
    with pytest.raises(pytest.fail.Exception) as failed:
        paired(NamespaceStudent({"CrossAttention": CrossAttention}), reference, "CrossAttention", (5, 3, 4),
               torch.Generator().manual_seed(0))
    said = str(failed.value)
    assert "no parameter named W_query" in said and "each an nn.Parameter" in said and "nn.Linear" not in said

    class Forged(NamespaceStudent):  # a sandbox that reports names the reference does not have
        def build(self, *args, **kwargs):
            built = super().build(*args, **kwargs)
            built["report"]["missing"] = ["W_query.weight", "W_key.weight"]
            return built

    with pytest.raises(pytest.fail.Exception) as failed:
        paired(Forged({"CrossAttention": CrossAttention}), reference, "CrossAttention", (5, 3, 4),
               torch.Generator().manual_seed(0))
    assert "(layers or nn.Parameter, as it asks)" in str(failed.value)  # the reference's words, not the report's
