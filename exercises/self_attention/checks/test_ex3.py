"""Exercise 3: context_vectors(inputs)."""
import pytest
import torch

from autograder.checks import expect_close, expect_tensor, fail, name_mistake, close

from autograder.checks import randn
from .common import JOURNEY
from autograder.checks import diagnosis, locate_function

NAME = "context_vectors"


def mistakes(x):
    scores = x @ x.T
    return [
        (scores @ x, "the scores are used as weights without softmax. Apply softmax over the last"
         " dimension first, so each token's weights sum to 1."),
        (torch.softmax(scores, dim=0) @ x, "softmax ran over the wrong dimension (dim=0). Use"
         " dim=-1: row i holds the weights of token i."),
        (torch.softmax(scores / x.shape[-1] ** 0.5, dim=-1) @ x, "the scores are scaled, but this"
         " exercise uses plain dot products: softmax(inputs @ inputs.T) @ inputs."),
        (torch.softmax(scores, dim=-1), "this is the weight matrix; multiply it by the inputs to get"
         " the context vectors."),
    ]


def expect_context(student, x, what):
    if student.kind(NAME) != "function":
        fail(f"`{NAME}` should be a function, but it is {student.kind(NAME)}.")
    got = expect_tensor(student.call(NAME, x.clone()), what, finite=False)
    expected = torch.softmax(x @ x.T, dim=-1) @ x
    if not close(got, expected):
        name_mistake(got, [(v, e) for v, e in mistakes(x) if not close(v, expected)], what)
    expect_close(got, expected, what, "Compute softmax(inputs @ inputs.T, dim=-1) @ inputs.")


@pytest.mark.fixed_inputs("test_random_inputs")
def test_journey(student):
    """Gives the context vectors of the notebook's sentence"""
    expect_context(student, JOURNEY, "The context vectors of the notebook's sentence")


@pytest.mark.weight(2)
@pytest.mark.parametrize("tokens, features", [(5, 4), (3, 8)])
def test_random_inputs(student, rng, tokens, features):
    """Gives (T, d) context vectors for other inputs"""
    expect_context(student, randn(rng, tokens, features) * 0.7,
                   f"For inputs of shape {(tokens, features)}, the context vectors")


def probe(student, rng):
    """Seven tokens of 4 features, then three of 5."""
    for tokens, features in ((7, 4), (3, 5)):
        yield student.call(NAME, randn(rng, tokens, features))


test_diagnosis = diagnosis(probe, locate_function(NAME, lambda rng: [randn(rng, 6, 3)]))
