"""Exercise 2: mask_before_softmax(qkt, d_out)."""
import pytest
import torch

from autograder.checks import diagnosis, locate_function, randn
from autograder.checks import close, expect_tensor, fail, name_mistake
from .common import (diagnose_weights, NOTEBOOK_QKT, expect_weights, random_scores, scale_mistakes, weights_from,
                     weights_probe)

NAME = "mask_before_softmax"


def mistakes(reference, qkt, d_out):
    """Wrong scalings, scaling after softmax, and a hand-written softmax (which underflows
    to 0 / 0 for scores far below zero)."""
    after = reference.mask_before_softmax(qkt, 1) / d_out ** 0.5
    n = qkt.shape[-1]
    future = torch.triu(torch.ones(n, n, dtype=torch.bool), diagonal=1)
    exps = (qkt.masked_fill(future, float("-inf")) / d_out ** 0.5).exp()
    return scale_mistakes(reference.mask_before_softmax, qkt, d_out) + [
        (after, "the weights are divided by sqrt(d_out) after softmax, so rows no longer sum"
         " to 1. Scale the scores before softmax."),
        (exps / exps.sum(dim=-1, keepdim=True), "exp / sum written by hand underflows to 0 / 0 for"
         " scores far below zero. Use torch.softmax, which subtracts each row's maximum first.")]


@pytest.mark.fixed_inputs("test_random_scores")
def test_notebook_values(student, reference):
    """Gives the expected weights for the 3x3 scores in the notebook"""
    expect_weights(student, NAME, reference.mask_before_softmax,
                   lambda *a: mistakes(reference, *a), NOTEBOOK_QKT, 100)


@pytest.mark.weight(2)
@pytest.mark.parametrize("shape", [(5, 5), (3, 7, 7), (2, 4, 6, 6)], ids=["2d", "3d", "4d"])
def test_random_scores(student, reference, rng, shape):
    """Masks with -inf, scales and normalises random scores with any batch dimensions"""
    qkt, d_out = random_scores(rng, shape)
    expect_weights(student, NAME, reference.mask_before_softmax,
                   lambda *a: mistakes(reference, *a), qkt, d_out, shape)


def test_large_scores(student, reference, rng):
    """Stays finite and exact for scores far from zero (around -1000)"""
    # exp(-1000 / 2) underflows to 0, so a hand-written softmax gives 0 / 0; the
    # differences between scores stay small, so a missing scale or a fill of 0
    # still shows.
    qkt = randn(rng, 6, 6) * 2 - 1000
    expected = reference.mask_before_softmax
    diagnose_weights(weights_from(student, NAME, qkt, 4), expected(qkt, 4),
                     "For scores far from zero, the attention weights", mistakes(reference, qkt, 4))


SOFTMAX_FIRST = ("softmax ran before the mask (Exercise 1's method): the future's large scores took all"
                 " the weight, so the kept weights underflowed to 0 before renormalising. Here fill the"
                 " future with float('-inf') before softmax, so it never counts.")


@pytest.mark.weight(2)
def test_future_far_above_past(student, reference, rng):
    """Fills the future before softmax: future scores far above the past ones never count"""
    # Softmax first gives every kept weight exp(past - future) = 0 in float32, and
    # renormalising turns the rows into 0 / 0; a fill before softmax never sees the future.
    n = 6
    qkt = randn(rng, 2, n, n) * 2 + 1000 * torch.ones(n, n).triu(diagonal=1)
    what = "For scores whose future is far above the past, the attention weights"
    got = expect_tensor(weights_from(student, NAME, qkt, 4), what, shape=qkt.shape, finite=False)
    expected = reference.mask_before_softmax(qkt, 4)
    if close(got, expected):
        return
    name_mistake(got, [(reference.mask_after_softmax(qkt, 4), SOFTMAX_FIRST)] + mistakes(reference, qkt, 4), what)
    # Softmax first, whatever the renormalising: every row that has a future is NaN or zero,
    # while the last row (no future) is right. A mask mistake hides other rows.
    dead = ~(got[..., :-1, :].nan_to_num(0.0).abs() > 1e-6).any(-1)
    if dead.all() and close(got[..., -1, :], expected[..., -1, :]):
        fail(f"{what} are NaN or zero in every row that has a future: {SOFTMAX_FIRST}", named=True)
    diagnose_weights(got, expected, what, mistakes(reference, qkt, 4))


test_diagnosis = diagnosis(weights_probe(NAME), locate_function(NAME, lambda rng: [randn(rng, 2, 6, 6), 5]))
