"""Exercise 1: mask_after_softmax(qkt, d_out)."""
import pytest
import torch

from autograder.grading.verdict import diagnose_weights, expect_tensor

from .common import random_scores, scale_mistakes, weights_from

NAME = "mask_after_softmax"


def mistakes(reference, qkt, d_out):
    """Wrong scalings, and softmax over the queries (dim=-2) before masking."""
    n = qkt.shape[-1]
    weights = torch.softmax(qkt / d_out ** 0.5, dim=-2) * torch.tril(torch.ones(n, n))
    over_queries = weights / weights.sum(-1, keepdim=True)
    return scale_mistakes(reference.mask_after_softmax, qkt, d_out) + [
        (over_queries, "softmax ran over the wrong dimension. Use dim=-1 (the keys), not"
         " dim=-2 or dim=0.")]
NOTEBOOK_QKT = torch.tensor([[0.1, 0.2, 0.3], [0.4, 0.5, 0.6], [0.7, 0.8, 0.9]])


def test_notebook_values(student, reference):
    """Gives the expected weights for the 3x3 scores in the notebook"""
    expected = reference.mask_after_softmax
    diagnose_weights(weights_from(student, NAME, NOTEBOOK_QKT, 100), expected(NOTEBOOK_QKT, 100),
                     "The attention weights", mistakes(reference, NOTEBOOK_QKT, 100))


@pytest.mark.weight(2)
@pytest.mark.parametrize("shape", [(5, 5), (3, 7, 7), (2, 4, 6, 6)], ids=["2d", "3d", "4d"])
def test_random_scores(student, reference, rng, shape):
    """Masks, scales and renormalises random scores with any leading batch dimensions"""
    qkt, d_out = random_scores(rng, shape)
    got = expect_tensor(weights_from(student, NAME, qkt, d_out),
                        f"For scores of shape {shape}, the result", shape=shape)
    expected = reference.mask_after_softmax
    diagnose_weights(got, expected(qkt, d_out), "The attention weights",
                     mistakes(reference, qkt, d_out))
