"""Runs inside the sandbox, next to student code: what this assignment's probes need there.

RESOURCES are the objects checks may hand to student code (`Resource("byte_tokenizer")`);
`warm_up` runs once in the warm interpreter, so every student's forked process starts
with these first-call costs paid. The same file serves the in-process student (stock
nbgrader, and checking the checks on the solutions).
"""


def byte_tokenizer():
    """A tiktoken encoding with one token per byte: built here, no vocabulary to download."""
    import tiktoken

    return tiktoken.Encoding(name="bytes", pat_str=r"\S+|\s+",
                             mergeable_ranks={bytes([i]): i for i in range(256)}, special_tokens={})


RESOURCES = {"byte_tokenizer": byte_tokenizer}


def warm_up():
    import torch
    from torch.utils.data import DataLoader, TensorDataset

    byte_tokenizer().encode("warm up")
    for _ in DataLoader(TensorDataset(torch.arange(6)), batch_size=2, shuffle=True):
        pass
