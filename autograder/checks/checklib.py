"""Trusted-side steps that hidden checks of every assignment share.

Modules are compared by building the student's and the reference module with
identical parameters (copied by name) and running both on the same input.
"""
import functools
import inspect
from pathlib import Path

import torch

from autograder.wire import StudentError, seeded
from autograder.checks.verdict import (close, expect_close, expect_tensor, fail, listed, name_mistake, no_known_mistake,
                                        shape_text, short, sized_shape)


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
        in_plain_container(student, handle, class_name, report["missing"])
        names = listed(report["missing"], 4)
        # What the exercise asks for, read from the reference's own names (the sandbox's report only
        # picks which of them are missing): a layer's parameters have a dot in their names.
        asked = [name for name in params if name in set(report["missing"])]
        made = ("nn.Linear/nn.Embedding layers" if asked and all("." in name for name in asked)
                else "each an nn.Parameter" if asked and not any("." in name for name in asked)
                else "layers or nn.Parameter")
        fail(f"Your {class_name} has no parameter named {names}. Use the attribute names the"
             f" exercise gives ({made}, as it asks), so weights can be compared.")
    if report["wrong_shape"]:
        name, (got, want) = next(iter(report["wrong_shape"].items()))
        sizes = call_sizes(getattr(reference, class_name), args, kwargs)
        fail(f"In your {class_name}, {short(name)} has shape {sized_shape(got, sizes)}; expected"
             f" {sized_shape(want, sizes)}.")
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
def diagnosis(probe, locate=None):
    """The check that names a cell's mistake, in the cell's test file (it runs after every other
    check of the view, wherever it is defined; see plugin.py):

        test_diagnosis = diagnosis(probe, locate)

    `probe(student, rng)` yields observations (see errormodel): a student's that equal a known
    mistake's name it. `locate(Locating)`, if given, finds by value where the student's code goes
    wrong (`locate_module`, `locate_function`; checks/localise.py): it says *where* beside a known
    mistake's *what*, and alone names the line of a mistake no one listed. The check runs only when
    another check of the cell failed, costs no points, and is listed only when it names something.

    What it finds is found once per submission (the `diagnose` fixture keeps it): each view of the
    result (before the due date, and the whole) only says it, or not, from that view's checks."""
    import pytest

    from autograder.checks import errormodel, localise
    from autograder.checks.outcomes import grade_id_of

    @pytest.mark.diagnosis
    def test_diagnosis(request, student, error_model, solutions, resources, seed, cell_failed, upstream_failed,
                       reference, step_names, named_failed, diagnose):
        """Your answer, compared with the common mistakes for this exercise"""
        mutants = error_model.get(grade_id_of(request.node))
        if not cell_failed or upstream_failed or not (mutants or locate) or getattr(student, "lost", None):
            return  # nothing failed; the cause is upstream (checks/rootcause.py says so); nothing known; or gone

        def finding():  # (the mutants it behaves as, where its values go wrong): asks the sandbox
            chosen = ()
            if mutants:
                seen = errormodel.observe(probe, student, seed)
                chosen = errormodel.recognise(seen, probe, solutions, mutants, seed, resources)
            found = (yield from locate.staged(Locating(student, reference, step_names, seed))) if locate else None
            return chosen, found

        def say(found_here):  # what the student reads in this view ("" for nothing)
            chosen, found = found_here
            if chosen:  # what the mistake is, certain; where, when the values say so just as surely
                return errormodel.message(chosen) + (localise.where(found) if len(chosen) == 1 else "")
            said = localise.message(found, locate.where) if found is not None else ""
            if named_failed and not localise.specific(found):
                return ""  # a check named what it saw; "the values differ here" would only cover it up
            return said if said and not getattr(student, "lost", None) else ""

        said = diagnose(finding, say, cause=lambda found_here: [mutant.name for mutant in found_here[0]])
        if said:
            fail(said, named=True)

    test_diagnosis.probe = probe  # for the error model's own check (authoring/errorcheck.py)
    return test_diagnosis


class Locating:
    """What a `locate` function of `diagnosis` works with."""

    def __init__(self, student, reference, names, seed):
        self.student, self.reference, self.names, self.seed = student, reference, names, seed
        self.rng = torch.Generator().manual_seed(seed)

    def reference_trace(self, run):
        """(output, steps) of the reference's `run()` under a value trace, steps named."""
        from autograder.checks import localise
        from autograder.inside.trace import own_files, traced

        with seeded(self.seed), torch.no_grad():
            output, steps, _ = traced(own_files(vars(self.reference)), run)
        for step in steps:  # the solutions file's regions are compiled from text: their lines are here
            step["code"] = reference_line(self.reference, step["file"], step["line"])
        return output, localise.steps_of(steps, self.names)

    def module(self, class_name, args, inputs, **kwargs):
        """Where the student's module `class_name(*args, **kwargs)` goes wrong on `inputs`, with the
        reference's parameters (None when the two cannot be paired: the structure differs). A
        generator, as localise.localising: it yields the what-if runs it needs."""
        import pytest

        from autograder.checks import localise

        try:
            handle, ref = paired(self.student, self.reference, class_name, args, self.rng, **kwargs)
            missing = []
        except pytest.fail.Exception:
            # A module without some of the reference's layers (no output projection) still computes
            # values to compare, with the parameters it has; other differences leave nothing to pair.
            ref = randomize(reference_module(self.reference, class_name, *args, **kwargs), self.rng)
            params = {name: p.detach().clone() for name, p in ref.named_parameters()}
            try:
                built = self.student.build(class_name, args, kwargs, params)
            except StudentError:
                return None
            report = built.get("report") or {}
            if built.get("kind") != "class" or report.get("wrong_shape") or report.get("extra") or not report.get("missing"):
                return None
            handle, missing = built["handle"], report["missing"]
        except StudentError:
            return None  # it cannot be built: no values to compare
        output, steps = self.reference_trace(lambda: ref(*inputs))
        found = yield from localise.localising(self.student, handle, list(inputs), output, steps, self.seed)
        if found is not None:
            found.missing_parameters = list(missing)
            found.sizes = call_sizes(getattr(self.reference, class_name), args, kwargs)
            found.input_names = input_names(ref.forward, inputs)
        return found

    def function(self, name, inputs):
        """Where the student's function `name` goes wrong on `inputs` (a generator, as `module`)."""
        from autograder.checks import localise

        function = getattr(self.reference, name)
        output, steps = self.reference_trace(lambda: function(*inputs))
        found = yield from localise.localising(self.student, name, list(inputs), output, steps, self.seed)
        if found is not None:
            found.sizes = call_sizes(function, inputs, {})
            found.input_names = input_names(function, inputs)
        return found


def input_names(function, inputs):
    """The names the exercise's def line gives the tensors among `inputs` (positional), in order
    (of a module: its forward's, a bound method)."""
    try:
        bound = inspect.signature(function).bind_partial(*inputs).arguments
    except (TypeError, ValueError):
        return []
    return [name for name, value in bound.items() if isinstance(value, torch.Tensor)]


def call_sizes(reference, args, kwargs):
    """{parameter name: int} of a call of the reference's class or function (the names the
    exercise's def line gives): a message's numbers can say which size they are."""
    try:
        bound = inspect.signature(reference).bind_partial(*args, **kwargs).arguments
    except (TypeError, ValueError):
        return {}
    return {name: value for name, value in bound.items() if type(value) is int}


def in_plain_container(student, handle, class_name, missing):
    """Fail, naming it, where the missing parameters belong to an attribute that is a plain list or
    tuple holding layers (`self.head = nn.Linear(...),` with its trailing comma makes a tuple): nn.Module
    registers no layer inside one, so its parameters are not the module's."""
    held = set(student.structure(handle).get("list_attributes", ()))
    owners = sorted({name.split(".")[0] for name in missing} & held)
    if owners:
        which = ", ".join(f"`{owner}`" for owner in owners)
        fail(f"In your {class_name}, {which} {'is a plain tuple or list' if len(owners) == 1 else 'are plain tuples or lists'}"
             " holding a layer, not a layer: PyTorch registers no layer kept inside one, so its parameters are"
             f" missing. Assign the layer itself (a trailing comma, as in `self.{owners[0]} = ...,`, makes a"
             " tuple); for several layers use nn.ModuleList.")


class Locate:
    """A `locate` for `diagnosis`. `staged(at)` is a generator: it asks the student its questions
    at once and yields each what-if run it needs (localise.WhatIf), so that they can be answered
    later, apart; calling the Locate, `locate(at)`, answers them at once and gives the Finding.
    `where` names the code in the student's words ("your CausalAttention")."""

    def __init__(self, staged, where):
        self.staged, self.where = staged, where

    def __call__(self, at):
        from autograder.checks import localise

        return localise.complete(self.staged(at), at.student)


def reference_line(reference, filename, line):
    """Line `line` of the solutions region compiled as `filename` ("<solutions file>:<region>")."""
    path, _, region = filename.rpartition(":")
    try:
        lines = _region_lines(path, region, Path(path).stat().st_mtime_ns)
    except OSError:
        return ""
    return lines[line - 1].strip() if 0 < line <= len(lines) else ""


@functools.lru_cache(maxsize=64)
def _region_lines(path, region, _mtime):
    from autograder.course import reference as reference_code

    regions = reference_code.edited_regions(Path(path), ())
    return tuple(reference_code.strip_solution_markers(regions.get(region, "")).splitlines())


def unused_results(student, handle, inputs, op, train=False, seed=0):
    """The student's lines ("line 27, `self.dropout(weights)`") whose `op` step ("dropout") makes a
    value that no later step of forward uses, on `inputs` (in training mode with `train`): a result
    computed and thrown away. [] when the code cannot be traced."""
    from autograder.checks import localise

    try:
        traced = student.trace(handle, list(inputs), seed=seed, train=train)
    except StudentError:
        return []
    steps = localise.steps_of(traced.get("steps", []) if isinstance(traced, dict) else [])
    users = localise.downstream(steps)
    return [localise.quoted(step) for step in steps[:-1] if step.op == op and step.value is not None
            and not users.get(step.index)]


def locate_module(class_name, args, *input_shapes, longest=None, **kwargs):
    """A `locate` for `diagnosis`: the student's `class_name(*args, **kwargs)` on random inputs
    of `input_shapes` (one shape per input of forward), in eval mode. `longest`, if given, is the
    same with inputs as long as the module allows, tried when the code stops with an error on the
    shorter ones (a mask sliced wrong): its other mistakes can then still be found."""
    def staged(at):
        from autograder.checks.verdict import hint_for

        found = yield from at.module(class_name, args, [randn(at.rng, *shape) for shape in input_shapes], **kwargs)
        if found is not None and found.error and longest is not None:  # known from the untouched run
            error = found.error
            found = yield from at.module(class_name, args, [randn(at.rng, *shape) for shape in longest], **kwargs)
            if found is not None and (found.places or found.early):  # its other mistakes, and the error beside them
                shape = tuple(input_shapes[0])
                found.also = (f" Also, on an input of shape {shape} (shorter than the longest your"
                              f" {class_name} allows) your code stops with an error: {error}. {hint_for(error)}").rstrip()
        return found
    return Locate(staged, f"your {class_name}")


def locate_function(name, make_inputs):
    """A `locate` for `diagnosis`: the student's function `name` on `make_inputs(rng)` (a list)."""
    def staged(at):
        return (yield from at.function(name, make_inputs(at.rng)))
    return Locate(staged, f"your `{name}`")


def locate_any(*locates):
    """A `locate` for `diagnosis` of a cell with several answers (two functions): the first
    of `locates` that finds where the values go wrong. Each asks its untouched questions before
    any of them runs a what-if."""
    def staged(at):
        from autograder.checks import localise

        begun = [(one, localise.Started(one.staged(at))) for one in locates]
        for one, started in begun:
            found = yield from started.rest()
            if found is not None and found.repaired:
                chosen.where = one.where
                return found
        return None
    chosen = Locate(staged, "your code")
    return chosen


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
