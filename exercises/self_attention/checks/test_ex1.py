"""Exercise 1: attention_scores(inputs)."""
import pytest
import torch

from autograder.checks import close, expect_close, expect_tensor, fail

from autograder.checks import randn
from .common import JOURNEY
from autograder.checks import diagnosis, locate_function

NAME = "attention_scores"


def expect_scores(student, x, what):
    if student.kind(NAME) != "function":
        fail(f"`{NAME}` should be a function, but it is {student.kind(NAME)}.")
    tokens, features = x.shape
    got = expect_tensor(student.call(NAME, x.clone()), what, finite=False)
    expected = x @ x.T
    # Name a mistake only when the answer is wrong: a right answer can look like one by
    # chance (one token whose score is 1.0 is also its softmax).
    if tuple(got.shape) != tuple(expected.shape):
        name_shape_mistake(got, tokens, features, what)
    expect_tensor(got, what, shape=expected.shape)
    if tokens > 1 and not close(got, expected) and close(got, torch.softmax(expected, dim=-1)):
        fail(f"{what} are softmax weights. Return the raw dot products; softmax comes later.")
    expect_close(got, expected, what, "Entry [i, j] should be the dot product of token i and token j.")


def name_shape_mistake(got, tokens, features, what):
    if tuple(got.shape) == (features, features):
        fail(f"{what} have shape {(features, features)}, a table of features: that is inputs.T @ inputs."
             f" The scores compare tokens, so they are inputs @ inputs.T, of shape {(tokens, tokens)}.")
    if tuple(got.shape) == (tokens, features):
        fail(f"{what} have the shape of the inputs, {(tokens, features)}: multiply with a matrix product"
             " (inputs @ inputs.T), not element by element (inputs * inputs).")
    if tuple(got.shape) == (tokens,):
        fail(f"{what} hold one score per token: these are the scores of a single query. Compute all"
             " pairs at once with inputs @ inputs.T.")


@pytest.mark.fixed_inputs("test_random_inputs")
def test_journey(student):
    """Gives the 6 x 6 scores of the notebook's sentence"""
    expect_scores(student, JOURNEY, "The scores for the notebook's sentence")


@pytest.mark.weight(2)
@pytest.mark.parametrize("tokens, features", [(4, 7), (9, 2), (1, 5)])
def test_random_inputs(student, rng, tokens, features):
    """Gives (T, T) scores for other numbers of tokens and features"""
    expect_scores(student, randn(rng, tokens, features), f"For inputs of shape {(tokens, features)}, the scores")


def probe(student, rng):
    """Seven tokens (more than the worked example's six) of 4 features, then three of 5."""
    for tokens, features in ((7, 4), (3, 5)):
        yield student.call(NAME, randn(rng, tokens, features))


test_diagnosis = diagnosis(probe, locate_function(NAME, lambda rng: [randn(rng, 6, 3)]))
