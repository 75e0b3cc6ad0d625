"""Trusted-side helpers for hidden checks: validate what came back, explain failures.

Everything here runs in the grader's process on plain data. A failing check
calls `fail(message)`: the message is what the student reads, so it says what
is wrong and the likely mistake, never how the check works.
"""
import contextvars
import re

import pytest
import torch

from autograder.wire import StudentError

# float32 answers written another way (einsum, scaled_dot_product_attention,
# scaling queries first) differ from the reference by ~1e-6; real mistakes by
# far more than these tolerances.
RTOL, ATOL = 1e-3, 1e-4


class NamedMistake(pytest.fail.Exception):
    """A failure that names the mistake (a known mistake's output matched, or its sure sign).
    In a cell where one check names the mistake, the other failing checks of that cell say
    nothing more (checks/rootcause.py): their generic words would only send the student
    elsewhere."""


class MistakeApart(pytest.fail.Exception):
    """A failure its check shows to be a mistake of its own: the check compared the student's code
    with itself, one setting changed (the same module, parameters and inputs, in eval mode and then
    in training mode; the parameters' names and then their order), and the difference lies in what
    that setting alone governs. No other mistake of the cell can make it, so it keeps its words
    beside a mistake named elsewhere in the cell, never "fails because of" it
    (errormodel.mark_unexplained); a cell built on a failing exercise still waits for that one.
    Nor does it quiet the cell's other checks, as a NamedMistake does: whether they follow from it
    is not what it shows."""


def fail(message, named=False, apart=False):
    """Fail the check with `message` for the student; `named`: it names the mistake itself;
    `apart`: the check's own comparison shows the mistake is not another one's consequence
    (MistakeApart)."""
    if apart:
        raise MistakeApart(msg=message, pytrace=False)
    if named:
        raise NamedMistake(msg=message, pytrace=False)
    pytest.fail(message, pytrace=False)


def shape_text(shape):
    shape = list(shape)  # a reported "shape" may be any length
    dims = [int(n) for n in shape[:MAX_NAMES + 1]]
    if len(dims) > MAX_NAMES:
        return f"({', '.join(map(str, dims[:MAX_NAMES]))}, \u2026 {len(shape):,} sizes in all)"
    return str(tuple(dims))


# -- bounds on what a message says ----------------------------------------------------------------
# Messages often quote what the student's code reported (parameter and module names, shapes, an
# error text): a submission can report a million names or a name a megabyte long, and every
# message is stored in the result, shown on the feedback page and repeated in the cell's output.
# Checks list names through `listed` and `brief`; every message is cut by `bounded` where the
# grading plugin records it, so one result stays small whatever the student reports.
MAX_MESSAGE = 1500  # characters of one check's message (the longest written ones are ~600)
MAX_MESSAGE_TAIL = 300  # of them, kept from its end: the advice usually closes the message
MAX_NAMES = 8  # names (or items) a message lists before "and N more"
MAX_NAME = 80  # characters of one quoted name or value
SHORTENED = "\u2026 (shortened)"


def short(text, width=MAX_NAME):
    """`text` (any value, as str) cut to `width` characters, with "…" where it was cut."""
    text = text if isinstance(text, str) else str(text)
    return text if len(text) <= width else text[:max(width - 1, 0)] + "\u2026"


def listed(names, limit=MAX_NAMES, width=MAX_NAME):
    """"a, b, c": at most `limit` names, each cut to `width` characters, then "… and N more"."""
    names = list(names)
    shown = ", ".join(short(name, width) for name in names[:limit])
    return shown + (f", \u2026 and {len(names) - limit:,} more" if len(names) > limit else "")


def brief(value, limit=MAX_NAMES, width=MAX_NAME):
    """repr(value) when it is short; else a dict, list or tuple with at most `limit` items, and
    any other value cut to a few names' width. Small values read exactly as repr() writes them."""
    if isinstance(value, (dict, list, tuple)) and len(value) > limit or _long_items(value, width):
        if isinstance(value, dict):
            items = [f"{_brief_item(k, width)}: {_brief_item(v, width)}" for k, v in list(value.items())[:limit]]
            opening, closing = "{", "}"
        elif isinstance(value, (list, tuple)):
            items = [_brief_item(item, width) for item in list(value)[:limit]]
            opening, closing = ("[", "]") if isinstance(value, list) else ("(", ")")
        else:
            return short(repr(value), width * 2)
        more = f", \u2026 and {len(value) - limit:,} more" if len(value) > limit else ""
        return opening + ", ".join(items) + more + closing
    return repr(value)


def _long_items(value, width):
    if isinstance(value, dict):
        return any(len(repr(item)) > width for pair in list(value.items())[:MAX_NAMES + 1] for item in pair)
    if isinstance(value, (list, tuple)):
        return any(len(repr(item)) > width for item in list(value)[:MAX_NAMES + 1])
    return len(repr(value)) > width * 2


def _brief_item(item, width):
    if isinstance(item, (dict, list, tuple)):
        return brief(item, limit=4, width=width)
    return short(repr(item), width)


def bounded(message, limit=MAX_MESSAGE, tail=MAX_MESSAGE_TAIL):
    """`message` cut to about `limit` characters: its start and its last `tail` characters, with
    "… (shortened) …" between them (what is wrong comes first, the advice last)."""
    message = message if isinstance(message, str) else str(message)
    if len(message) <= limit:
        return message
    widest = f" {SHORTENED}: {len(message):,} characters left out \u2026 "  # the marker at its longest
    head = max(limit - tail - len(widest), 0)
    marker = f" {SHORTENED}: {len(message) - head - tail:,} characters left out \u2026 "
    return message[:head] + marker + message[len(message) - tail:]


def describe(value):
    if isinstance(value, torch.Tensor):
        return f"a tensor of shape {shape_text(value.shape)}"
    return f"a {type(value).__name__}"


def sized_shape(shape, sizes):
    """"(50, 8)", or "(50, 8), that is (vocab_size, context_length)" where each number is one of
    `sizes` ({name: int} the class was made with, `call_sizes`): a shape that says which size went
    where. A number two sizes share is both ("emb_dim or att_dim"); one that more share, or none,
    leaves the shape unnamed."""
    text = shape_text(shape)
    names = [[name for name, value in sizes.items() if value == n] for n in shape]
    if not shape or not all(1 <= len(found) <= 2 for found in names):
        return text
    return f"{text}, that is ({', '.join(' or '.join(found) for found in names)})"


def shape_difference(got, expected):
    """How shape `got` differs from `expected`, when it is simple (else ""): ": an extra dimension of
    size 1 (...)", ": a dimension of size 1 is missing (...)", ": the same sizes in another order
    (...)". Sizes only: what the code computed there is not looked at."""
    def without_ones(sizes):
        return tuple(n for n in sizes if n != 1)

    if len(got) > len(expected) and without_ones(got) == without_ones(expected) and set(got) - set(expected) <= {1}:
        extra = len(got) - len(expected)
        return (f": {'an extra dimension' if extra == 1 else f'{extra} extra dimensions'} of size 1 (a reshape,"
                " unsqueeze or keepdim=True where none belongs?)")
    if len(got) < len(expected) and without_ones(got) == without_ones(expected):
        return ": a dimension of size 1 is missing (a squeeze, or a max or sum without keepdim=True?)"
    if len(got) == len(expected) and got != expected and sorted(got) == sorted(expected) and len(set(got)) > 1:
        return ": the same sizes in another order (are two dimensions transposed?)"
    return ""


# The mistakes the running check repaired to go on past them and find what else is wrong
# (`_repaired_past`): their messages, or None outside a check that takes repairs.
_repaired = contextvars.ContextVar("repaired", default=None)


def repairs_begin():
    """Let the running check repair what `expect_tensor` can (the grading plugin, around each check)."""
    return _repaired.set([])


def repairs_end(token, error):
    """What the running check ends with, once the mistakes it repaired on the way are counted: None
    where nothing was repaired (it stands as it is), else the NamedMistake to raise: the first
    repaired mistake's words, then what the check found with it repaired. `error` is what the check
    raised (None when it passed); one that broke the check tells nothing more."""
    met = _repaired.get() or []
    _repaired.reset(token)
    if not met:
        return None
    first = met[0]
    if error is None:
        return NamedMistake(msg=f"{first} With only the first of them returned, this check passes.", pytrace=False)
    if isinstance(error, StudentError):  # the student's code raised further on
        hint = hint_for(str(error))
        said = f"your code failed: {error}" + (f" {hint}" if hint else "")
    elif isinstance(error, pytest.fail.Exception):
        said = str(error.msg).strip()
    else:
        return NamedMistake(msg=first, pytrace=False)  # (the check broke on the repaired value: it tells nothing)
    if said[:1].isupper() and not said[1:2].isupper():  # (its words go on the sentence: "For ..." -> "for ...")
        said = said[0].lower() + said[1:]
    return NamedMistake(msg=f"{first} With only the first of them returned, this check still fails: {said}",
                        pytrace=False)


def _repaired_past(message):
    """Record a mistake the running check repairs to go on; False when no check takes repairs."""
    met = _repaired.get()
    if met is None:
        return False
    met.append(message)
    return True


def expect_tensor(value, what, shape=None, dtype=None, finite=True):
    """A real torch.Tensor (no subclass) with the given shape and dtype, all finite.

    Several values returned where one is asked for (`return context, weights`) is a mistake whose
    repair is plain: keep the first. Inside a grading check the check goes on with it, so a second
    mistake in that value is found too, and the check then fails with both (`repairs_end`)."""
    if isinstance(value, (list, tuple)):  # a returned tuple arrives as a list
        message = (f"{what} should be one torch tensor, but your code returned {len(value)} values (a tuple or a"
                   " list): return only the output tensor, not the weights or a loss beside it.")
        if not (value and type(value[0]) is torch.Tensor and _repaired_past(message)):
            fail(message, named=True)
        value = value[0]
    if type(value) is not torch.Tensor:
        fail(f"{what} should be a torch tensor, but it is {describe(value)}.")
    if shape is not None and tuple(value.shape) != tuple(shape):
        how = shape_difference(tuple(value.shape), tuple(shape))
        fail(f"{what}: expected shape {shape_text(shape)}, got {shape_text(value.shape)}{how}.")
    if dtype is not None and value.dtype != dtype:
        fail(f"{what}: expected dtype {dtype}, got {value.dtype}.")
    if finite and value.is_floating_point() and not all_finite(value):
        message = f"{what}: found {'NaN' if torch.isnan(value).any() else 'infinite'} values."
        hint = hint_for(message)  # the assignment knows where they come from (its hints.toml)
        fail(f"{message} {hint}" if hint else message)
    return value


def all_finite(tensor):
    """True if no entry is NaN or infinite.

    A finite sum proves it (one NaN or inf makes the sum NaN or inf) in a fifth
    of the time of isfinite(); only a sum that overflows needs the full test.
    """
    return bool(torch.isfinite(tensor.sum())) or bool(torch.isfinite(tensor).all())


def close(a, b, rtol=RTOL, atol=ATOL, equal_nan=False):
    return a.shape == b.shape and torch.allclose(a.double(), b.double(), rtol=rtol, atol=atol,
                                                 equal_nan=equal_nan)


def max_difference(a, b):
    return (a.double() - b.double()).abs().max().item()


def name_mistake(got, variants, what):
    """Fail naming the mistake if `got` is what one of the (tensor, explanation)
    `variants` produces. NaN matches NaN: some mistakes are recognised by where
    their NaNs are."""
    for variant, explanation in variants:
        if close(got, variant, equal_nan=True):
            fail(f"{what} are not right: {explanation}", named=True)


def no_known_mistake(got, expected, what):
    """Fail honestly when `got` (right shape, finite) matches no known mistake: where it first
    differs and by how much, never a list of guesses."""
    expect_tensor(got, what, shape=expected.shape)
    wrong = ~torch.isclose(got.double(), expected.double(), rtol=RTOL, atol=ATOL)
    index = tuple(int(i) for i in wrong.nonzero()[0]) if wrong.any() else ()
    where = f" at index {index}" if index else ""
    fail(f"{what} differ from the expected values (largest difference {max_difference(got, expected):.3g});"
         f" the first difference is{where}: expected {expected[index].item():.4f}, got {got[index].item():.4f}."
         " This matches none of the common mistakes the grader knows for this part: compare each step of"
         " your code with the exercise text.")


def expect_close(got, expected, what, hint=""):
    """Compare an output with the reference; `hint` names the likely causes."""
    expect_tensor(got, what, shape=expected.shape)
    if not close(got, expected):
        fail(f"{what} differ from the expected values (largest difference"
             f" {max_difference(got, expected):.3g}).{' ' + hint if hint else ''}")


# Hints for errors the student's code raised (and for NaN or infinite results), matched on the text.
ERROR_HINTS = (  # for any assignment; an assignment adds its own in exercises/<a>/hints.toml
    ("NotImplementedError", "This part is not answered yet."),
    ("view size is not compatible",
     "view needs a contiguous tensor: call .contiguous() after transpose (or use .reshape)."),
    ("must match the size of tensor", "Shapes do not fit together: check the sizes your code combines."),
    ("expected the same device", "Create every tensor on the input's device (device=x.device)."),
    ("is not on the expected device",
     "Create every tensor on the input's device (device=x.device), or register it as a buffer."),
    ("shapes cannot be multiplied", "A matrix product got shapes that do not fit: check what you transpose."),
    ("must be tuple of ints", "Sizes must be integers: use // rather than / to divide them."),
    ("as parameter", "A parameter can only be replaced by an nn.Parameter: copy the values in place"
     " with param.copy_(...) under torch.no_grad(), or wrap them in nn.Parameter(...)."),
    ("torch.return_types", "torch.max(x, dim=...) (and min, sort, topk) returns a pair (values, indices):"
     " take .values (or [0]) before computing with it."),
    ("is not defined", ""),
)
_assignment_hints = ()


def use_hints(hints):
    """The assignment's own hints ((error text, hint) pairs), tried before the general ones.
    Set by the grading plugin for the assignment it grades."""
    global _assignment_hints
    _assignment_hints = tuple(hints)


# Common errors said in the student's terms, with the sizes from the error itself; tried first.
TRANSLATIONS = (
    (re.compile(r"only integer tensors of a single element can be converted to an index"),
     "PyTorch tried to read a value on that line as an index: a tensor met a tuple or a list where a tensor or"
     " a number belongs (enumerate, for one, gives (index, value) pairs: unpack them, for i, row in"
     " enumerate(...)), or a tensor of several numbers was used as an index."),
    (re.compile(r"mat1 and mat2 shapes cannot be multiplied \((\d+)x(\d+) and (\d+)x(\d+)\)"),
     "A matrix product got a {0}x{1} and a {2}x{3} matrix, but the inner sizes ({1} and {2}) must be equal:"
     " check what you transpose, and the (in, out) sizes of each layer or weight."),
    (re.compile(r"Expected size for first two dimensions of batch2 tensor to be: \[(\d+), (\d+)\] but got: \[(\d+), (\d+)\]"),
     "A batched matrix product needed a second tensor whose first two sizes are [{0}, {1}], and got [{2}, {3}]:"
     " check which dimensions you swap. For a batch of matrices, transpose the last two (transpose(-2, -1));"
     " .T reverses every dimension."),
    (re.compile(r"shape '\[([-\d, ]+)\]' is invalid for input of size (\d+)"),
     "view/reshape asked for the shape [{0}], which does not hold the tensor's {1} numbers: check the sizes"
     " you pass, and which tensor you pass them to."),
    (re.compile(r"cannot assign module before Module.__init__\(\) call|has no attribute '_modules'"),
     "Call super().__init__() first in __init__, before creating any layer or parameter."),
    (re.compile(r"Module \[(\w+)\] is missing the required \"forward\" function"),
     "Your {0} has no method named forward, so calling it fails: nn.Module runs forward when the module is"
     " called. Check the method's name (def forward(self, x):) and that it is indented inside the class."),
    (re.compile(r"'(Parameter|Tensor)' object is not callable"),
     "A tensor is called like a function. A layer such as nn.Linear is called, layer(x); a tensor or"
     " nn.Parameter is multiplied, x @ weight."),
    (re.compile(r"descriptor '__init__' of 'super' object needs an argument"),
     "super.__init__() calls __init__ on the class super itself: call super first, super().__init__()."),
    (re.compile(r"too many values to unpack \(expected (\d+)\)"),
     "A line unpacks more values than it has names for ({0}). A tensor's shape has one size per dimension:"
     " a batch of sequences (batch, tokens, features) needs three names, b, num_tokens, d_in = x.shape."),
    (re.compile(r"not enough values to unpack \(expected (\d+), got (\d+)\)"),
     "A line unpacks {1} values into {0} names. A tensor's shape has one size per dimension: a single"
     " sequence (tokens, features) has two, a batch of them three."),
    (re.compile(r"unsupported operand type\(s\) for ([^:]+): '(\w+)' and '(\w+)'"),
     "Python cannot apply {0} to a {1} and a {2}: one of the two is not what the line expects it to be"
     " (print its type to see which)."),
    (re.compile(r"int\(\) argument must be a string, a bytes-like object or a (?:real )?number, not '(\w+)'"),
     "int() turns one number (or the text of one) into an integer, and was given a {0}: token ids from"
     " tokenizer.encode are already integers, in a list (torch.tensor(ids) makes them a tensor)."),
    (re.compile(r"invalid literal for int\(\) with base 10"),
     "int() was given text that is not a number: a token is text, and its id comes from the tokenizer"
     " (tokenizer.encode), not from int()."),
    (re.compile(r"([\w.]+)\(\) got an unexpected keyword argument '(\w+)'"),
     "{0}() has no parameter named {1}: compare its def line with the exercise's (and the call with the"
     " def line)."),
    (re.compile(r"(softmax|log_softmax)\(\) missing 1 required positional arguments?: \"dim\""),
     "torch.{0} needs the dimension it runs over: torch.{0}(scores, dim=-1) normalises over the keys."),
    (re.compile(r"([\w.]+)\(\) missing (\d+) required positional arguments?: (.+?)\.?$"),
     "{0}() was called without {2}: pass every parameter its def line asks for."),
    (re.compile(r"([\w.]+)\(\) takes (\d+) positional arguments? but (\d+) (?:was|were) given"),
     "{0}() takes {1} positional arguments (a method counts self) but got {2}: compare the call with the"
     " def line."),
    (re.compile(r"'(\w+)' object has no attribute '(\w+)'"),
     "Your code asks a {0} for .{1}, which it does not have: check the spelling, and that __init__ sets"
     " self.{1} before forward uses it."),
    (re.compile(r"Dimension out of range \(expected to be in range of \[(-?\d+), (-?\d+)\], but got (-?\d+)\)"),
     "Dimension {2} does not exist here: this tensor's dimensions are {0} to {1} (negative ones count from"
     " the end, -1 is the last)."),
)


def hint_for(message):
    """The hint for an error (or NaN) message: the assignment's own first, then the translations of
    common errors, then the general ones. The student's own line at the end of an error ("(your
    line N: code)") is left out: text in their code must not pick the hint."""
    head, found, tail = message[:MAX_HINTED].rpartition(" (your line ")
    message = head if found and tail.split(":", 1)[0].isdigit() else message[:MAX_HINTED]
    for pattern, hint in _assignment_hints:
        if pattern in message:
            return hint
    for pattern, template in TRANSLATIONS:
        found = pattern.search(message)
        if found:
            return template.format(*found.groups())
    for pattern, hint in ERROR_HINTS:
        if pattern in message:
            return hint
    return ""


MAX_HINTED = 2000  # characters of an error message the hints look at
