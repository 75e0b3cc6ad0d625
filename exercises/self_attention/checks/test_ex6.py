"""Exercise 6: copy_weights_v2_to_v1(sa_v2, sa_v1)."""
import pytest
import torch

from autograder.checks import close, expect_close, expect_tensor, fail, shape_text

from autograder.checks import randn
from autograder.checks import diagnosis

NAME = "copy_weights_v2_to_v1"
PARTS = ("W_query", "W_key", "W_value")


def copy_with_student_code(student, rng, d_in, d_out):
    """Build the student's v2 with known weights and a fresh v1, run the copy.

    Returns (v2 handle, v1 handle, {part: v2 weight}, v1's parameters afterwards).
    """
    if student.kind(NAME) != "function":
        fail(f"`{NAME}` should be a function, but it is {student.kind(NAME)}.")
    v2, v1 = student.new("SelfAttention_v2", (d_in, d_out)), student.new("SelfAttention_v1", (d_in, d_out))
    weights = {part: randn(rng, d_out, d_in) for part in PARTS}
    report = student.load_parameters(v2, {f"{part}.weight": w for part, w in weights.items()})
    if report["missing"] or report["wrong_shape"] or report["extra"]:
        fail("This exercise uses your SelfAttention_v2, whose layers are not nn.Linear(d_in, d_out)"
             " W_query, W_key, W_value without bias: fix Exercise 5 first.")
    before = student.parameters(v1)
    student.call_with_modules(NAME, [v2, v1])
    return v2, v1, weights, before, student.parameters(v1)


def _blend(got, old, new):
    """a when `got` is a * new + (1 - a) * old for one a strictly between 0 and 1, else None."""
    if got.shape != new.shape or old.shape != new.shape or close(new, old):
        return None
    step = (new - old).double()
    a = ((got.double() - old.double()) * step).sum() / (step * step).sum()
    a = a.item()
    return a if 0.0 < a < 0.999 and close(got, old + a * (new - old)) else None


def expect_copied(weights, before, after, d_in, d_out):
    for part in PARTS:
        got = after.get(part)
        if got is None:
            fail(f"After the copy, sa_v1 has no parameter {part}: keep it an nn.Parameter"
                 " (copy values in place with .copy_ under torch.no_grad()).")
        got = expect_tensor(got, f"sa_v1.{part}")
        want = weights[part].T
        if close(got, want):
            continue
        if tuple(got.shape) == tuple(weights[part].shape) and d_in != d_out:
            fail(f"After the copy, sa_v1.{part} has shape {shape_text(got.shape)}, the shape of"
                 f" nn.Linear's weight. SelfAttention_v1 multiplies x @ {part}, so it needs the"
                 " transpose: weight.T.")
        if tuple(got.shape) != tuple(want.shape):
            fail(f"After the copy, sa_v1.{part} has shape {shape_text(got.shape)}; expected"
                 f" {shape_text(want.shape)}.")
        if close(got, before[part]) and not close(got, want):
            fail(f"After your function ran, sa_v1.{part} is unchanged. Assigning a new value to a plain name"
                 " (a loop variable, for example) does not change the parameter: copy into it in place, sa_v1."
                 f"{part}.copy_(...) under torch.no_grad(), from sa_v2 into sa_v1 (the second argument).")
        blend = _blend(got, before[part], want)
        if blend is not None:
            fail(f"After the copy, sa_v1.{part} is a mix: {blend:.3g} of sa_v2's weights (transposed) and"
                 f" {1 - blend:.3g} of its own old values, like a soft update. Copy sa_v2's weights exactly"
                 " (copy_ the whole value).")
        if close(got, weights[part]):
            fail(f"sa_v1.{part} holds nn.Linear's weight as it is; SelfAttention_v1 needs its"
                 " transpose, weight.T.")
        for other in PARTS:
            if other != part and close(got, weights[other].T):
                fail(f"sa_v1.{part} got the weights of {other}: copy each matrix to its namesake.")
        expect_close(got, want, f"After the copy, sa_v1.{part}", f"It should be sa_v2.{part}.weight.T.")


@pytest.mark.weight(2)
@pytest.mark.parametrize("d_in, d_out", [(5, 3), (4, 4)], ids=["5x3", "square"])
def test_weights_copied(student, rng, d_in, d_out):
    """sa_v1's matrices become the transposes of sa_v2's weights"""
    _, _, weights, before, after = copy_with_student_code(student, rng, d_in, d_out)
    expect_copied(weights, before, after, d_in, d_out)


@pytest.mark.after("test_weights_copied")
def test_same_outputs(student, rng):
    """Afterwards sa_v1(x) equals sa_v2(x)"""
    v2, v1, _, _, _ = copy_with_student_code(student, rng, 5, 3)
    x = randn(rng, 6, 5)
    out_v2 = expect_tensor(student.forward(v2, x), "sa_v2(x)", shape=(6, 3))
    out_v1 = expect_tensor(student.forward(v1, x), "After the copy, sa_v1(x)", shape=(6, 3))
    if not torch.allclose(out_v1, out_v2, atol=1e-5):
        fail("After the copy, sa_v1(x) and sa_v2(x) differ. If the weights are copied right, the two"
             " forward methods compute different things: compare Exercises 4 and 5.")


def probe(student, rng):
    """The copy between square layers, then between 5 -> 3 layers: sa_v1's and sa_v2's parameters after."""
    for d_in, d_out in ((4, 4), (5, 3)):
        v2, v1 = student.new("SelfAttention_v2", (d_in, d_out), seed=0), student.new("SelfAttention_v1", (d_in, d_out), seed=0)
        student.load_parameters(v2, {f"{part}.weight": randn(rng, d_out, d_in) for part in PARTS})
        student.call_with_modules(NAME, [v2, v1])
        yield student.parameters(v1), student.parameters(v2)


test_diagnosis = diagnosis(probe)
