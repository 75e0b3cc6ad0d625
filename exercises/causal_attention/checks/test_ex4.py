"""Exercise 4: the variable causal_embeddings."""
from .common import expect_embeddings


def test_causal_embeddings(student, reference, rng):
    """`causal_embeddings` is the (20, 100, 768) output of CausalAttention(512, 768, 100)"""
    expect_embeddings(student, reference, rng, "causal_embeddings", (20, 100, 768), "CausalAttention",
                      (512, 768, 100), (20, 100, 512))
