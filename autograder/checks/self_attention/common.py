"""Shared trusted-side steps for the `self_attention` hidden checks."""
import torch

from autograder.verdict import fail

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


def attention_mistakes(queries, keys, values, right_scale, wrong_scale, wrong_name, right_name):
    """(output, explanation) for the usual ways to get scaled dot-product attention wrong."""
    variants = [
        (attend(queries, keys, values, 1.0), "the scores are not scaled: divide them by"
         f" sqrt({right_name}) before softmax."),
        (attend(queries, keys, values, right_scale ** 2), f"the scores are divided by {right_name};"
         f" divide by its square root, sqrt({right_name})."),
        (attend(queries, keys, values, right_scale, softmax_dim=0), "softmax ran over the wrong"
         " dimension, dim=0 (the queries). Use dim=-1, so that each token's weights sum to 1."),
    ]
    if wrong_scale != right_scale:
        variants.insert(0, (attend(queries, keys, values, wrong_scale),
                            f"the scores are scaled by sqrt({wrong_name}); scale them by"
                            f" sqrt({right_name}), the size of the queries and keys."))
    return variants


def self_attention_mistakes(x, ref):
    queries, keys, values = (project(ref, name, x) for name in ("W_query", "W_key", "W_value"))
    return attention_mistakes(queries, keys, values, keys.shape[-1], x.shape[-1], "d_in", "d_out")


def cross_attention_mistakes(inputs, ref):
    x_1, x_2 = inputs
    queries, keys, values = project(ref, "W_query", x_1), project(ref, "W_key", x_2), project(ref, "W_value", x_2)
    return attention_mistakes(queries, keys, values, keys.shape[-1], values.shape[-1],
                              "d_out_v", "d_out_kq")


def expect_parameters(structure, expected, class_name, hint):
    """The module's parameters have exactly these names and shapes, in this order."""
    if not structure["is_module"]:
        fail(f"{class_name} should be a subclass of nn.Module.")
    got = structure["parameters"]
    if not got and expected:
        fail(f"Your {class_name} has no trainable parameters. {hint}")
    if set(got) != set(expected):
        fail(f"Your {class_name} has parameters {sorted(got)}; expected {list(expected)}. {hint}")
    for name, shape in expected.items():
        if got[name] != list(shape):
            fail(f"In your {class_name}, {name} has shape {tuple(got[name])}; expected {tuple(shape)}. {hint}")
    if list(got) != list(expected):
        fail(f"Your {class_name} creates its parameters in the order {list(got)}; create them in the"
             f" order {list(expected)}, so that a seed gives everyone the same start.")
