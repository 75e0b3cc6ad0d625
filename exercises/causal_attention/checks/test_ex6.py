"""Exercise 6: class MultiHeadAttentionOneModule."""
import pytest
import torch

from autograder.checks import brief, expect_tensor, fail

from autograder.checks import diagnosis, expect_reference_output, locate_module, observe_module, paired, randn, student_forward
from .common import (DROPOUT_P, diagnose_weights, expect_dropout_on_weights, expect_mask_buffer, expect_moves_to_meta,
                     expect_no_leak, expect_weights_not_uniform, JOURNEY, one_module_mistakes, scale_mistakes,
                     uniform_weights)

NAME = "MultiHeadAttentionOneModule"


@pytest.mark.parametrize("batch, tokens", [(2, 7), (1, 10), (3, 1)])
def test_output_shape(student, rng, batch, tokens):
    """Returns (B, N, d_out) with 3 heads of 4 features, for inputs up to context_length"""
    handle = student.new(NAME, (6, 12, 3, 10))
    student_forward(student, handle, randn(rng, batch, tokens, 6), shape=(batch, tokens, 12),
                    what=f"For an input of shape {(batch, tokens, 6)}, the output")


def test_structure(student):
    """Has W_query, W_key, W_value, projection, dropout, a `mask` buffer, num_heads and d_head"""
    handle = student.new(NAME, (5, 6, 3, 9), {"dropout": 0.1})
    structure = student.structure(handle)
    if not structure["is_module"]:
        fail(f"{NAME} should be a subclass of nn.Module.")
    expected = {f"{w}.weight": [6, 5] for w in ("W_query", "W_key", "W_value")}
    expected.update({"projection.weight": [6, 6], "projection.bias": [6]})
    if structure["parameters"] != expected:
        fail(f"The parameters should be {sorted(expected)}, got {brief(sorted(structure['parameters']))}"
             f" (with their shapes: {brief(structure['parameters'])}).")
    attributes = structure["attributes"]
    if attributes.get("num_heads") != 3 or attributes.get("d_head") != 2:
        fail("Expected integer attributes num_heads = 3 and d_head = d_out // num_heads = 2, got"
             f" num_heads = {brief(attributes.get('num_heads'))}, d_head = {brief(attributes.get('d_head'))}.")
    if structure["dropouts"] != {"dropout": 0.1}:
        fail(f"Expected an attribute `dropout` = nn.Dropout(0.1), got {brief(structure['dropouts'])}.")
    expect_mask_buffer(student, handle, structure, NAME, 9)
    student_forward(student, handle, torch.zeros(1, 4, 5), shape=(1, 4, 6))


def test_gpt2_sized_parameter_count(student):
    """Has 2,360,064 parameters for d_in = d_out = 768, 12 heads"""
    handle = student.new(NAME, (768, 768, 12, 1024))
    count = student.structure(handle).get("parameter_count")
    if count != 2_360_064:
        fail(f"MultiHeadAttentionOneModule(768, 768, 12, 1024) should have 2,360,064 parameters"
             f" (three 768x768 projections without bias, and the output projection with bias),"
             f" got {count:,}.")
    student_forward(student, handle, torch.zeros(1, 2, 768), shape=(1, 2, 768))


@pytest.mark.weight(2)
@pytest.mark.parametrize("tokens", [10, 6], ids=["full", "short"])
def test_reference_values(student, reference, rng, tokens):
    """Matches the reference with the same weights, for full and short inputs"""
    expect_reference_output(
        student, reference, NAME, (6, 12, 3, 10), randn(rng, 2, tokens, 6), rng,
        f"With {tokens} of 10 tokens, the outputs",
        "Check the head split (view, then transpose), the scale (sqrt(d_head)), the"
        " merge (transpose back, then view) and the final projection.",
        mistakes=lambda x, ref: one_module_mistakes(x, ref, 3))


HEADS, D_HEAD = 2, 6


def observed_weights(student, reference, rng):
    """(each head's attention weights in eval mode (1, heads, n, n), the scores behind them)."""
    heads, d_head, n = HEADS, D_HEAD, 5
    d = heads * d_head
    w_q, w_k = randn(rng, d, d), randn(rng, d, d)
    # Identity value and output projections and tokens that are one-hot in every
    # head's slice make each head's output block equal its weight matrix.
    overrides = {"W_query.weight": w_q, "W_key.weight": w_k, "W_value.weight": torch.eye(d),
                 "projection.weight": torch.eye(d), "projection.bias": torch.zeros(d)}
    handle, _ = paired(student, reference, NAME, (d, d, heads, 8), rng, overrides=overrides)
    x = torch.eye(d_head)[:n].repeat(1, heads).unsqueeze(0)  # (1, n, d)
    out = expect_tensor(student.forward(handle, x), "The output", shape=(1, n, d), finite=False)
    got = torch.stack([out[0, :, h * d_head: h * d_head + n] for h in range(heads)]).unsqueeze(0)
    split = lambda t: t.view(1, n, heads, d_head).transpose(1, 2)
    return got, split(x @ w_q.T) @ split(x @ w_k.T).transpose(2, 3)


def test_attention_weights(student, reference, rng):
    """Each head's attention weights: rows sum to 1, zero above the diagonal, correct values"""
    got, scores = observed_weights(student, reference, rng)
    d_head, d = D_HEAD, HEADS * D_HEAD
    weights = reference.mask_before_softmax
    diagnose_weights(got, weights(scores, d_head), "The attention weights of each head",
                     [uniform_weights(scores),
                      (weights(scores, d), "the scores are scaled by sqrt(d_out); each head"
                       " needs sqrt(d_head).")] + scale_mistakes(weights, scores, d_head))


def test_no_future_leak(student, reference, rng):
    """Outputs at position t do not depend on tokens after t (values and gradients)"""
    handle, _ = paired(student, reference, NAME, (6, 12, 3, 10), rng)
    expect_no_leak(student, handle, randn(rng, 2, 9, 6), lambda later: later * -2.0, NAME)


def test_dropout_on_weights(student, reference, rng):
    """Dropout acts on the attention weights, in training mode only"""
    n, d, heads = 16, 6, 3
    # All value vectors are ones and the projection is the identity, so each
    # head's output block holds the sums of that head's weights.
    overrides = {"W_value.weight": torch.zeros(d, d), "W_value.bias": torch.ones(d),
                 "projection.weight": torch.eye(d), "projection.bias": torch.zeros(d)}
    def built(p):
        return paired(student, reference, NAME, (d, d, heads, n), rng, overrides=overrides, dropout=p,
                      qkv_bias=True)[0]

    handle = built(DROPOUT_P)
    expect_dropout_on_weights(student, handle, randn(rng, 4, n, d), heads=heads, rebuilt=built)
    # ... and those weights must come from the queries and keys: dropout on a plain average
    # of the values checks nothing about attention.
    expect_weights_not_uniform(observed_weights(student, reference, rng)[0], "The attention weights of each head")


def test_moves_with_model(student, rng):
    """The mask moves with the model (.to(device)) and forward creates nothing on the CPU"""
    handle = student.new(NAME, (6, 12, 3, 10))
    expect_moves_to_meta(student, handle, randn(rng, 2, 7, 6), NAME, (2, 7, 12))


@pytest.mark.fixed_inputs("test_reference_values")
def test_canonical_seeded_values(student):
    """Gives the book's values for torch.manual_seed(123), d_out = 2, 2 heads"""
    handle = student.new(NAME, (3, 2, 2, 6), seed=123)
    got = student_forward(student, handle, torch.stack((JOURNEY, JOURNEY)), shape=(2, 6, 2))
    expected = torch.tensor([[0.3190, 0.4858], [0.2943, 0.3897], [0.2856, 0.3593]])
    if not torch.allclose(got[0, :3], expected, atol=1e-4):
        fail("With torch.manual_seed(123) and MultiHeadAttentionOneModule(3, 2, 2, 6), the"
             f" output should start {[round(v, 4) for v in expected[0].tolist()]}, got"
             f" {[round(v, 4) for v in got[0, 0].tolist()]}. Keep the layers created in the"
             " given order.")


def probe(student, rng):
    """Full and short inputs (d_in 5, 3 heads of 2), and in training mode with dropout. The
    first has as many tokens as heads, so swapping the wrong two dimensions fails in its own way."""
    x_heads, x_short, x_full = randn(rng, 1, 3, 5), randn(rng, 2, 4, 5), randn(rng, 1, 7, 5)
    yield from observe_module(student, rng, NAME, (5, 6, 3, 7), {"dropout": 0.5},
                              inputs=[(x_heads,), (x_full,), (x_short,)], train_inputs=[(x_full,)])


test_diagnosis = diagnosis(probe, locate_module(NAME, (6, 4, 2, 9), (3, 7, 6), longest=[(3, 9, 6)]))
