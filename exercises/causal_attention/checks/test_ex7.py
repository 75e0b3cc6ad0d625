"""Exercise 7: the variable onemodule_embeddings."""
from .common import expect_embeddings


def test_onemodule_embeddings(student, reference, rng):
    """`onemodule_embeddings` is the (40, 80, 1536) output of MultiHeadAttentionOneModule"""
    expect_embeddings(student, reference, rng, "onemodule_embeddings", (40, 80, 1536), "MultiHeadAttentionOneModule",
                      (768, 1536, 3, 80), (40, 80, 768))
