"""Exercise 5: class MultiHeadAttention (a list of heads) and multihead_embeddings."""
import pytest
import torch

from autograder.checks import brief, expect_tensor, fail

from autograder.checks import diagnosis, expect_reference_output, locate_module, observe_module, paired, randn, student_forward
from .common import expect_embeddings, expect_no_leak, expect_registered_heads, JOURNEY

NAME = "MultiHeadAttention"


@pytest.mark.parametrize("batch, tokens, heads", [(1, 10, 2), (3, 6, 3), (2, 1, 3)])
def test_output_shape(student, rng, batch, tokens, heads):
    """Returns (B, N, d_out) for several batch sizes, lengths and numbers of heads"""
    handle = student.new(NAME, (5, 6, heads, 10))
    what = f"With {heads} heads and an input of shape {(batch, tokens, 5)}, the output"
    output = expect_tensor(student.forward(handle, randn(rng, batch, tokens, 5)), what, finite=False)
    d_head = 6 // heads
    shape = tuple(output.shape)
    if heads > 1 and shape in ((batch, tokens * heads, d_head), (batch * heads, tokens, d_head)):
        fail(f"{what} has shape {shape}: the heads are concatenated along the wrong dimension."
             " Concatenate along the last dimension (features): torch.cat(..., dim=-1).")
    if heads > 1 and len(shape) == 4 and sorted(shape) == sorted((batch, tokens, d_head, heads)):
        fail(f"{what} has shape {shape}: torch.stack adds a new dimension for the heads. Join"
             " them with torch.cat(..., dim=-1) so the features sit side by side.")
    if heads > 1 and shape == (batch, tokens, 6 * heads):
        fail(f"{what} has shape {shape}: every head returns d_out features. Each head should"
             " return d_head = d_out // num_heads, so that together they give d_out.")
    expect_tensor(output, what, shape=(batch, tokens, 6))


def test_heads_registered(student):
    """`heads` is an nn.ModuleList of separate heads whose parameters are registered"""
    handle = student.new(NAME, (5, 6, 3, 10))
    structure = student.structure(handle)
    if not structure["is_module"]:
        fail(f"{NAME} should be a subclass of nn.Module.")
    expect_registered_heads(structure, 3, 3 * 5 * 2, NAME)
    student_forward(student, handle, torch.zeros(1, 4, 5), shape=(1, 4, 6))


@pytest.mark.after("test_heads_registered")
def test_options_reach_every_head(student):
    """Passes dropout and qkv_bias on to every head"""
    # What one CausalAttention does with the options: when it ignores one itself (Exercise 3
    # loses points for that), the wrapper cannot be blamed for heads without it.
    single = student.structure(student.new("CausalAttention", (5, 2, 10), {"dropout": 0.25, "qkv_bias": True}))
    head_uses_bias = any(name.endswith(".bias") for name in single.get("parameters", {}))
    head_uses_dropout = 0.25 in single.get("dropouts", {}).values()
    handle = student.new(NAME, (5, 6, 3, 10), {"dropout": 0.25, "qkv_bias": True})
    structure = student.structure(handle)
    biases = [name for name in structure["parameters"] if name.startswith("heads.") and name.endswith(".bias")]
    if head_uses_bias and len(biases) != 3 * 3:
        fail(f"With qkv_bias=True, each of the 3 heads should have a bias in W_query, W_key and W_value"
             f" (9 in all), but there are {len(biases)}. Pass qkv_bias on when you create each head:"
             " CausalAttention(d_in, d_out // num_heads, context_length, dropout, qkv_bias).")
    rates = sorted(rate for name, rate in structure["dropouts"].items() if name.startswith("heads."))
    if head_uses_dropout and rates != [0.25] * 3:
        fail(f"With dropout=0.25, each of the 3 heads should drop attention weights with p=0.25, but the"
             f" heads' dropout rates are {brief(rates) if rates else 'missing'}. Pass dropout on when you create each head.")


@pytest.mark.after("test_heads_registered")
@pytest.mark.weight(2)
@pytest.mark.parametrize("tokens", [9, 4], ids=["full", "short"])
def test_reference_values(student, reference, rng, tokens):
    """Matches the reference with the same weights: heads concatenated on the last dimension"""
    expect_reference_output(student, reference, NAME, (5, 6, 3, 9), randn(rng, 2, tokens, 5), rng,
                            f"With {tokens} of 9 tokens, the outputs",
                            "Concatenate the heads' outputs along the last dimension (dim=-1), in order;"
                            " if CausalAttention's checks fail, fix those first.")


@pytest.mark.after("test_heads_registered")
def test_no_future_leak(student, reference, rng):
    """Outputs at position t do not depend on tokens after t"""
    handle, _ = paired(student, reference, NAME, (5, 6, 2, 10), rng)
    expect_no_leak(student, handle, randn(rng, 2, 8, 5), lambda later: later - 2.0, NAME)


@pytest.mark.fixed_inputs("test_reference_values")
def test_canonical_seeded_values(student):
    """Gives the book's values for torch.manual_seed(123) with 2 heads"""
    handle = student.new(NAME, (3, 4, 2, 6), seed=123)
    got = student_forward(student, handle, torch.stack((JOURNEY, JOURNEY)), shape=(2, 6, 4))
    expected = torch.tensor([-0.4519, 0.2216, 0.4772, 0.1063])
    if not torch.allclose(got[0, 0], expected, atol=1e-4):
        fail("With torch.manual_seed(123) and MultiHeadAttention(3, 4, 2, 6), the first output"
             f" row should be {[round(v, 4) for v in expected.tolist()]}, got {[round(v, 4) for v in got[0, 0].tolist()]}."
             " Create the heads in order inside __init__, each a CausalAttention.")


@pytest.mark.after("test_output_shape", "test_reference_values")
def test_multihead_embeddings(student, reference, rng):
    """`multihead_embeddings` is the (20, 100, 768) output of the 3-head model"""
    expect_embeddings(student, reference, rng, "multihead_embeddings", (20, 100, 768), NAME, (512, 768, 3, 100),
                      (20, 100, 512))


def probe(student, rng):
    """3 heads of 2 features, with biases, and in training mode with dropout."""
    x_short, x_full = randn(rng, 2, 4, 5), randn(rng, 1, 7, 5)
    yield from observe_module(student, rng, NAME, (5, 6, 3, 7), {"dropout": 0.5, "qkv_bias": True},
                              inputs=[(x_full,), (x_short,)], train_inputs=[(x_full,)])


test_diagnosis = diagnosis(probe, locate_module(NAME, (6, 4, 2, 9), (3, 7, 6), longest=[(3, 9, 6)]))
