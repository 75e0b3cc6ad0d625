"""Reference solutions for the assignment `self_attention`.

The single source of truth for the notebook's code cells (see
solutions/causal_attention.py for the region format).
"""

# %% setup
import math

import torch
import torch.nn as nn

# "Your journey starts with one step": six tokens, each a 3-d embedding.
inputs = torch.tensor(
    [[0.43, 0.15, 0.89],  # Your
     [0.55, 0.87, 0.66],  # journey
     [0.57, 0.85, 0.64],  # starts
     [0.22, 0.58, 0.33],  # with
     [0.77, 0.25, 0.10],  # one
     [0.05, 0.80, 0.55]]  # step
)


# %% ex1_answer
def attention_scores(inputs):
    """(T, d) embeddings -> (T, T) scores; entry [i, j] is inputs[i] . inputs[j]."""
    ### BEGIN SOLUTION
    return inputs @ inputs.T
    ### END SOLUTION


# %% ex2_answer
def softmax_naive(x, dim=-1):
    """exp(x) divided by its sum along `dim`."""
    ### BEGIN SOLUTION
    exps = torch.exp(x)
    return exps / exps.sum(dim=dim, keepdim=True)
    ### END SOLUTION


def softmax_stable(x, dim=-1):
    """The same function, computed without overflow for large x."""
    ### BEGIN SOLUTION
    # Subtracting each slice's maximum leaves the result unchanged (the factor
    # exp(-max) cancels) and keeps every exponent <= 0, so exp cannot overflow.
    shifted = x - x.max(dim=dim, keepdim=True).values
    exps = torch.exp(shifted)
    return exps / exps.sum(dim=dim, keepdim=True)
    ### END SOLUTION


# %% ex3_answer
def context_vectors(inputs):
    """(T, d) -> (T, d): every token's weighted average of all tokens."""
    ### BEGIN SOLUTION
    weights = torch.softmax(inputs @ inputs.T, dim=-1)  # (T, T), rows sum to 1
    return weights @ inputs
    ### END SOLUTION


# %% ex4_answer
class SelfAttention_v1(nn.Module):
    def __init__(self, d_in, d_out):
        super().__init__()
        # Three trainable (d_in, d_out) matrices, created in this order.
        ### BEGIN SOLUTION
        self.W_query = nn.Parameter(torch.rand(d_in, d_out))
        self.W_key = nn.Parameter(torch.rand(d_in, d_out))
        self.W_value = nn.Parameter(torch.rand(d_in, d_out))
        ### END SOLUTION

    def forward(self, x):
        # x: (T, d_in) -> (T, d_out)
        ### BEGIN SOLUTION
        queries = x @ self.W_query  # (T, d_out)
        keys = x @ self.W_key
        values = x @ self.W_value
        scores = queries @ keys.T  # (T, T)
        weights = torch.softmax(scores / math.sqrt(keys.shape[-1]), dim=-1)
        return weights @ values
        ### END SOLUTION


# %% ex5_answer
class SelfAttention_v2(nn.Module):
    def __init__(self, d_in, d_out, qkv_bias=False):
        super().__init__()
        ### BEGIN SOLUTION
        self.W_query = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_key = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_value = nn.Linear(d_in, d_out, bias=qkv_bias)
        ### END SOLUTION

    def forward(self, x):
        # x: (T, d_in) -> (T, d_out)
        ### BEGIN SOLUTION
        queries = self.W_query(x)
        keys = self.W_key(x)
        values = self.W_value(x)
        weights = torch.softmax(queries @ keys.T / math.sqrt(keys.shape[-1]), dim=-1)
        return weights @ values
        ### END SOLUTION


# %% ex6_answer
def copy_weights_v2_to_v1(sa_v2, sa_v1):
    """Give sa_v1 the weights of sa_v2 (a bias-free SelfAttention_v2)."""
    ### BEGIN SOLUTION
    # nn.Linear stores its weight as (d_out, d_in) and computes x @ weight.T,
    # so v1's (d_in, d_out) matrices are the transposes.
    with torch.no_grad():
        sa_v1.W_query.copy_(sa_v2.W_query.weight.T)
        sa_v1.W_key.copy_(sa_v2.W_key.weight.T)
        sa_v1.W_value.copy_(sa_v2.W_value.weight.T)
    ### END SOLUTION


# %% ex7_answer
class CrossAttention(nn.Module):
    def __init__(self, d_in, d_out_kq, d_out_v):
        super().__init__()
        self.d_out_kq = d_out_kq
        ### BEGIN SOLUTION
        self.W_query = nn.Parameter(torch.rand(d_in, d_out_kq))
        self.W_key = nn.Parameter(torch.rand(d_in, d_out_kq))
        self.W_value = nn.Parameter(torch.rand(d_in, d_out_v))
        ### END SOLUTION

    def forward(self, x_1, x_2):
        # x_1: (T1, d_in) asks the questions; x_2: (T2, d_in) is looked at.
        ### BEGIN SOLUTION
        queries = x_1 @ self.W_query  # (T1, d_out_kq)
        keys = x_2 @ self.W_key  # (T2, d_out_kq)
        values = x_2 @ self.W_value  # (T2, d_out_v)
        scores = queries @ keys.T  # (T1, T2)
        weights = torch.softmax(scores / math.sqrt(self.d_out_kq), dim=-1)
        return weights @ values  # (T1, d_out_v)
        ### END SOLUTION
