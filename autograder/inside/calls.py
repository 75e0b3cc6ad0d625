"""Which nn.Module call made which tensor: `ModuleCalls`, noted while a submission's cells run.

The probe `origin` (student.py) traces a notebook variable back to the call that made it, and
`replay` runs that call again, so a check can judge the module the student actually used."""
import functools

import torch
from torch.multiprocessing.reductions import StorageWeakRef
from torch.nn.modules import module as nn_module


def version_of(tensor):
    """torch's in-place version counter of `tensor` (None for an inference tensor, which has none)."""
    try:
        return tensor._version
    except RuntimeError:
        return None


class ModuleCalls:
    """Which nn.Module call made which tensor, noted while a submission's cells run.

    `with ModuleCalls() as calls:` around the cells installs global forward hooks: each
    module call whose output is a tensor is noted with the module, its inputs, its mode
    and the random state before it. A note lives as long as the output's storage, which
    detach() and views share, so a notebook variable can be traced back to the call that
    made it (`NamespaceStudent.origin`) and that call run again (`replay`); a tensor no
    module returned (torch.randn of the right shape) traces to nothing. Calls of
    model.forward(x), which skip the hooks, are noted by the module classes' own forward,
    wrapped when a class is defined while the cells run.
    """

    KEEP = 4096  # notes on live outputs kept at most (the oldest go first)

    def __init__(self):
        self.notes = []  # (storage weak reference, module, args, kwargs, training, random state)
        self._states = {}
        self._handles = []
        self._pruned_at = 16
        self._saved_init_subclass = None

    def __enter__(self):
        self._handles = [nn_module.register_module_forward_pre_hook(self._before),
                         nn_module.register_module_forward_hook(self._after, with_kwargs=True)]
        # model.forward(x) skips the hooks: the forward of each module class defined while the
        # cells run is wrapped to note its calls too (a call through model(x) is noted twice).
        calls = self

        def init_subclass(cls, **kwargs):
            super(torch.nn.Module, cls).__init_subclass__(**kwargs)
            forward = cls.__dict__.get("forward")
            if callable(forward) and not hasattr(forward, "__noted__"):
                cls.forward = calls._noting(forward)

        self._saved_init_subclass = torch.nn.Module.__dict__.get("__init_subclass__")
        torch.nn.Module.__init_subclass__ = classmethod(init_subclass)
        return self

    def __exit__(self, *exc):
        for handle in self._handles:
            handle.remove()
        self._handles = []
        self._states.clear()
        if self._saved_init_subclass is None:
            del torch.nn.Module.__init_subclass__
        else:
            torch.nn.Module.__init_subclass__ = self._saved_init_subclass

    def _noting(self, forward):
        @functools.wraps(forward)
        def noted(module, *args, **kwargs):
            if not self._handles:  # the cells have run: nothing more is noted
                return forward(module, *args, **kwargs)
            state = torch.get_rng_state() if module.training else None
            output = forward(module, *args, **kwargs)
            self._note(module, args, kwargs, output, state)
            return output

        noted.__noted__ = True
        return noted

    def _before(self, module, args):
        if module.training:  # only training mode draws random numbers (dropout)
            self._states[id(module)] = torch.get_rng_state()

    def _after(self, module, args, kwargs, output):
        self._note(module, args, kwargs, output, self._states.pop(id(module), None))

    def _note(self, module, args, kwargs, output, state):
        if type(output) is not torch.Tensor or output.device.type == "meta" or not self._handles:
            return
        self.notes.append((StorageWeakRef(output.untyped_storage()), module, args, dict(kwargs),
                           module.training, state, version_of(output)))
        if len(self.notes) > self._pruned_at:
            self.notes = [note for note in self.notes if not note[0].expired()][-self.KEEP:]
            self._pruned_at = 2 * len(self.notes) + 16

    def made(self, tensor):
        """The notes of the calls whose output shares `tensor`'s storage, oldest first (an
        outer module's call ends after the calls inside it)."""
        key = StorageWeakRef(tensor.untyped_storage())
        return [note for note in self.notes if note[0] == key and not note[0].expired()]
