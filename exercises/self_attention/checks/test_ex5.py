"""Exercise 5: class SelfAttention_v2(d_in, d_out, qkv_bias=False)."""
import pytest
import torch


from autograder.checks import expect_reference_output, randn, student_forward
from .common import expect_parameters, expect_seeded_first_row, expect_weight_rows, self_attention_mistakes
from autograder.checks import diagnosis, locate_module, observe_module, randn

NAME = "SelfAttention_v2"
HINT = "Use nn.Linear(d_in, d_out, bias=qkv_bias) for W_query, W_key and W_value."


@pytest.mark.parametrize("qkv_bias", [False, True])
def test_layers(student, qkv_bias):
    """W_query, W_key, W_value are nn.Linear(d_in, d_out), with a bias only when qkv_bias=True"""
    handle = student.new(NAME, (5, 3), {"qkv_bias": qkv_bias})
    expected = {}
    for name in ("W_query", "W_key", "W_value"):
        expected[f"{name}.weight"] = (3, 5)
        if qkv_bias:
            expected[f"{name}.bias"] = (3,)
    expect_parameters(student.structure(handle), expected, NAME, HINT)
    student_forward(student, handle, torch.zeros(4, 5), shape=(4, 3))


@pytest.mark.weight(2)
@pytest.mark.parametrize("qkv_bias", [False, True])
def test_reference_values(student, reference, rng, qkv_bias):
    """Matches the reference output with the same weights, with and without bias"""
    expect_reference_output(student, reference, NAME, (5, 3), randn(rng, 6, 5), rng,
                            f"With qkv_bias={qkv_bias}, the outputs",
                            "Check the scaling (sqrt(d_out)) and the softmax dimension (-1).",
                            mistakes=self_attention_mistakes, qkv_bias=qkv_bias)


@pytest.mark.fixed_inputs("test_reference_values")
@pytest.mark.after("test_layers")  # a wrong order or layout is named there
def test_canonical_seeded_values(student, reference):
    """Gives the expected values for torch.manual_seed(789) on the notebook's sentence"""
    expect_seeded_first_row(student, NAME, 789, [-0.0739, 0.0713],
                            "Create W_query, W_key and W_value in that order, as nn.Linear layers.", reference)


def test_weight_rows(student, reference, rng):
    """Each token's attention weights are positive and sum to 1"""
    expect_weight_rows(student, reference, NAME, (6, 6), rng, "W_value.weight", torch.eye(6))


def probe(student, rng):
    """d_in 5, d_out 3, with and without qkv_bias, on 7 tokens and on 2."""
    for bias in (True, False):
        yield from observe_module(student, rng, NAME, (5, 3), {"qkv_bias": bias},
                                  inputs=[(randn(rng, 7, 5),), (randn(rng, 2, 5),)])


test_diagnosis = diagnosis(probe, locate_module(NAME, (3, 4), (6, 3)))
