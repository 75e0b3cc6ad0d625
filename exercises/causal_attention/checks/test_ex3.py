"""Exercise 3: class CausalAttention(d_in, d_out, context_length, dropout, qkv_bias)."""
import pytest
import torch

from autograder.checks import brief, fail

from autograder.checks import expect_tensor

from autograder.checks import diagnosis, expect_reference_output, locate_module, observe_module, paired, randn, student_forward
from .common import (DROPOUT_P, diagnose_weights, causal_mistakes, expect_dropout_on_weights, expect_mask_buffer,
                     expect_moves_to_meta, expect_no_leak, expect_weights_not_uniform, JOURNEY, scale_mistakes,
                     uniform_weights)

NAME = "CausalAttention"
VALUE_HINT = ("Check the scaling (sqrt(d_out)), the softmax dimension (-1) and that the"
              " mask is sliced to the input length.")


@pytest.mark.parametrize("batch, tokens", [(1, 10), (3, 7), (2, 1)])
def test_output_shape(student, rng, batch, tokens):
    """Returns (B, N, d_out) for several batch sizes and inputs up to context_length"""
    handle = student.new(NAME, (5, 4, 10))
    x = randn(rng, batch, tokens, 5)
    student_forward(student, handle, x, shape=(batch, tokens, 4),
                    what=f"For an input of shape {(batch, tokens, 5)}, the output")


@pytest.mark.parametrize("qkv_bias", [False, True])
def test_structure(student, qkv_bias):
    """Has W_query, W_key, W_value (nn.Linear), a dropout layer and a `mask` buffer"""
    handle = student.new(NAME, (5, 4, 9), {"dropout": 0.25, "qkv_bias": qkv_bias})
    structure = student.structure(handle)
    if not structure["is_module"]:
        fail(f"{NAME} should be a subclass of nn.Module.")
    expected = {f"{w}.weight": [4, 5] for w in ("W_query", "W_key", "W_value")}
    if qkv_bias:
        expected.update({f"{w}.bias": [4] for w in ("W_query", "W_key", "W_value")})
    if structure["parameters"] != expected:
        fail(f"With qkv_bias={qkv_bias}, the parameters should be {sorted(expected)} with shapes"
             f" (d_out, d_in), got {brief(structure['parameters'])}. Use nn.Linear(d_in, d_out, bias=qkv_bias).")
    if structure["dropouts"] != {"dropout": 0.25}:
        fail(f"Expected an attribute `dropout` = nn.Dropout(dropout) with p = 0.25, got {brief(structure['dropouts'])}.")
    expect_mask_buffer(student, handle, structure, NAME, 9)
    student_forward(student, handle, torch.zeros(1, 3, 5), shape=(1, 3, 4))


@pytest.mark.weight(2)
@pytest.mark.parametrize("tokens", [12, 5], ids=["full", "short"])
def test_reference_values(student, reference, rng, tokens):
    """Matches the reference output with the same weights, for full and short inputs"""
    expect_reference_output(student, reference, NAME, (6, 4, 12), randn(rng, 3, tokens, 6), rng,
                            f"With {tokens} of 12 tokens, the outputs", VALUE_HINT,
                            mistakes=causal_mistakes)


def observed_weights(student, reference, rng):
    """(the student's attention weights in eval mode, the scores behind them), seen through
    one-hot tokens and an identity value projection (output = weights)."""
    n, d = 7, 8
    w_q, w_k = randn(rng, d, d), randn(rng, d, d)
    handle, _ = paired(student, reference, NAME, (d, d, 10), rng,
                       overrides={"W_query.weight": w_q, "W_key.weight": w_k,
                                  "W_value.weight": torch.eye(d)})
    x = torch.eye(d)[:n].unsqueeze(0)
    # NaNs are allowed here: where they are tells which mistake made them.
    got = expect_tensor(student.forward(handle, x), "The output", shape=(1, n, d), finite=False)[..., :n]
    return got, (x @ w_q.T) @ (x @ w_k.T).transpose(1, 2)


def test_attention_weights(student, reference, rng):
    """Attention weights: rows sum to 1, zero above the diagonal, correct values"""
    got, scores = observed_weights(student, reference, rng)
    d = 8
    expected = reference.mask_before_softmax(scores, d)
    diagnose_weights(got, expected, "The attention weights",
                     [uniform_weights(scores)] + scale_mistakes(reference.mask_before_softmax, scores, d))


def test_no_future_leak(student, reference, rng):
    """Outputs at position t do not depend on tokens after t (values and gradients)"""
    handle, _ = paired(student, reference, NAME, (6, 4, 10), rng)
    expect_no_leak(student, handle, randn(rng, 2, 9, 6), lambda later: later + 3.0, NAME)


def test_dropout_on_weights(student, reference, rng):
    """Dropout acts on the attention weights, in training mode only"""
    n, d = 16, 6
    # Every value vector is all ones, so an output row is the sum of its weights.
    overrides = {"W_value.weight": torch.zeros(d, d), "W_value.bias": torch.ones(d)}
    def built(p):
        return paired(student, reference, NAME, (d, d, n), rng, overrides=overrides, dropout=p, qkv_bias=True)[0]

    handle = built(DROPOUT_P)
    expect_dropout_on_weights(student, handle, randn(rng, 4, n, d), rebuilt=built)
    # ... and those weights must come from the queries and keys: dropout on a plain average
    # of the values checks nothing about attention.
    expect_weights_not_uniform(observed_weights(student, reference, rng)[0], "The attention weights")


def test_moves_with_model(student, rng):
    """The mask moves with the model (.to(device)) and forward creates nothing on the CPU"""
    handle = student.new(NAME, (5, 4, 10))
    expect_moves_to_meta(student, handle, randn(rng, 2, 6, 5), NAME, (2, 6, 4))


@pytest.mark.fixed_inputs("test_reference_values")
def test_canonical_seeded_values(student):
    """Gives the book's values for torch.manual_seed(123) on 'Your journey starts with one step'"""
    handle = student.new(NAME, (3, 2, 6), seed=123)
    got = student_forward(student, handle, torch.stack((JOURNEY, JOURNEY)), shape=(2, 6, 2))
    expected = torch.tensor([[-0.4519, 0.2216], [-0.5874, 0.0058], [-0.6300, -0.0632],
                             [-0.5675, -0.0843], [-0.5526, -0.0981], [-0.5299, -0.1081]])
    if not torch.allclose(got[0], expected, atol=1e-4):
        fail("With torch.manual_seed(123) and CausalAttention(3, 2, 6), the output on the"
             f" notebook's six tokens should start {[round(v, 4) for v in expected[0].tolist()]}, got"
             f" {[round(v, 4) for v in got[0, 0].tolist()]}. Keep W_query, W_key, W_value"
             " created in that order (as given).")


def probe(student, rng):
    """Short and full inputs, with biases, and in training mode with dropout."""
    x_short, x_full = randn(rng, 2, 5, 6), randn(rng, 1, 9, 6)
    yield from observe_module(student, rng, NAME, (6, 4, 9), {"dropout": 0.5, "qkv_bias": True},
                              inputs=[(x_full,), (x_short,)], train_inputs=[(x_full,)])


test_diagnosis = diagnosis(probe, locate_module(NAME, (6, 4, 9), (3, 7, 6), longest=[(3, 9, 6)]))
