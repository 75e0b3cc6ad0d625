"""The probe API hidden checks use to talk to a submission.

A check never touches a student's objects. It asks a `student` for plain data:
"call this function on these tensors", "build this module, load these
parameters, run it forward". Every answer is plain data (tensors, numbers,
strings, lists, dicts), so the same checks run against

* `NamespaceStudent`: the submission's namespace in this very process (stock
  nbgrader's in-kernel grading, and checking the checks on the solutions), or
* a proxy that forwards the same calls to a sandboxed process and gets the
  answers back as data (the trusted grader).

When the student's code raises, a probe raises `StudentError`, whose message is
written for the student.
"""
import copy
import traceback

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

from autograder.inside.calls import version_of
from autograder.inside.trace import own_files, traced  # now: student code may break imports later
from autograder.wire import Resource, StudentError, seeded

MAX_ITEMS = 200  # dataset items / batches returned at most
MAX_TRIALS = 64  # what-if runs of one trace probe


def to_plain(value, what="your code"):
    """Plain data only: base-class CPU tensors, numbers, strings, lists, dicts."""
    if isinstance(value, torch.Tensor):
        tensor = value.detach()
        if type(tensor) is not torch.Tensor:
            tensor = tensor.as_subclass(torch.Tensor)
        if tensor.device.type == "meta":
            raise StudentError(f"{what} returned a tensor without data (on the meta device).")
        tensor = tensor.cpu()
        if tensor.untyped_storage().nbytes() != tensor.numel() * tensor.element_size() or not tensor.is_contiguous():
            tensor = tensor.clone(memory_format=torch.contiguous_format)  # a view would ship its whole storage
        return tensor
    if value is None or type(value) in (bool, int, float, str):
        return value
    if isinstance(value, (list, tuple)):
        return [to_plain(item, what) for item in value]
    if isinstance(value, dict) and all(type(key) is str for key in value):
        return {key: to_plain(item, what) for key, item in value.items()}
    raise StudentError(f"{what} returned a {type(value).__name__}, not a tensor or plain value.")


def _short(error):
    text = f"{type(error).__name__}: {error}".strip()
    first = text.splitlines()[0] if text else type(error).__name__
    return first if len(first) <= 300 else first[:297] + "..."


def _where(error):
    """' (your line N: code)': the last line of the student's own cells the error passed
    through (IPython names cells <ipython-input-...>), and the line of theirs that called that
    function (', called from your line M: code'); '' when it never reached their cells."""
    frames = [f for f in traceback.extract_tb(error.__traceback__) if f.filename.startswith("<ipython-input-")]
    if not frames or not (frames[-1].line or "").strip():
        return ""
    where = f" (your line {frames[-1].lineno}: {_code(frames[-1].line)}"
    # The line that crashed may be right, and the slip in the call that got there (arguments in
    # the wrong order): name the student's own line that called it too, when it is another function.
    caller = next((f for f in reversed(frames[:-1]) if f.name != frames[-1].name and (f.line or "").strip()), None)
    if caller is not None:
        where += f", called from your line {caller.lineno}: {_code(caller.line)}"
    return where + ")"


def _code(line):
    code = line.strip()
    return code if len(code) <= 120 else code[:117] + "..."


def _close_names(name, namespace):
    """' Your notebook defines `X`: ...' when a defined name looks like a misspelling of `name`."""
    import difflib

    found = difflib.get_close_matches(name, [key for key in namespace if not key.startswith("_")], n=1, cutoff=0.8)
    return f" Your notebook defines `{found[0]}`: is that it, spelled differently?" if found else ""


class _CpuWatch(TorchDispatchMode):
    """Records operations that touch a CPU tensor while the module runs on meta."""

    def __init__(self):
        super().__init__()
        self.cpu_ops = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for item in tree_flatten((args, kwargs, out))[0]:
            if isinstance(item, torch.Tensor) and item.device.type == "cpu" and item.dim() > 0:
                self.cpu_ops.append(str(func.overloadpacket.__name__))
                break
        return out


class NamespaceStudent:
    """Probes answered from a submission's namespace, in this process."""

    def __init__(self, namespace, resources=None, calls=None):
        self.namespace = namespace
        self.resources = resources  # {name: factory}, the assignment's RESOURCES
        self.calls = calls  # the ModuleCalls noted while the cells ran, if any
        self._objects = {}
        self._made = {}  # handle -> the note of the call that made a variable

    # -- helpers -----------------------------------------------------------
    def _get(self, name):
        if name not in self.namespace:
            raise StudentError(f"`{name}` is not defined. Did the cell that defines it run without errors?"
                               + _close_names(name, self.namespace))
        return self.namespace[name]

    def _run(self, what, function, *args, **kwargs):
        try:
            return function(*args, **kwargs)
        except Exception as error:  # the student's code failed: report, don't crash
            raise StudentError(f"{what} raised {_short(error)}{_where(error)}") from None

    def _module(self, handle):
        return self._objects[handle]

    def _materialize(self, value):
        if isinstance(value, Resource):
            if value.name not in (self.resources or {}):
                raise KeyError(f"the assignment defines no resource {value.name!r} (RESOURCES in its sandbox.py)")
            return self.resources[value.name]()
        return value

    def _arguments(self, args, kwargs):
        return ([self._materialize(a) for a in args],
                {key: self._materialize(value) for key, value in (kwargs or {}).items()})

    # -- names and values ----------------------------------------------------
    def kind(self, name):
        """'missing', 'class', 'function', 'tensor' or 'other'."""
        if name not in self.namespace:
            return "missing"
        value = self.namespace[name]
        if isinstance(value, type):
            return "class"
        if callable(value):
            return "function"
        if isinstance(value, torch.Tensor):
            return "tensor"
        return "other"

    def value(self, name):
        return to_plain(self._get(name), f"`{name}`")

    def call(self, name, *args, **kwargs):
        function = self._get(name)
        args, kwargs = self._arguments(args, kwargs)
        result = self._run(f"`{name}`", function, *args, **kwargs)
        return to_plain(result, f"`{name}`")

    def origin(self, name, class_name):
        """Which module call made the tensor `name` while the cells ran.

        {"watched": False} where no calls were noted (grading in-process), else "found"; for a
        found call also a "handle" for its module (structure, parameters, `replay`), the
        module's "type", whether it is exactly the notebook's class `class_name` ("is_class"),
        the shapes of its tensor inputs, whether it ran in training mode, and whether the
        tensor was "changed" in place since that call returned it (torch's version counter,
        shared by views and detach(): free to read, where running the call again costs what
        the call cost). A call of that class is preferred; else the outermost call that
        returned the tensor."""
        if self.calls is None:
            return {"watched": False}
        value = self._get(name)
        notes = self.calls.made(value) if isinstance(value, torch.Tensor) else []
        if not notes:
            return {"watched": True, "found": False}
        wanted = self.namespace.get(class_name)
        note = ([n for n in notes if type(n[1]) is wanted] or notes)[-1]
        _, module, args, kwargs, training, _, version = note
        handle = f"{type(module).__name__}#{len(self._objects)}"
        self._objects[handle] = module
        self._made[handle] = note
        return {"watched": True, "found": True, "handle": handle, "type": type(module).__name__,
                "is_class": type(module) is wanted,
                "inputs": [list(a.shape) for a in list(args) + list(kwargs.values()) if isinstance(a, torch.Tensor)],
                "training": bool(training), "changed": version is not None and version_of(value) != version}

    def recorded_call(self, handle, rows=None):
        """The call behind `origin`'s handle, as plain data for the grader to make again on its own
        side: its tensor inputs (their `rows` of the first dimension, or whole), their whole
        shapes, whether it ran in training mode, and the random state before it (training only)."""
        _, _, args, kwargs, training, state, _ = self._made[handle]
        tensors = [item for item in list(args) + list(kwargs.values()) if isinstance(item, torch.Tensor)]
        if rows is not None:
            tensors = [tensor[[int(row) for row in rows]] if tensor.dim() else tensor for tensor in tensors]
        return {"inputs": [to_plain(tensor, "an input") for tensor in tensors],
                "shapes": [list(item.shape) for item in list(args) + list(kwargs.values()) if isinstance(item, torch.Tensor)],
                "training": bool(training), "random_state": None if state is None else to_plain(state)}

    def replay(self, handle):
        """The call behind `origin`'s handle made again: the same module, inputs, mode and
        random state (so dropout drops the same weights)."""
        _, module, args, kwargs, training, state, _ = self._made[handle]
        saved = torch.get_rng_state()
        try:
            if state is not None:
                torch.set_rng_state(state)
            module.train(training)
            with torch.no_grad():
                output = self._run("forward", module, *args, **kwargs)
        finally:
            torch.set_rng_state(saved)
        return to_plain(output, "forward")

    # -- modules -------------------------------------------------------------
    def new(self, class_name, args=(), kwargs=None, seed=None):
        """Build an instance (after torch.manual_seed(seed) if given); return a handle."""
        cls = self._get(class_name)
        args, kwargs = self._arguments(args, kwargs)
        with seeded(seed):
            instance = self._run(f"`{class_name}(...)`", cls, *args, **kwargs)
        handle = f"{class_name}#{len(self._objects)}"
        self._objects[handle] = instance
        return handle

    def build(self, class_name, args, kwargs, parameters):
        """`new` then `load_parameters`, in one probe (the usual start of a comparison
        with the reference): {"kind": ...} alone if `class_name` is not a class, else
        also "handle" and the load "report"."""
        kind = self.kind(class_name)
        if kind != "class":
            return {"kind": kind}
        handle = self.new(class_name, args, kwargs)
        return {"kind": kind, "handle": handle, "report": self.load_parameters(handle, parameters)}

    def structure(self, handle):
        module = self._module(handle)
        if not isinstance(module, torch.nn.Module):
            return {"type": type(module).__name__, "is_module": False}
        params = dict(module.named_parameters())
        return {
            "type": type(module).__name__,
            "is_module": True,
            "parameters": {name: list(p.shape) for name, p in params.items()},
            "parameter_count": sum(p.numel() for p in params.values()),
            "frozen": sorted(name for name, p in params.items() if not p.requires_grad),
            "buffers": {name: list(b.shape) for name, b in module.named_buffers()},  # values: `buffers`
            "modules": {name: type(m).__name__ for name, m in module.named_modules() if name},
            "repeated_modules": sorted(
                name for name, _ in module.named_modules(remove_duplicate=False)
                if name and name not in dict(module.named_modules())
            ),
            "list_attributes": sorted(
                name for name, value in vars(module).items()
                if isinstance(value, (list, tuple)) and any(isinstance(v, torch.nn.Module) for v in value)
            ),
            "dropouts": {name: m.p for name, m in module.named_modules() if isinstance(m, torch.nn.Dropout)},
            "attributes": {
                name: value for name, value in vars(module).items()
                if type(value) in (int, float, bool, str) and not name.startswith("_")
            },
        }

    def parameters(self, handle):
        """{name: value} of the module's parameters."""
        module = self._module(handle)
        if not isinstance(module, torch.nn.Module):
            raise StudentError(f"{type(module).__name__} is not an nn.Module.")
        return {name: to_plain(p, name) for name, p in module.named_parameters()}

    def buffers(self, handle):
        """{name: value} of the module's buffers (such as a causal mask)."""
        module = self._module(handle)
        if not isinstance(module, torch.nn.Module):
            raise StudentError(f"{type(module).__name__} is not an nn.Module.")
        return {name: to_plain(b, name) for name, b in module.named_buffers()}

    def call_with_modules(self, name, handles):
        """Call the function `name` on the modules behind `handles` for what it does to them.

        Its return value is ignored: `return sa_v1` is as good as returning nothing."""
        function = self._get(name)
        self._run(f"`{name}`", function, *[self._module(h) for h in handles])

    def load_parameters(self, handle, parameters):
        """Copy parameters by name; report names that are missing or the wrong shape."""
        module = self._module(handle)
        own = dict(module.named_parameters())
        report = {"missing": [], "wrong_shape": {}, "extra": sorted(set(own) - set(parameters))}
        with torch.no_grad():
            for name, value in parameters.items():
                if name not in own:
                    report["missing"].append(name)
                elif tuple(own[name].shape) != tuple(value.shape):
                    report["wrong_shape"][name] = [list(own[name].shape), list(value.shape)]
                else:
                    own[name].copy_(value)
        return report

    def forward(self, handle, *inputs, train=False, seed=0):
        module = self._module(handle)
        module.train(train)
        with seeded(seed), torch.no_grad():
            output = self._run("forward", module, *inputs)
        return to_plain(output, "forward")

    def vjp(self, handle, inputs, cotangent, wrt="input"):
        """Gradient of (output * cotangent).sum() w.r.t. the first input or a parameter.

        None when the output is not differentiable (e.g. computed under no_grad).
        """
        module = self._module(handle)
        module.eval()
        module.zero_grad(set_to_none=True)
        inputs = list(inputs)
        if wrt == "input":
            inputs[0] = inputs[0].clone().requires_grad_(True)
            target = inputs[0]
        else:
            target = dict(module.named_parameters())[wrt]
        output = self._run("forward", module, *inputs)
        if not isinstance(output, torch.Tensor) or not output.requires_grad:
            return None
        self._run("backward", lambda: (output * cotangent).sum().backward())
        grad = target.grad
        return None if grad is None else to_plain(grad)

    def meta_forward(self, handle, *inputs):
        """Move a copy of the module to the meta device and run it there.

        Reports where parameters and buffers went, whether forward worked, and
        which operations still touched a CPU tensor (e.g. a mask or positions
        created on the CPU): such code breaks on a GPU.
        """
        module = self._module(handle)
        report = {"moved": True, "error": None, "cpu_ops": [], "output_device": None, "output_shape": None}
        try:
            moved = copy.deepcopy(module).to("meta").eval()
        except Exception as error:
            report.update(moved=False, error=_short(error))
            return report
        report["devices"] = {
            name: t.device.type
            for name, t in list(moved.named_parameters()) + list(moved.named_buffers())
        }
        watch = _CpuWatch()
        inputs = [x.to("meta") for x in inputs]
        try:
            with watch, torch.no_grad():
                output = moved(*inputs)
            report["output_device"] = getattr(getattr(output, "device", None), "type", None)
            report["output_shape"] = list(getattr(output, "shape", []))
        except Exception as error:
            report["error"] = _short(error)
        report["cpu_ops"] = sorted(set(watch.cpu_ops))
        return report

    def trace(self, target, inputs, trials=(), seed=0, steps=False, train=False):
        """The steps of the module behind handle `target` (in eval mode; with `train`, in training
        mode, where dropout makes a new tensor), or of the function
        named `target`, on `inputs`: {"output", "steps"} (inside/trace.py). With `trials`
        ([{step index: tensor}, ...]) the same run once per trial with those steps' values
        replaced: {"trials": [{"output", "replaced"} or {"error"}, ...]}, each with its "steps"
        too if `steps`."""
        if target in self._objects:
            module = self._module(target)
            module.train(bool(train))
            function, what = module, "forward"
        else:
            function, what = self._get(target), f"`{target}`"
        inputs = [self._materialize(item) for item in inputs]
        files = own_files(self.namespace)

        def run(replace=None, keep_values=True):
            with seeded(seed), torch.no_grad():
                return traced(files, lambda: function(*inputs), replace, keep_values)

        if not trials:
            try:
                output, steps, _ = run()
            except Exception as error:
                raise StudentError(f"{what} raised {_short(error)}{_where(error)}") from None
            return {"output": to_plain(output, what), "steps": steps}
        answers = []
        for replace in trials[:MAX_TRIALS]:
            try:
                output, made, replaced = run(replace, keep_values=steps)
                answers.append({"output": to_plain(output, what), "replaced": replaced,
                                **({"steps": made} if steps else {})})
            except Exception as error:  # noqa: BLE001 (the student's code under a what-if: say what, go on)
                answers.append({"error": _short(error)})
        return {"trials": answers}

    # -- data ----------------------------------------------------------------
    def sequence(self, name, args=(), kwargs=None):
        """`name(*args, **kwargs)` as a sequence: its types, len() and first items."""
        args, kwargs = self._arguments(args, kwargs)
        made = self._run(f"`{name}(...)`", self._get(name), *args, **kwargs)
        length = self._run(f"len() of `{name}(...)`", len, made)
        if type(length) is not int:
            raise StudentError(f"len() of `{name}(...)` is not a whole number.")
        items = [self._run(f"item {i} of `{name}(...)`", made.__getitem__, i) for i in range(min(length, MAX_ITEMS))]
        return {"types": _type_names(made), "length": length, "items": to_plain(items, f"an item of `{name}(...)`")}

    def iterate(self, name, args=(), kwargs=None, seed=0):
        """The first items that iterating over `name(*args, **kwargs)` gives, and its types."""
        args, kwargs = self._arguments(args, kwargs)
        with seeded(seed):
            made = self._run(f"`{name}`", self._get(name), *args, **kwargs)

            def first_items():
                out = []
                for item in made:
                    out.append(item)
                    if len(out) >= MAX_ITEMS:
                        break
                return out

            items = self._run(f"iterating over what `{name}` returned", first_items)
        return {"types": _type_names(made), "items": to_plain(items, f"an item from `{name}`")}


def _type_names(value):
    """Every class `value` is an instance of, as module.name (plain data a check can test)."""
    return [f"{cls.__module__}.{cls.__qualname__}" for cls in type(value).__mro__]
