"""Shared trusted-side steps for the `self_attention` hidden checks."""
import torch

from autograder.checks import brief, close, fail

# "Your journey starts with one step": six 3-d token embeddings.
JOURNEY = torch.tensor([[0.43, 0.15, 0.89], [0.55, 0.87, 0.66], [0.57, 0.85, 0.64],
                        [0.22, 0.58, 0.33], [0.77, 0.25, 0.10], [0.05, 0.80, 0.55]])


def attend(queries, keys, values, scale_by, softmax_dim=-1):
    """softmax(Q K^T / sqrt(scale_by)) V, with switches that reproduce mistakes."""
    return torch.softmax(queries @ keys.T / scale_by ** 0.5, dim=softmax_dim) @ values


def project(ref, name, x):
    """x through the reference's W_query / W_key / W_value (a matrix or an nn.Linear)."""
    weight = getattr(ref, name)
    return weight(x) if isinstance(weight, torch.nn.Module) else x @ weight


def attention_mistakes(queries, keys, values, right_scale, right_name, wrong_scales=()):
    """(output, explanation) for the usual ways to get scaled dot-product attention wrong (the
    error model: each one a small change to the reference). `wrong_scales` are (size, name)
    of other sizes a student may scale by."""
    tokens = keys.shape[0]
    variants = [
        (attend(queries, keys, values, 1.0), "the scores are not scaled: divide them by"
         f" sqrt({right_name}) before softmax."),
        (attend(queries, keys, values, right_scale ** 2), f"the scores are divided by {right_name};"
         f" divide by its square root, sqrt({right_name})."),
        (attend(queries, keys, values, right_scale, softmax_dim=0), "softmax ran over the wrong"
         " dimension, dim=0 (the queries). Use dim=-1, so that each token's weights sum to 1."),
    ]
    if queries.shape == keys.shape:
        variants.append((attend(keys, queries, values, right_scale), "the scores are keys @ queries.T, the"
                         " transpose of what they should be: compute queries @ keys.T (each query against"
                         " every key)."))
    for size, name in [*wrong_scales, (tokens, "the number of tokens")]:
        if size != right_scale:
            variants.insert(0, (attend(queries, keys, values, size),
                                f"the scores are scaled by sqrt({name}); scale them by"
                                f" sqrt({right_name}), the size of the queries and keys."))
    return variants


def self_attention_mistakes(x, ref):
    queries, keys, values = (project(ref, name, x) for name in ("W_query", "W_key", "W_value"))
    return attention_mistakes(queries, keys, values, keys.shape[-1], "d_out", [(x.shape[-1], "d_in")])


def cross_attention_mistakes(inputs, ref):
    x_1, x_2 = inputs
    queries, keys, values = project(ref, "W_query", x_1), project(ref, "W_key", x_2), project(ref, "W_value", x_2)
    return attention_mistakes(queries, keys, values, keys.shape[-1], "d_out_kq",
                              [(values.shape[-1], "d_out_v"), (x_1.shape[-1], "d_in")])


def expect_parameters(structure, expected, class_name, hint):
    """The module's parameters have exactly these names and shapes, in this order."""
    if not structure["is_module"]:
        fail(f"{class_name} should be a subclass of nn.Module.")
    got = structure["parameters"]
    if not got and expected:
        fail(f"Your {class_name} has no trainable parameters. {hint}")
    if set(got) != set(expected):
        fail(f"Your {class_name} has parameters {brief(sorted(got))}; expected {list(expected)}. {hint}")
    for name, shape in expected.items():
        if got[name] != list(shape):
            fail(f"In your {class_name}, {name} has shape {brief(tuple(got[name]))}; expected {tuple(shape)}. {hint}")
    frozen = [name for name in structure.get("frozen", ()) if name in expected]
    if frozen:
        fail(f"In your {class_name}, {', '.join(frozen)} {'is' if len(frozen) == 1 else 'are'} frozen"
             " (requires_grad=False), so training would never change them: create them as plain"
             " nn.Parameter(...), which are trainable.", apart=True)
    # (names and shapes are right: the order alone differs, which nothing but __init__ decides)
    if list(got) != list(expected):
        fail(f"Your {class_name} creates its parameters in the order {brief(list(got))}; create them in the"
             f" order {list(expected)}, so that a seed gives everyone the same start.", apart=True)


def expect_weight_rows(student, reference, class_name, args, rng, value_name, x_1, x_2=None, **kwargs):
    """With one-hot tokens and an identity value matrix the output *is* the weight
    matrix: each row must be a probability distribution over the tokens."""
    from autograder.checks import paired
    from autograder.checks import expect_tensor

    d = args[0]
    handle, ref = paired(student, reference, class_name, args, rng,
                         overrides={value_name: torch.eye(d)}, **kwargs)
    inputs = (x_1,) if x_2 is None else (x_1, x_2)
    keys = inputs[-1]
    got = expect_tensor(student.forward(handle, *inputs), "The attention weights",
                        shape=(x_1.shape[0], keys.shape[0]), finite=False)
    rows, columns = got.sum(-1), got.sum(0)
    if not torch.allclose(rows, torch.ones_like(rows), atol=1e-4):
        with torch.no_grad():
            expected = ref(*inputs)
        if close(got, expected.T):
            # (square here, so a transposed output has the right shape: its columns sum to 1 as
            # they would after softmax over dim=0, but these are the right weights, turned over)
            fail("The output is transposed: with the value matrix the identity the output is the weight"
                 " matrix, and yours is the right one with rows and columns swapped. Return the context"
                 " vectors as they come out of weights @ values, one row per token (no .T at the end).")
        if torch.allclose(columns, torch.ones_like(columns), atol=1e-4):
            fail("Each column of the attention weights sums to 1 instead of each row: softmax ran"
                 " over the wrong dimension (dim=0). Use dim=-1.")
        fail("Each row of the attention weights should sum to 1, but the sums range from"
             f" {rows.min().item():.4f} to {rows.max().item():.4f}. Apply softmax to the scores"
             " over the last dimension.")
    if (got < 0).any():
        fail("Some attention weights are negative: they should come from softmax.")
    expect_weights_use_queries_and_keys(student, handle, inputs, got)


def expect_weights_use_queries_and_keys(student, handle, inputs, weights):
    """Rows that sum to 1 earn nothing when the weights ignore the queries and keys (every token the
    same weight): the weights must change when W_query's, and when W_key's, values change."""
    parameters = {name: value.clone() for name, value in student.parameters(handle).items()}  # (in-process: shared)
    unused = []
    for role, layer in (("queries", "W_query"), ("keys", "W_key")):
        names = sorted(name for name in parameters if name.split(".")[0] == layer)
        if not names:
            continue  # no such weights: the parameter checks say so
        student.load_parameters(handle, {name: parameters[name] * 2 + 0.5 for name in names})
        after = student.forward(handle, *inputs)
        student.load_parameters(handle, {name: parameters[name] for name in names})
        if isinstance(after, torch.Tensor) and after.shape == weights.shape and torch.allclose(
                after, weights, atol=1e-6, equal_nan=True):
            unused.append((role, layer))
    if len(unused) == 2:
        fail("The attention weights stay the same when W_query and W_key change: they ignore the queries and"
             " keys. Compute the scores queries @ keys.T, scale them and apply softmax.", named=True)
    if unused:
        (role, layer), = unused
        fail(f"The attention weights stay the same when {layer} changes: the {role} are not computed with {layer}"
             f" (or not used in the scores).")


def expect_seeded_first_row(student, class_name, seed, expected, hint, reference=None):
    """`class_name(3, 2)` built after torch.manual_seed(seed) gives `expected` as the first
    output row on the notebook's sentence (the values the notebook prints). With the `reference`,
    parameters that start from other values than its own are named first: whatever forward does,
    they are __init__'s (verdict.MistakeApart)."""
    from autograder.checks import reference_module, student_forward

    handle = student.new(class_name, (3, 2), seed=seed)
    if reference is not None:
        theirs = student.parameters(handle)
        ours = dict(reference_module(reference, class_name, 3, 2, seed=seed).named_parameters())
        if set(theirs) == set(ours) and all(isinstance(theirs[name], torch.Tensor)
                                            and theirs[name].shape == ours[name].shape for name in ours):
            differ = [name for name in ours if not torch.allclose(theirs[name], ours[name].detach(), atol=1e-6)]
            if differ:
                fail(f"With torch.manual_seed({seed}), your {class_name}(3, 2) starts from other values than the"
                     f" exercise's in {brief(differ)}, whatever its forward does. {hint}", apart=True)
    got = student_forward(student, handle, JOURNEY, shape=(6, 2))
    expected = torch.tensor(expected)
    if not torch.allclose(got[0], expected, atol=1e-4):
        fail(f"With torch.manual_seed({seed}) and {class_name}(3, 2), the first output row should be"
             f" {[round(v, 4) for v in expected.tolist()]}, got {[round(v, 4) for v in got[0].tolist()]}. {hint}")

