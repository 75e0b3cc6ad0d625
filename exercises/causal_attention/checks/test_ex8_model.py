"""Exercise 8a (optional): class BadLM_V2, a tiny language model."""
import re

import pytest
import torch

from autograder.checks import StudentError
from autograder.checks import close, expect_tensor, fail, hint_for, listed

from autograder.checks import (diagnosis, expect_reference_output, observe_module, paired, random_parameters,
                                         student_forward)
from .common import (expect_depends_on_input, expect_moves_to_meta, expect_uses_queries_and_keys,
                     language_model_mistakes)

NAME = "BadLM_V2"
ARGS = (8, 50, 12, 12, 3)  # context_length, vocab_size, emb_dim, att_dim, num_heads


def tokens(rng, batch, n, low=0, high=50):
    return torch.randint(low, high, (batch, n), generator=rng)


@pytest.mark.parametrize("batch, n", [(2, 5), (1, 8), (3, 1)])
def test_output_shape(student, rng, batch, n):
    """Maps token ids (B, N) to scores (B, N, vocab_size) for any N up to context_length"""
    handle = student.new(NAME, ARGS)
    try:
        output = student.forward(handle, tokens(rng, batch, n))
    except StudentError as error:
        sizes = re.search(r"size of tensor a \((\d+)\) must match the size of tensor b \((\d+)\)", str(error))
        positions = sizes is not None and {int(sizes[1]), int(sizes[2])} == {n, ARGS[0]}  # N against context_length
        product = "mat1 and mat2 shapes cannot be multiplied" in str(error)
        if (sizes is not None and not positions) or product:
            # embeddings of the wrong width neither add up nor fit the attention layer's inputs
            expect_embedding_sizes(student, handle)
        hint = (" Build positions for the N tokens you got, torch.arange(N), not"
                " arange(context_length).") if n < ARGS[0] and positions else " " + hint_for(str(error))
        fail(f"For token ids of shape {(batch, n)}, your model failed: {error}.{hint.rstrip()}")
    expect_tensor(output, f"For token ids of shape {(batch, n)}, the output", shape=(batch, n, 50))


def expect_embedding_sizes(student, handle):
    """Name an embedding table whose vectors are not emb_dim wide (its sizes swapped, or another size
    as its width: nn.Embedding(num_embeddings, embedding_dim)). Its rows are test_layers' part."""
    context_length, vocab_size, emb_dim = ARGS[:3]
    shapes = student.structure(handle).get("parameters", {})
    for name, rows, what in (("token_embs.weight", vocab_size, "vocab_size"), ("pos_embs.weight", context_length, "context_length")):
        if name in shapes and len(shapes[name]) == 2 and shapes[name][1] != emb_dim:
            fail(f"{name.split('.')[0]} has shape {tuple(shapes[name])}, so its vectors have {shapes[name][1]} numbers"
                 f" where the attention layer takes emb_dim = {emb_dim}. nn.Embedding takes (number of rows,"
                 f" vector size): nn.Embedding({what}, emb_dim), here ({rows}, {emb_dim}).", named=True)


LAYER_ARGS = (8, 50, 12, 6, 3)  # att_dim differs from emb_dim: each layer must use the right one


def test_layers(student):
    """Has token_embs, pos_embs (context_length rows), att and prediction_layer"""
    handle = student.new(NAME, LAYER_ARGS)
    structure = student.structure(handle)
    if not structure["is_module"]:
        fail(f"{NAME} should be a subclass of nn.Module.")
    params = structure["parameters"]
    if params.get("pos_embs.weight") == [50, 12]:
        fail("pos_embs has vocab_size rows, but it embeds positions: give it context_length rows,"
             " nn.Embedding(context_length, emb_dim).")
    expected = {"token_embs.weight": [50, 12], "pos_embs.weight": [8, 12],
                "att.W_query.weight": [6, 12], "att.W_key.weight": [6, 12],
                "att.W_value.weight": [6, 12], "att.projection.weight": [6, 6],
                "att.projection.bias": [6], "prediction_layer.weight": [50, 6],
                "prediction_layer.bias": [50]}
    if params != expected:
        wrong = sorted(set(expected) ^ set(params)) or sorted(
            name for name in expected if params[name] != expected[name])
        fail(f"The layers do not match the exercise (look at: {listed(wrong, 4)}). Expected"
             " token_embs = nn.Embedding(vocab_size, emb_dim), pos_embs = nn.Embedding(context_length,"
             " emb_dim), att = MultiHeadAttentionOneModule(emb_dim, att_dim, num_heads,"
             " context_length), prediction_layer = nn.Linear(att_dim, vocab_size).")
    student_forward(student, handle, torch.zeros(1, 3, dtype=torch.long), shape=(1, 3, 50))


@pytest.mark.weight(2)
@pytest.mark.parametrize("n", [8, 5], ids=["full", "short"])
def test_reference_values(student, reference, rng, n):
    """Matches the reference with the same weights, for full and short inputs"""
    expect_reference_output(student, reference, NAME, ARGS, tokens(rng, 2, n), rng,
                            f"With {n} of 8 tokens, the scores",
                            "Add token and position embeddings (positions 0..N-1), run att, then"
                            " prediction_layer.", mistakes=language_model_mistakes)


def test_no_future_leak(student, reference, rng):
    """Scores at position t do not depend on tokens after t (values and gradients)"""
    handle, _ = paired(student, reference, NAME, ARGS, rng)
    t = 3
    early = tokens(rng, 2, t + 1, 0, 25)
    ids = torch.cat([early, tokens(rng, 2, 8 - t - 1, 25, 50)], dim=1)
    changed = torch.cat([early, tokens(rng, 2, 8 - t - 1, 25, 50)], dim=1)
    before = student_forward(student, handle, ids, shape=(2, 8, 50))
    after = student_forward(student, handle, changed, shape=(2, 8, 50))
    if not torch.allclose(before[:, : t + 1], after[:, : t + 1], atol=1e-5):
        fail(f"Changing tokens after position {t} changed the scores at positions 0..{t}:"
             " the future leaks into the past.")
    # Later tokens come from ids 25..49, earlier ones from 0..24: early scores
    # must not depend on the embedding rows only later tokens use.
    cotangent = torch.zeros(2, 8, 50)
    cotangent[:, : t + 1] = 1.0
    grad = student.vjp(handle, [ids], cotangent, wrt="token_embs.weight")
    if grad is None:
        fail("The scores are not differentiable (computed under torch.no_grad() or detached?).")
    grad = expect_tensor(grad, "The gradient", shape=(50, 12))
    only_later = sorted(set(ids[:, t + 1:].flatten().tolist()) - set(early.flatten().tolist()))
    if grad[only_later].abs().max() > 1e-6:
        fail(f"Scores at positions 0..{t} have a nonzero gradient for tokens that only appear"
             " later: the future leaks into the past.")
    # ... and no leak is only worth something of scores that depend on the tokens and on attention
    expect_depends_on_input(student, handle, ids, (ids + 25) % 50, "The scores")
    expect_uses_queries_and_keys(student, handle, ids, "The scores")


def test_positions_on_input_device(student, rng):
    """Positions are created on the input's device; everything moves with the model"""
    handle = student.new(NAME, ARGS)
    ids = tokens(rng, 2, 6, 0, 25)
    expect_moves_to_meta(student, handle, ids, NAME, (2, 6, 50), other=ids + 25)


@pytest.mark.diagnosis
def test_own_code_with_your_attention(student, rng, failed_checks):
    """Your language model, checked with your own attention module inside"""
    # The model's own code, tested on its own: with the student's
    # MultiHeadAttentionOneModule as `att`, the scores must be
    # prediction_layer(att(token_embs(ids) + pos_embs(0..N-1))). When they are, the model is
    # right and Exercise 6 is what to fix. (The reference never goes to the sandbox: the part
    # around `att` is computed here from the parameters; `att` runs in the student's code.)
    if "test_reference_values" not in failed_checks:
        return  # only when the values differ (a device problem, say, is not Exercise 6's doing); then a
        # model that is right with the student's own attention proves that attention differs
    try:
        consistent = _consistent_with_own_attention(student, rng)
    except (StudentError, pytest.fail.Exception):
        return  # it cannot be told this way: the cell's own checks speak
    if consistent:
        fail("Your language model itself is put together right: with your own MultiHeadAttentionOneModule"
             " inside, it computes exactly prediction_layer(att(token_embs(ids) + pos_embs(positions))). Its"
             " scores differ from the expected ones because Exercise 6 does: fix Exercise 6 first.",
             named=True)


def _consistent_with_own_attention(student, rng):
    handle = student.new(NAME, LAYER_ARGS, seed=0)
    shapes = student.structure(handle).get("parameters", {})
    wanted = {"token_embs.weight": [50, 12], "pos_embs.weight": [8, 12], "prediction_layer.weight": [50, 6],
              "prediction_layer.bias": [50]}
    if any(shapes.get(name) != shape for name, shape in wanted.items()):
        return False
    params = random_parameters(rng, shapes)
    student.load_parameters(handle, params)
    attention = student.new("MultiHeadAttentionOneModule", (12, 6, 3, 8), seed=0)
    report = student.load_parameters(attention, {k[4:]: v for k, v in params.items() if k.startswith("att.")})
    if report["missing"] or report["wrong_shape"] or report["extra"]:
        return False
    ids = tokens(rng, 2, 5)
    embeddings = params["token_embs.weight"][ids] + params["pos_embs.weight"][:5]
    inner = expect_tensor(student.forward(attention, embeddings), "att", shape=(2, 5, 6))
    expected = inner @ params["prediction_layer.weight"].T + params["prediction_layer.bias"]
    return close(expect_tensor(student.forward(handle, ids), "The scores", shape=(2, 5, 50)), expected)


def probe(student, rng):
    """att_dim (6) unlike emb_dim (12), a vocabulary unlike the context length; short and full inputs."""
    yield from observe_module(student, rng, NAME, LAYER_ARGS,
                              inputs=[(tokens(rng, 1, 8),), (tokens(rng, 2, 5),)])


test_diagnosis = diagnosis(probe)
