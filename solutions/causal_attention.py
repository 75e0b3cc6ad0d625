"""Reference solutions for the assignment `causal_attention`.

This file is the single source of truth for the notebook's code cells. Each
`# %% <name>` line starts a region; `autograder build` copies a region into the
notebook cell the exercise file names after it. Lines between
`### BEGIN SOLUTION` and `### END SOLUTION` are what students write; nbgrader
replaces them with a stub in the release. Everything else in a region is given
code that students see as is.

Regions named `*_script` build the variables Exercises 4, 5 and 7 ask for. They
run when the notebook runs, but `autograder.course.reference` skips them so the
hidden checks do not pay for those large tensors.
"""

# %% setup
import math

import torch
import torch.nn as nn
from torch.utils.data import DataLoader, Dataset


# %% ex1_answer
def mask_after_softmax(qkt, d_out):
    """Causal attention weights from scores `qkt` of shape (..., n, n)."""
    ### BEGIN SOLUTION
    n = qkt.shape[-1]
    weights = torch.softmax(qkt / math.sqrt(d_out), dim=-1)
    keep = torch.tril(torch.ones(n, n, device=qkt.device))
    weights = weights * keep
    # Zeroing the future removed some probability mass: rescale each row to 1.
    return weights / weights.sum(dim=-1, keepdim=True)
    ### END SOLUTION


# %% ex2_answer
def mask_before_softmax(qkt, d_out):
    """Causal attention weights from scores `qkt` of shape (..., n, n)."""
    ### BEGIN SOLUTION
    n = qkt.shape[-1]
    keep = torch.tril(torch.ones(n, n, device=qkt.device))
    masked = qkt.masked_fill(keep == 0, float("-inf"))
    return torch.softmax(masked / math.sqrt(d_out), dim=-1)
    ### END SOLUTION


# %% ex3_answer
class CausalAttention(nn.Module):
    def __init__(self, d_in, d_out, context_length, dropout=0.0, qkv_bias=False):
        super().__init__()
        self.d_in = d_in
        self.d_out = d_out
        self.context_length = context_length
        # With qkv_bias=True each projection adds a learned vector after the
        # matrix product.
        self.W_query = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_key = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_value = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.dropout = nn.Dropout(dropout)
        # Register the causal mask as a buffer named `mask` (see the text above).
        ### BEGIN SOLUTION
        self.register_buffer(
            "mask", torch.tril(torch.ones(context_length, context_length))
        )
        ### END SOLUTION

    def forward(self, x):
        # x: (B, N, d_in) with N <= context_length
        ### BEGIN SOLUTION
        B, N, _ = x.shape
        queries = self.W_query(x)  # (B, N, d_out)
        keys = self.W_key(x)  # (B, N, d_out)
        values = self.W_value(x)  # (B, N, d_out)

        scores = queries @ keys.transpose(1, 2)  # (B, N, N)
        # Only the top-left N x N corner of the mask applies to N tokens.
        scores = scores.masked_fill(self.mask[:N, :N] == 0, float("-inf"))
        weights = torch.softmax(scores / math.sqrt(self.d_out), dim=-1)
        weights = self.dropout(weights)
        return weights @ values  # (B, N, d_out)
        ### END SOLUTION


# %% ex4_script
### BEGIN SOLUTION
x_batch = torch.randn(20, 100, 512)  # (batch, tokens, embedding size)
causal_model = CausalAttention(d_in=512, d_out=768, context_length=100)
causal_embeddings = causal_model(x_batch)
### END SOLUTION
print(causal_embeddings.shape)


# %% ex5_answer
class MultiHeadAttention(nn.Module):
    def __init__(self, d_in, d_out, num_heads, context_length, dropout=0.0, qkv_bias=False):
        super().__init__()
        assert d_out % num_heads == 0, "d_out must be divisible by num_heads"
        self.d_in = d_in
        self.d_out = d_out
        self.num_heads = num_heads
        self.d_head = d_out // num_heads
        # Build `self.heads`: num_heads independent CausalAttention modules.
        ### BEGIN SOLUTION
        self.heads = nn.ModuleList(
            CausalAttention(d_in, self.d_head, context_length, dropout, qkv_bias)
            for _ in range(num_heads)
        )
        ### END SOLUTION

    def forward(self, x):
        # x: (B, N, d_in); each head returns (B, N, d_head)
        ### BEGIN SOLUTION
        return torch.cat([head(x) for head in self.heads], dim=-1)  # (B, N, d_out)
        ### END SOLUTION


# %% ex5_script
### BEGIN SOLUTION
x_batch = torch.randn(20, 100, 512)
multihead_model = MultiHeadAttention(d_in=512, d_out=768, num_heads=3, context_length=100)
multihead_embeddings = multihead_model(x_batch)
### END SOLUTION
print(multihead_embeddings.shape)


# %% ex6_answer
class MultiHeadAttentionOneModule(nn.Module):
    def __init__(self, d_in, d_out, num_heads, context_length, dropout=0.0, qkv_bias=False):
        super().__init__()
        assert d_out % num_heads == 0, "d_out must be divisible by num_heads"
        self.d_in = d_in
        self.d_out = d_out
        self.num_heads = num_heads
        self.d_head = d_out // num_heads
        self.context_length = context_length
        self.W_query = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_key = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_value = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.dropout = nn.Dropout(dropout)
        self.projection = nn.Linear(d_out, d_out)
        self.register_buffer("mask", torch.tril(torch.ones(context_length, context_length)))

    def forward(self, x):
        # x: (B, N, d_in) with N <= context_length
        ### BEGIN SOLUTION
        B, N, _ = x.shape
        H, d_head = self.num_heads, self.d_head

        def split_heads(t):
            # (B, N, d_out) -> (B, N, H, d_head) -> (B, H, N, d_head)
            return t.view(B, N, H, d_head).transpose(1, 2)

        queries = split_heads(self.W_query(x))
        keys = split_heads(self.W_key(x))
        values = split_heads(self.W_value(x))

        scores = queries @ keys.transpose(2, 3)  # (B, H, N, N)
        scores = scores.masked_fill(self.mask[:N, :N] == 0, float("-inf"))
        weights = torch.softmax(scores / math.sqrt(d_head), dim=-1)
        weights = self.dropout(weights)

        context = weights @ values  # (B, H, N, d_head)
        # transpose makes the tensor non-contiguous; view needs contiguous memory.
        context = context.transpose(1, 2).contiguous().view(B, N, self.d_out)
        return self.projection(context)  # (B, N, d_out)
        ### END SOLUTION


# %% ex7_script
### BEGIN SOLUTION
x_batch = torch.randn(40, 80, 768)
onemodule_model = MultiHeadAttentionOneModule(d_in=768, d_out=1536, num_heads=3, context_length=80)
onemodule_embeddings = onemodule_model(x_batch)
### END SOLUTION
print(onemodule_embeddings.shape)


# %% ex8_model_answer
class BadLM_V2(nn.Module):
    def __init__(self, context_length, vocab_size, emb_dim, att_dim, num_heads):
        super().__init__()
        self.context_length = context_length
        self.vocab_size = vocab_size
        self.emb_dim = emb_dim
        self.att_dim = att_dim
        self.num_heads = num_heads
        ### BEGIN SOLUTION
        self.token_embs = nn.Embedding(vocab_size, emb_dim)
        # One learned vector per position, so the table has context_length rows.
        self.pos_embs = nn.Embedding(context_length, emb_dim)
        self.att = MultiHeadAttentionOneModule(emb_dim, att_dim, num_heads, context_length)
        self.prediction_layer = nn.Linear(att_dim, vocab_size)
        ### END SOLUTION

    def forward(self, token_ids):
        # token_ids: (B, N) integers, N <= context_length
        ### BEGIN SOLUTION
        N = token_ids.shape[1]
        # Positions live on the same device as the input (CPU, GPU, ...).
        positions = torch.arange(N, device=token_ids.device)
        embeddings = self.token_embs(token_ids) + self.pos_embs(positions)  # (B, N, emb_dim)
        context = self.att(embeddings)  # (B, N, att_dim)
        return self.prediction_layer(context)  # (B, N, vocab_size)
        ### END SOLUTION


# %% ex8_data_answer
class MyData(Dataset):
    """Sliding windows over a tokenised text: item i is (input_ids, target_ids)."""

    def __init__(self, text, tokenizer, context_length, stride=1):
        ### BEGIN SOLUTION
        ids = tokenizer.encode(text)
        self.input_ids = []
        self.target_ids = []
        for start in range(0, len(ids) - context_length, stride):
            window = ids[start : start + context_length + 1]
            self.input_ids.append(torch.tensor(window[:-1]))
            self.target_ids.append(torch.tensor(window[1:]))  # shifted by one token
        ### END SOLUTION

    def __len__(self):
        ### BEGIN SOLUTION
        return len(self.input_ids)
        ### END SOLUTION

    def __getitem__(self, idx):
        ### BEGIN SOLUTION
        return self.input_ids[idx], self.target_ids[idx]
        ### END SOLUTION


def my_batch(text, batch_size, context_length, stride, shuffle=True, drop_last=True,
             num_workers=0, tokenizer=None):
    """A DataLoader of (input_ids, target_ids) batches over `text`."""
    if tokenizer is None:
        tokenizer = gpt2_tokenizer()
    ### BEGIN SOLUTION
    dataset = MyData(text, tokenizer, context_length, stride)
    return DataLoader(dataset, batch_size=batch_size, shuffle=shuffle,
                      drop_last=drop_last, num_workers=num_workers)
    ### END SOLUTION


def gpt2_tokenizer():
    """tiktoken's GPT-2 encoding; it downloads its vocabulary on first use."""
    import tiktoken

    try:
        return tiktoken.get_encoding("gpt2")
    except Exception as error:
        raise RuntimeError(
            "Could not load tiktoken's 'gpt2' vocabulary (it is downloaded on first "
            "use, so this needs internet access once). Pass a tokenizer yourself, "
            "e.g. my_batch(..., tokenizer=byte_tokenizer), the byte tokenizer built "
            f"above Exercise 8b, which needs no download. Cause: {error}"
        ) from None
