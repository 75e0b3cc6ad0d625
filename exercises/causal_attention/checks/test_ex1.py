"""Exercise 1: mask_after_softmax(qkt, d_out)."""
import pytest
import torch

from autograder.checks import diagnosis, locate_function, randn
from .common import NOTEBOOK_QKT, expect_weights, random_scores, scale_mistakes, weights_probe

NAME = "mask_after_softmax"


def mistakes(reference, qkt, d_out):
    """Wrong scalings, and softmax over the queries (dim=-2) before masking."""
    n = qkt.shape[-1]
    weights = torch.softmax(qkt / d_out ** 0.5, dim=-2) * torch.tril(torch.ones(n, n))
    over_queries = weights / weights.sum(-1, keepdim=True)
    return scale_mistakes(reference.mask_after_softmax, qkt, d_out) + [
        (over_queries, "softmax ran over the wrong dimension. Use dim=-1 (the keys), not"
         " dim=-2 or dim=0.")]


@pytest.mark.fixed_inputs("test_random_scores")
def test_notebook_values(student, reference):
    """Gives the expected weights for the 3x3 scores in the notebook"""
    expect_weights(student, NAME, reference.mask_after_softmax,
                   lambda *a: mistakes(reference, *a), NOTEBOOK_QKT, 100)


@pytest.mark.weight(2)
@pytest.mark.parametrize("shape", [(5, 5), (3, 7, 7), (2, 4, 6, 6)], ids=["2d", "3d", "4d"])
def test_random_scores(student, reference, rng, shape):
    """Masks, scales and renormalises random scores with any leading batch dimensions"""
    qkt, d_out = random_scores(rng, shape)
    expect_weights(student, NAME, reference.mask_after_softmax,
                   lambda *a: mistakes(reference, *a), qkt, d_out, shape)


test_diagnosis = diagnosis(weights_probe(NAME), locate_function(NAME, lambda rng: [randn(rng, 2, 6, 6), 5]))
