"""Exercise 7: class CrossAttention(d_in, d_out_kq, d_out_v)."""
import pytest
import torch

from autograder.checks import StudentError
from autograder.checks import expect_tensor, fail

from autograder.checks import expect_reference_output, paired, randn
from .common import cross_attention_mistakes, expect_parameters, expect_weight_rows
from autograder.checks import diagnosis, locate_module, observe_module, randn

NAME = "CrossAttention"
HINT = ("W_query and W_key are nn.Parameter(torch.rand(d_in, d_out_kq)), W_value is"
        " nn.Parameter(torch.rand(d_in, d_out_v)).")


def test_parameters(student):
    """Has W_query, W_key (d_in, d_out_kq) and W_value (d_in, d_out_v), created in that order"""
    handle = student.new(NAME, (5, 3, 4))
    expect_parameters(student.structure(handle),
                      {"W_query": (5, 3), "W_key": (5, 3), "W_value": (5, 4)}, NAME, HINT)


@pytest.mark.parametrize("t1, t2", [(4, 7), (6, 2), (1, 3)])
def test_output_shape(student, rng, t1, t2):
    """Returns one row of d_out_v features per token of x_1, for x_2 of any length"""
    handle = student.new(NAME, (5, 3, 4))
    x_1, x_2 = randn(rng, t1, 5), randn(rng, t2, 5)
    what = f"For x_1 of shape {(t1, 5)} and x_2 of shape {(t2, 5)}, the outputs"
    try:
        output = student.forward(handle, x_1, x_2)
    except StudentError as error:
        try:
            student.forward(handle, x_1, randn(rng, t1, 5))
        except StudentError:
            raise error from None
        fail(f"{what}: your forward fails when x_2 is not as long as x_1 ({error}). Keys and"
             " values must both come from x_2, queries from x_1.")
    output = expect_tensor(output, what, finite=False)
    if tuple(output.shape) == (t2, 4) and t1 != t2:
        fail(f"{what} have one row per token of x_2: the queries come from x_2. Queries come from"
             " x_1 (it asks), keys and values from x_2 (it is looked at).")
    expect_tensor(output, what, shape=(t1, 4))


@pytest.mark.weight(2)
@pytest.mark.parametrize("t1, t2", [(5, 8), (6, 3)])
def test_reference_values(student, reference, rng, t1, t2):
    """Matches the reference with the same weights: queries from x_1, keys and values from x_2, scaled by sqrt(d_out_kq)"""
    inputs = (randn(rng, t1, 6), randn(rng, t2, 6))
    expect_reference_output(student, reference, NAME, (6, 3, 5), inputs, rng,
                            f"For {t1} query tokens and {t2} other tokens, the outputs",
                            "Queries from x_1, keys and values from x_2, scores divided by"
                            " sqrt(d_out_kq), softmax over the last dimension.",
                            mistakes=cross_attention_mistakes)


def test_second_input_is_looked_at(student, reference, rng):
    """Changing x_2 changes the output; each query token is handled on its own"""
    handle, _ = paired(student, reference, NAME, (5, 3, 4), rng)
    x_1, x_2 = randn(rng, 4, 5), randn(rng, 6, 5)
    out = expect_tensor(student.forward(handle, x_1, x_2), "The output", shape=(4, 4))
    other = expect_tensor(student.forward(handle, x_1, x_2 + 1.5), "The output", shape=(4, 4))
    if torch.allclose(out, other, atol=1e-6):
        fail("The output does not change when x_2 changes: keys and values must come from x_2.")
    first = expect_tensor(student.forward(handle, x_1[:1], x_2), "The output", shape=(1, 4))
    if not torch.allclose(first, out[:1], atol=1e-5):
        fail("The output for the first token of x_1 changes when the other tokens of x_1 are left"
             " out: the queries from x_1 should not be mixed with each other.")


def test_weight_rows(student, reference, rng):
    """Each query token's weights over the tokens of x_2 are positive and sum to 1"""
    expect_weight_rows(student, reference, NAME, (5, 3, 5), rng, "W_value", randn(rng, 4, 5), torch.eye(5))


def probe(student, rng):
    """d_in 5, d_out_kq 3, d_out_v 4; x_1 of 4 tokens and x_2 of 6, then 2 and 2."""
    yield from observe_module(student, rng, NAME, (5, 3, 4),
                              inputs=[(randn(rng, 4, 5), randn(rng, 6, 5)), (randn(rng, 2, 5), randn(rng, 2, 5))])


test_diagnosis = diagnosis(probe, locate_module(NAME, (3, 4, 5), (5, 3), (6, 3)))
