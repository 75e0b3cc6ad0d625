"""Exercise 2: softmax_naive(x, dim=-1) and softmax_stable(x, dim=-1)."""
import pytest
import torch

from autograder.checks import StudentError
from autograder.checks import close, expect_close, expect_tensor, fail, name_mistake

from autograder.checks import randn
from autograder.checks import diagnosis, locate_any, locate_function

CASES = [((5,), -1), ((3, 6), -1), ((3, 6), 0), ((2, 3, 4), 1)]
IDS = ["1d", "2d", "2d-dim0", "3d-dim1"]


def softmax_of(student, name, x, dim):
    if student.kind(name) != "function":
        fail(f"`{name}` should be a function, but it is {student.kind(name)}.")
    try:
        return student.call(name, x.clone(), dim=dim)
    except StudentError as error:
        if "must match the size" in str(error):
            fail(f"`{name}(x, dim={dim})` for x of shape {tuple(x.shape)} failed: {error}. A max or sum"
                 " along `dim` drops that dimension, so it no longer lines up with x: pass"
                 " keepdim=True.")
        raise


def dim_mistakes(x, dim):
    exps = x.exp()
    return [
        (exps / exps.sum(), "it divides by the sum of all entries. Sum along `dim` only:"
         " exps.sum(dim=dim, keepdim=True)."),
        (torch.softmax(x, dim=-1), "it always works along the last dimension and ignores the `dim`"
         " argument."),
    ]


def expect_softmax(student, name, x, dim, what):
    got = expect_tensor(softmax_of(student, name, x, dim), what, shape=x.shape, finite=False)
    expected = torch.softmax(x, dim=dim)
    if not close(got, expected):
        name_mistake(got, [(v, e) for v, e in dim_mistakes(x, dim) if not close(v, expected)], what)
    expect_close(got, expected, what, f"The entries along dim={dim} should be positive and sum to 1.")


@pytest.mark.parametrize("shape, dim", CASES, ids=IDS)
def test_naive(student, rng, shape, dim):
    """softmax_naive matches softmax for ordinary inputs, along any dim"""
    expect_softmax(student, "softmax_naive", randn(rng, *shape), dim,
                   f"The results of softmax_naive(x, dim={dim}) for x of shape {shape}")


def test_naive_is_the_plain_formula(student, rng):
    """softmax_naive is the plain formula: it overflows for inputs around 1000, as expected"""
    x = randn(rng, 4) + 1000
    got = expect_tensor(softmax_of(student, "softmax_naive", x, -1), "softmax_naive(x)", shape=x.shape,
                        finite=False)
    if torch.isfinite(got).all():
        fail("softmax_naive should be the plain formula exp(x) / sum(exp(x)), which overflows for"
             " inputs around 1000. Keep the max-subtraction for softmax_stable.")


@pytest.mark.parametrize("shape, dim", CASES, ids=IDS)
def test_stable(student, rng, shape, dim):
    """softmax_stable matches softmax for ordinary inputs, along any dim"""
    expect_softmax(student, "softmax_stable", randn(rng, *shape), dim,
                   f"The results of softmax_stable(x, dim={dim}) for x of shape {shape}")


def stability_mistakes(x, dim):
    def shifted(by):
        exps = (x - by).exp()
        return exps / exps.sum(dim=dim, keepdim=True)

    return [
        (shifted(0.0), "it overflows: exp of inputs around 1000 is inf. Subtract the maximum along"
         " `dim` before exp."),
        (shifted(x.max()), "it subtracts the maximum of the whole tensor, so rows far below it"
         " underflow to 0 / 0. Subtract each slice's own maximum: x.max(dim=dim, keepdim=True).values."),
        (shifted(x.min(dim=dim, keepdim=True).values), "it subtracts the minimum, which leaves"
         " exponents above 88 that overflow. Subtract the maximum instead."),
    ]


@pytest.mark.weight(2)
@pytest.mark.parametrize("dim", [-1, 0])
def test_stable_for_large_inputs(student, rng, dim):
    """softmax_stable stays finite and exact for inputs around +1000 and -1000"""
    x = randn(rng, 3, 5) * 3
    x[0] += 1000  # exp overflows here
    x[1] -= 1000  # and underflows here
    x[2, 0], x[2, 1] = 500, -500  # a wide spread within one slice
    what = f"The results of softmax_stable(x, dim={dim}) for inputs around 1000"
    got = expect_tensor(softmax_of(student, "softmax_stable", x, dim), what, shape=x.shape, finite=False)
    expected = torch.softmax(x, dim=dim)
    if not close(got, expected):
        name_mistake(got, stability_mistakes(x, dim), what)
    expect_tensor(got, what)
    expect_close(got, expected, what, "Subtract the maximum along `dim` (keepdim=True) before exp.")


def probe(student, rng):
    """Both functions along every dimension of a 3-D tensor, then on inputs large enough to overflow
    exp, and on slices far apart (where a global shift underflows)."""
    x = randn(rng, 3, 4, 5)
    far = torch.stack([randn(rng, 4), randn(rng, 4) - 200.0])
    for name in ("softmax_naive", "softmax_stable"):
        for dim in (-1, 1, 0):
            yield student.call(name, x, dim=dim)
        yield student.call(name, x * 100.0, dim=-1)
        yield student.call(name, far, dim=-1)


test_diagnosis = diagnosis(probe, locate_any(locate_function("softmax_naive", lambda rng: [randn(rng, 4, 5)]),
                                            locate_function("softmax_stable", lambda rng: [randn(rng, 4, 5) * 30])))
