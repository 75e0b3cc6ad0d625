"""Value tracing: the tensors a piece of code makes, line by line, and what-ifs on them.

Runs next to student code (in its sandbox), and on the trusted side for the reference: it
imports nothing trusted. `Tracer` is a torch function mode. While the code under trace runs,
each torch call made *from a line of that code* (a file the traced namespace's own functions
come from: a notebook cell, or a region of the solutions file) is noted with that line, the
operation's name, which earlier steps its inputs came from, and a copy of the tensor it made.
Calls torch makes inside another torch call, or inside library code (nn.Linear calling
F.linear), are noted once, at the line of the student's code that made them.

A trace can also *replace* a step: the value the code made at step i is swapped for a given
tensor before the code goes on (value replacement, Jeffrey, Gupta and Gupta, ISSTA 2008). If
the output is then right, the mistake is at that step. The trusted side decides which steps
to try; this side only runs them (see checks/localise.py).

Everything that leaves is plain data: bounded lists of numbers, strings and small tensors.
"""
import inspect
import os
import linecache
import sys

import torch
from torch.overrides import TorchFunctionMode
from torch.utils._pytree import tree_flatten

MAX_STEPS = 160  # steps noted per run (a loop over tokens makes many; localising stops there)
MAX_VALUE = 4096  # elements of one step's tensor sent back at most (the probes use small inputs)
MAX_VALUES = 120_000  # elements of all steps together
MAX_CODE = 160  # characters of a line's text


def own_files(namespace):
    """The file names of the code defined in `namespace` (a notebook's or a module's globals):
    its own functions and classes, compiled from text that is not a file on disk (a notebook
    cell, "<ipython-input-...>"; a region of the solutions file, "<path>:<region>"), never a
    library it imported."""
    files = set()
    for value in list(namespace.values()):
        functions = [value]
        if isinstance(value, type):
            functions = [item for cls in value.__mro__ for item in vars(cls).values()]
        for function in functions:
            function = getattr(function, "__func__", getattr(function, "fget", function))
            try:
                function = inspect.unwrap(function) if callable(function) else function  # a noted forward
            except ValueError:  # a cycle of __wrapped__: not code of its own
                continue
            code = getattr(function, "__code__", None)
            if code is not None and code.co_filename not in files and not os.path.isfile(code.co_filename):
                files.add(code.co_filename)
    return files


class Tracer(TorchFunctionMode):
    """Notes the tensors made by lines of code in `files` (see the module's docstring).

    `replace` is {step index: tensor}: that step's value is swapped for the tensor (copied into
    it, for an in-place operation, so the code's own variable holds the new value)."""

    def __init__(self, files, replace=None, keep_values=True):
        super().__init__()
        self.files = files
        self.replace = dict(replace or {})
        self.keep_values = keep_values
        self.steps = []
        self._producer = {}  # id(tensor) -> index of the step that last made or changed it
        self._alive = []  # the tensors behind those ids, kept so that no id is reused meanwhile
        self._budget = MAX_VALUES
        self._tensor_inputs = []
        self.replaced = set()

    def _line(self):
        frame = sys._getframe(2)
        while frame is not None:
            if frame.f_code.co_filename in self.files:
                return frame.f_code.co_filename, frame.f_lineno
            frame = frame.f_back
        return None

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        if out is None and args and isinstance(args[0], torch.Tensor) and _in_place(func):
            out = args[0]  # x[i] = v, x.fill_diagonal_(v): the step made is the changed tensor
        parts = [out] if isinstance(out, torch.Tensor) else [item for item in out if isinstance(item, torch.Tensor)] \
            if isinstance(out, (tuple, list)) else []
        if not parts or len(self.steps) >= MAX_STEPS:
            return out
        where = self._line()
        if where is None:
            return out
        index = len(self.steps)
        inputs = [item for item in tree_flatten((args, kwargs))[0] if isinstance(item, torch.Tensor)]
        came_from = sorted({self._producer[id(item)] for item in inputs if id(item) in self._producer})
        self._tensor_inputs = inputs  # none: a constant the code made (torch.zeros(...), torch.tensor(2.0))
        if not isinstance(out, torch.Tensor):  # split, chunk, unbind: one step without a value, for the flow
            for part in parts:
                self._producer[id(part)] = index
                self._alive.append(part)
            step = self._step(func, parts[0], where, came_from)
            step.update(value=None, shape=[], parts=len(parts))
            self.steps.append(step)
            return out
        if index in self.replace:
            out = self._swap(out, self.replace[index], inputs)
        self._producer[id(out)] = index
        self._alive.append(out)
        self.steps.append(self._step(func, out, where, came_from))
        return out

    def _swap(self, out, value, inputs):
        value = value.to(device=out.device, dtype=out.dtype)
        if tuple(value.shape) != tuple(out.shape):
            return out  # not a value this step can hold: leave it (the trial then repairs nothing)
        self.replaced.add(len(self.steps))
        if any(out is item for item in inputs):  # in place (masked_fill_): the code keeps using `out`
            with torch.no_grad():
                out.copy_(value)
            return out
        return value.clone().requires_grad_(out.requires_grad) if out.is_floating_point() else value.clone()

    def _step(self, func, out, where, came_from):
        filename, line = where
        code = linecache.getline(filename, line).strip()
        step = {"file": filename, "line": line, "code": code[:MAX_CODE],
                "op": getattr(func, "__name__", type(func).__name__), "shape": list(out.shape),
                "dtype": str(out.dtype).removeprefix("torch."), "from": came_from, "value": None,
                "made_from_tensors": bool(self._tensor_inputs)}
        if self.keep_values and out.numel() <= min(MAX_VALUE, self._budget) and out.device.type != "meta":
            self._budget -= out.numel()
            value = out.detach()
            if type(value) is not torch.Tensor:
                value = value.as_subclass(torch.Tensor)
            step["value"] = value.cpu().clone()
        return step


def _in_place(func):
    name = getattr(func, "__name__", "")
    return name == "__setitem__" or (name.endswith("_") and not name.startswith("_"))


def traced(files, run, replace=None, keep_values=True):
    """(output, steps, replaced step indices) of `run()` under a Tracer; an exception `run`
    raises propagates (the caller says it in the student's terms)."""
    tracer = Tracer(files, replace, keep_values)
    with tracer:
        output = run()
    return output, tracer.steps, sorted(tracer.replaced)
