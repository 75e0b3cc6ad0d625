"""Pay torch's first-call costs before a submission does.

Both sides run the probe API (`student.py`): the sandbox on a submission, the grader's error
model on the reference with a known mistake (checks/errormodel.py). Each pays, once per process
and before any submission is timed, what torch's first calls cost: lazy imports (sympy for the
meta device, about 0.5 s), dispatch modes, autograd, deepcopy, DataLoader, and torch's compiler
(torch._dynamo, about 1.5 s), which nothing here compiles and so is kept from loading at all.
"""
import sys


class _DynamoUndo:
    """Import hook: the first import of torch._dynamo gives back torch's own markers
    (see `defer_dynamo`), so code that compiles runs exactly as torch intends."""

    def __init__(self, marked):
        self.marked = marked

    def find_spec(self, name, path=None, target=None):
        if name == "torch._dynamo" and self.marked:  # (it stays in sys.meta_path: the import is
            marked, self.marked = self.marked, []   # going through that list right now)
            for fn in marked:
                if fn.__dict__.get("__dynamo_disable") is fn:
                    del fn.__dict__["__dynamo_disable"]
        return None  # the import itself goes on as usual


def defer_dynamo():
    """Keep torch's compiler (torch._dynamo, about a second to import) out of this process.

    torch marks many of its own Python kernels, among them those the meta device runs (the
    meta-device probe), "not to be compiled" with `torch._disable_dynamo`, which imports the
    compiler on a kernel's first call only to mark it. Nothing is compiled here unless some
    code asks, so each such kernel is marked with itself (torch caches the marked
    kernel in `__dynamo_disable`); the first import of torch._dynamo removes these marks
    again. Returns how many kernels were marked (0 if this torch works differently: then the
    compiler is simply imported as before)."""
    import gc
    import types

    import torch._compile

    if "torch._dynamo" in sys.modules:
        return 0
    try:
        inner = torch._compile._disable_dynamo(lambda: None).__code__
        at = inner.co_freevars.index("fn")
    except (AttributeError, TypeError, ValueError):
        return 0
    marked = []
    for obj in gc.get_objects():
        if type(obj) is types.FunctionType and obj.__code__ is inner and obj.__closure__:
            fn = obj.__closure__[at].cell_contents
            attributes = getattr(fn, "__dict__", None)
            if isinstance(attributes, dict) and "__dynamo_disable" not in attributes:
                attributes["__dynamo_disable"] = fn
                marked.append(fn)
    if marked:
        sys.meta_path.insert(0, _DynamoUndo(marked))
    return len(marked)


def first_calls():
    """Pay torch's first-call costs once, here, so that every forked child starts warm.

    Without this each submission pays about a second for lazy initialisation
    (autograd, dispatch modes, deepcopy, DataLoader) on its first probes.
    """
    import torch
    import torch.nn.functional as F
    from torch.utils.data import DataLoader, TensorDataset

    from autograder.inside.student import NamespaceStudent

    defer_dynamo()  # after the imports above: they define more of the kernels it marks

    class Tiny(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.embedding = torch.nn.Embedding(10, 4)
            self.linear = torch.nn.Linear(4, 4)
            self.dropout = torch.nn.Dropout(0.5)
            self.register_buffer("mask", torch.triu(torch.ones(8, 8), diagonal=1))

        def forward(self, x):
            n = x.shape[-2]
            q = self.linear(x).view(*x.shape[:-1], 2, 2).transpose(1, 2)
            scores = torch.einsum("bhqd,bhkd->bhqk", q, q) / 2 ** 0.5
            scores = scores.masked_fill(self.mask.bool()[:n, :n], -torch.inf)
            weights = self.dropout(torch.softmax(scores, dim=-1))
            out = (weights @ q).transpose(1, 2).contiguous().view(x.shape)
            out = out + F.scaled_dot_product_attention(q, q, q, is_causal=True).transpose(1, 2).reshape(x.shape)
            return out + self.embedding(torch.arange(n, device=x.device))

    student = NamespaceStudent({"Tiny": Tiny})
    handle = student.new("Tiny", seed=0)
    x = torch.randn(2, 3, 4)
    student.structure(handle)
    student.load_parameters(handle, {"linear.bias": torch.zeros(4)})
    student.forward(handle, x, train=True)
    student.vjp(handle, [x], torch.ones(2, 3, 4))
    student.vjp(handle, [x], torch.ones(2, 3, 4), wrt="linear.weight")
    student.meta_forward(handle, x)
    for _ in DataLoader(TensorDataset(torch.arange(6)), batch_size=2, shuffle=True):
        pass
