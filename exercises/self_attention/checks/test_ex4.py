"""Exercise 4: class SelfAttention_v1(d_in, d_out)."""
import pytest
import torch


from autograder.checks import expect_reference_output, randn, student_forward
from .common import expect_parameters, expect_seeded_first_row, expect_weight_rows, self_attention_mistakes
from autograder.checks import diagnosis, locate_module, observe_module, randn

NAME = "SelfAttention_v1"
HINT = "Use nn.Parameter(torch.rand(d_in, d_out)) for W_query, W_key and W_value."


def test_parameters(student):
    """Has trainable W_query, W_key, W_value of shape (d_in, d_out), created in that order"""
    handle = student.new(NAME, (5, 3))
    structure = student.structure(handle)
    expect_parameters(structure, {"W_query": (5, 3), "W_key": (5, 3), "W_value": (5, 3)}, NAME, HINT)
    student_forward(student, handle, torch.zeros(4, 5), shape=(4, 3))


@pytest.mark.weight(2)
@pytest.mark.parametrize("tokens", [7, 1])
def test_reference_values(student, reference, rng, tokens):
    """Matches the reference output with the same weights (scaled by sqrt(d_out), softmax over keys)"""
    expect_reference_output(student, reference, NAME, (5, 3), randn(rng, tokens, 5), rng,
                            f"For {tokens} tokens, the outputs",
                            "Check the scaling (sqrt(d_out)) and the softmax dimension (-1).",
                            mistakes=self_attention_mistakes)


@pytest.mark.fixed_inputs("test_reference_values")
@pytest.mark.after("test_parameters")  # a wrong order or layout is named there
def test_canonical_seeded_values(student, reference):
    """Gives the expected values for torch.manual_seed(123) on the notebook's sentence"""
    expect_seeded_first_row(student, NAME, 123, [0.2996, 0.8053],
                            "Create W_query, W_key and W_value in that order, each with torch.rand (not torch.randn).",
                            reference)


def test_weight_rows(student, reference, rng):
    """Each token's attention weights are positive and sum to 1"""
    expect_weight_rows(student, reference, NAME, (6, 6), rng, "W_value", torch.eye(6))


def probe(student, rng):
    """d_in 5, d_out 3, on 7 tokens and on 2."""
    yield from observe_module(student, rng, NAME, (5, 3), inputs=[(randn(rng, 7, 5),), (randn(rng, 2, 5),)])


test_diagnosis = diagnosis(probe, locate_module(NAME, (3, 4), (6, 3)))
