"""Correct answers written in other valid styles get full marks (more in a later corpus)."""
import math

import pytest
import torch
import torch.nn.functional as F

from autograder.runner import run_checks
from autograder.student import NamespaceStudent


def alternatives(solved):
    class SDPA(solved["CausalAttention"]):
        def forward(self, x):
            q, k, v = self.W_query(x), self.W_key(x), self.W_value(x)
            return F.scaled_dot_product_attention(q, k, v, is_causal=True, dropout_p=self.dropout.p if self.training else 0.0)

    class Einsum(solved["CausalAttention"]):
        def __init__(self, d_in, d_out, context_length, dropout=0.0, qkv_bias=False):
            super().__init__(d_in, d_out, context_length, dropout, qkv_bias)
            self.register_buffer("mask", torch.triu(torch.ones(context_length, context_length), diagonal=1).bool())
        def forward(self, x):
            n = x.shape[1]
            q = self.W_query(x) / math.sqrt(self.d_out)
            s = torch.einsum("bid,bjd->bij", q, self.W_key(x))
            s = s + torch.zeros_like(s).masked_fill(self.mask[:n, :n], float("-inf"))
            return self.dropout(s.softmax(-1)) @ self.W_value(x)

    class MHA1Reshape(solved["MultiHeadAttentionOneModule"]):
        def forward(self, x):
            B, N, _ = x.shape
            sp = lambda t: t.reshape(B, N, self.num_heads, self.d_head).permute(0, 2, 1, 3)
            q, k, v = sp(self.W_query(x)), sp(self.W_key(x)), sp(self.W_value(x))
            w = (q @ k.mT / self.d_head ** 0.5).masked_fill(~self.mask[:N, :N].bool(), float("-inf")).softmax(-1)
            return self.projection((self.dropout(w) @ v).permute(0, 2, 1, 3).reshape(B, N, self.d_out))

    class MHA1SDPA(solved["MultiHeadAttentionOneModule"]):
        def forward(self, x):
            B, N, _ = x.shape
            sp = lambda t: t.view(B, N, self.num_heads, self.d_head).transpose(1, 2)
            o = F.scaled_dot_product_attention(sp(self.W_query(x)), sp(self.W_key(x)), sp(self.W_value(x)), is_causal=True,
                                               dropout_p=self.dropout.p if self.training else 0.0)
            return self.projection(o.transpose(1, 2).reshape(B, N, self.d_out))

    def einsum_mask(qkt, d_out):
        n = qkt.shape[-1]
        s = qkt / d_out ** 0.5
        s = s.masked_fill(torch.triu(torch.ones(n, n, dtype=torch.bool), 1), -torch.inf)
        return F.softmax(s, dim=-1)

    return [("ex3", "CausalAttention", SDPA), ("ex3", "CausalAttention", Einsum),
            ("ex6", "MultiHeadAttentionOneModule", MHA1Reshape),
            ("ex6", "MultiHeadAttentionOneModule", MHA1SDPA),
            ("ex2", "mask_before_softmax", einsum_mask)]


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_valid_styles_get_full_marks(solved, seed):
    for cell, name, answer in alternatives(solved):
        result = run_checks("causal_attention", NamespaceStudent({**solved, name: answer}), [cell], seed=seed)[cell]
        assert result.fraction == 1, (answer.__name__, [c.message for c in result.checks if not c.passed])
