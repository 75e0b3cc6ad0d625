"""Trusted-side steps that hidden checks of every assignment share.

Modules are compared by building the student's and the reference module with
identical parameters (copied by name) and running both on the same input.
"""
import torch

from autograder.wire import seeded
from autograder.checks.verdict import (close, expect_close, expect_tensor, fail, listed, name_mistake, no_known_mistake,
                                        shape_text, short)


def randn(rng, *shape):
    return torch.randn(*shape, generator=rng)


def reference_module(reference, class_name, *args, seed=0, **kwargs):
    """The reference module, initialised from `seed` without touching global RNG state."""
    with seeded(seed):
        return getattr(reference, class_name)(*args, **kwargs).eval()


def randomize(module, rng, overrides=None):
    """Give every parameter fresh values from `rng` (init order never matters)."""
    overrides = overrides or {}
    with torch.no_grad():
        for name, param in module.named_parameters():
            if name in overrides:
                param.copy_(overrides[name])
            else:
                param.copy_(torch.randn(param.shape, generator=rng) / param.shape[-1] ** 0.5)
    return module


def paired(student, reference, class_name, args, rng, overrides=None, **kwargs):
    """Build the student's and the reference module with identical parameters.

    Parameters are copied by name, so the student's init order is irrelevant.
    Returns (student handle, reference module).
    """
    ref = randomize(reference_module(reference, class_name, *args, **kwargs), rng, overrides)
    params = {name: p.detach().clone() for name, p in ref.named_parameters()}
    built = student.build(class_name, args, kwargs, params)
    if built["kind"] != "class":
        fail(f"`{class_name}` should be a class, but it is {built['kind']}.")
    handle, report = built["handle"], built["report"]
    option = next((key for key, value in kwargs.items() if "bias" in key and value is True), None)
    if option and report["missing"] and all(name.endswith(".bias") for name in report["missing"]):
        fail(f"Your {class_name} has no {listed(report['missing'], 4)}: its layers were made without a"
             f" bias although {option}=True asks for one. Pass the option on to each nn.Linear"
             f" (bias={option}).", named=True)
    if report["missing"]:
        names = listed(report["missing"], 4)
        fail(f"Your {class_name} has no parameter named {names}. Use the attribute names the"
             f" exercise gives (and nn.Linear/nn.Embedding layers), so weights can be compared.")
    if report["wrong_shape"]:
        name, (got, want) = next(iter(report["wrong_shape"].items()))
        fail(f"In your {class_name}, {short(name)} has shape {shape_text(got)}; expected {shape_text(want)}.")
    if report["extra"]:
        fail(f"Your {class_name} has parameters the exercise does not ask for:"
             f" {listed(report['extra'], 4)}.")
    return handle, ref


def student_forward(student, handle, *inputs, shape, what="The output"):
    return expect_tensor(student.forward(handle, *inputs), what, shape=shape)


def expect_reference_output(student, reference, class_name, args, x, rng, what, hint, mistakes=None,
                            **kwargs):
    """Same parameters, same input: the student's output must match the reference's.

    `mistakes(x, ref)` may return (output, explanation) pairs that name a mistake;
    they are tried before anything else, NaNs included. `kwargs` go to both
    constructors.
    """
    inputs = x if isinstance(x, tuple) else (x,)  # a tuple for modules with several inputs
    handle, ref = paired(student, reference, class_name, args, rng, **kwargs)
    with torch.no_grad():
        expected = ref(*inputs)
    got = expect_tensor(student.forward(handle, *inputs), what, shape=expected.shape, finite=False)
    if mistakes is not None and not close(got, expected):
        with torch.no_grad():
            name_mistake(got, mistakes(x, ref), what)
        no_known_mistake(got, expected, what)  # never a list of guesses when there is an error model
    expect_close(got, expected, what, hint)


# -- the error model's diagnosis (checks/errormodel.py) ---------------------------------------
def diagnosis(probe):
    """The check that names a cell's mistake from the error model, in the cell's test file (it
    runs after the file's other checks, wherever it is defined; see plugin.py):

        test_diagnosis = diagnosis(probe)

    `probe(student, rng)` yields observations (see errormodel). The check runs only when another
    check of the cell failed, costs no points, and is listed only when it names the mistake."""
    import pytest

    from autograder.checks import errormodel
    from autograder.checks.plugin import grade_id_of

    @pytest.mark.diagnosis
    def test_diagnosis(request, student, error_model, solutions, resources, seed, cell_failed, upstream_failed):
        """Your answer, compared with the common mistakes for this exercise"""
        mutants = error_model.get(grade_id_of(request.node))
        if not cell_failed or upstream_failed or not mutants or getattr(student, "lost", None):
            return  # nothing failed; the cause is upstream (checks/rootcause.py says so); nothing known; or gone
        seen = errormodel.observe(probe, student, seed)
        chosen = errormodel.recognise(seen, probe, solutions, mutants, seed, resources)
        if chosen:
            fail(errormodel.message(chosen), named=True)

    test_diagnosis.probe = probe  # for the error model's own check (authoring/errorcheck.py)
    return test_diagnosis


def random_parameters(rng, shapes):
    """Fresh values for parameters of these {name: shape}, drawn in name order."""
    return {name: torch.randn(*shape, generator=rng) / max(shape[-1], 1) ** 0.5 if shape else torch.randn((), generator=rng)
            for name, shape in sorted(shapes.items())}


def observe_module(student, rng, class_name, args, kwargs=None, inputs=(), train_inputs=()):
    """Observations of a module exercise, for a diagnosis probe: its parameter and buffer names
    and shapes, then its outputs with random parameters of those shapes, on each of `inputs`
    (tuples of tensors) in eval mode and each of `train_inputs` in training mode."""
    handle = student.new(class_name, args, kwargs, seed=0)
    structure = student.structure(handle)
    shapes = structure.get("parameters", {})
    yield {"parameters": shapes, "buffers": sorted(structure.get("buffers", {}))}
    student.load_parameters(handle, random_parameters(rng, shapes))
    for x in inputs:
        yield student.forward(handle, *x)
    for x in train_inputs:
        yield student.forward(handle, *x, train=True, seed=1)
