"""Where a wrong answer goes wrong, found by its values.

The student's code and the reference run on the same inputs with the same parameters, each
under a value trace (inside/trace.py): every tensor a line of the code makes, with the line.
Tensor values are large and distinctive, so a student's step that equals a step of the
reference (the queries, the scores, the weights...) is right up to there, whatever the code
looks like. A step that equals none, and whose later steps equal none either, is where the
values go wrong.

Whether the mistake is *there* is then tested, not guessed (value replacement, Jeffrey, Gupta
and Gupta, ISSTA 2008): the student's code runs again with the reference's value in that
step's place. If the output is then right, the mistake is on that line. If no single step
repairs it, pairs are tried: two mistakes, each named. Where neither works, only what is
certain is said (the first line whose values match nothing the reference makes).

All of this runs on the trusted side, on plain data; the student's side only runs its code
(with the trials' values swapped in) and sends back what it made.

The what-if runs hand the reference's values to the student's code, so they are asked for
apart from everything else: `localising` is a generator that takes the untouched trace itself
and *yields* each `WhatIf` it needs answered. The grading plugin answers them only after every
check and every diagnosis of the view has asked its other questions, in a sealed fork of the
submission that ends afterwards (checks/plugin.py, inside/agent.py): the reference's values
never reach the process whose answers a page quotes. What a page quotes of the student's code
(its lines) comes from the untouched trace alone; a what-if run's steps only say which values
are right. `localise` answers the what-ifs at once, for callers without a sandbox.
"""
import ast
import itertools
import math
import re
from dataclasses import dataclass, field

import torch

from autograder.checks.verdict import ATOL, RTOL, short, sized_shape
from autograder.wire import StudentError

MAX_CANDIDATES = 8  # steps tried as the mistake's place
TARGETS_PER_STEP = 3  # reference values tried in one step's place
MAX_NAMES = 4  # matched steps named in "up to line N your values match (...)"


@dataclass
class Step:
    index: int
    line: int
    code: str
    op: str
    shape: tuple
    value: object  # a float tensor, or None (too big, or not a float)
    came_from: list
    file: str = ""
    name: str = ""  # the reference's steps: what the step computes, in words
    constant: bool = False  # made from no tensor at all (torch.zeros(...), torch.tensor(-1e5))
    expected: object = None  # a place found: the reference's value there, in the layout that repaired it


@dataclass
class Finding:
    """What localisation found: `places` are (student step, reference step) pairs whose
    replacement repairs the output (one or two), or () when nothing could be repaired;
    `first` is the first step whose values match nothing, `matched` the names of the steps
    right before it."""
    places: tuple = ()
    repaired: bool = False  # the places explain every difference in the output
    stopped: object = None  # where the values go wrong for a reason not found, after the places
    first: object = None
    matched: list = field(default_factory=list)
    student_steps: list = field(default_factory=list)
    reference_steps: list = field(default_factory=list)
    inputs: list = field(default_factory=list)  # the float tensors the code was given
    error: str = ""  # the code raised this instead (nothing else is known)
    also: str = ""  # what else the student should read beside the places (said after them)
    early: object = None  # (student step, reference step): the output is this earlier step of the reference
    missing_parameters: list = field(default_factory=list)  # the reference's, which the student's module lacks
    sizes: dict = field(default_factory=dict)  # {name: int} the code was called with ("d_out": 4): numbers name them
    input_names: list = field(default_factory=list)  # the exercise's names of `inputs` (its def line's), if known


def steps_of(raw, names=None):
    """Step objects from a trace's plain data; `names` ({variable or variable.op: words}) names
    the reference's steps. The student's trace comes from their sandbox, where their code could
    have replaced the tracer: anything that is not a step as the tracer writes it is left out, and
    every field is checked and bounded before it is used or quoted."""
    steps = []
    for item in (raw if isinstance(raw, list) else [])[:MAX_STEPS]:
        if not isinstance(item, dict):
            continue
        value = item.get("value")
        if not (isinstance(value, torch.Tensor) and (value.is_floating_point() or value.dtype == torch.bool)):
            value = None  # integer steps (sizes, indices) say nothing about a mistake here
        line, shape, came_from = item.get("line"), item.get("shape", []), item.get("from", [])
        steps.append(Step(len(steps), line if type(line) is int else 0, short(str(item.get("code", "")), MAX_CODE),
                          short(str(item.get("op", "")), 40).strip("_"),
                          tuple(n for n in shape if type(n) is int) if isinstance(shape, list) else (),
                          value, [i for i in came_from if type(i) is int] if isinstance(came_from, list) else [],
                          short(str(item.get("file", "")), MAX_CODE), constant=item.get("made_from_tensors") is False))
    if names is not None:
        _name_steps(steps, names)
    return steps


def _name_steps(steps, names):
    """Each reference step's name: the variable its line assigns (the line's last step), or
    `variable.op` for a step inside a longer line, in the assignment's words where it has some."""
    last_of_line = {}
    for step in steps:
        last_of_line[(step.file, step.line)] = step.index
    for step in steps:
        variable = assigned(step.code)
        last = last_of_line[(step.file, step.line)] == step.index
        region = step.file.rpartition(":")[2]  # "<solutions>:ex2_answer": names for one region first
        step.name = (names.get(f"{region}:{variable}.{step.op}") or names.get(f"{variable}.{step.op}")
                     or (names.get(f"{region}:{variable}") or names.get(variable) if last else "")
                     or (f"`{variable}`" if last and variable else ""))


def assigned(code):
    """The name a line of code assigns (or changes in place, or returns: "output"), or ""."""
    try:
        node = ast.parse(code.strip()).body[0]
    except (SyntaxError, IndexError, ValueError):
        return ""
    if isinstance(node, ast.Return):
        return "output"
    target = None
    if isinstance(node, ast.Assign):
        target = node.targets[0]
    elif isinstance(node, (ast.AugAssign, ast.AnnAssign)):
        target = node.target
    elif isinstance(node, ast.Expr) and isinstance(node.value, ast.Call) and isinstance(node.value.func, ast.Attribute):
        target = node.value.func.value if node.value.func.attr.endswith("_") else None
    while isinstance(target, (ast.Tuple, ast.List)) and target.elts:
        target = target.elts[0]
    if isinstance(target, ast.Subscript):
        target = target.value
    if isinstance(target, ast.Name):
        return target.id
    if isinstance(target, ast.Attribute):
        return target.attr
    return ""


# -- matching values ----------------------------------------------------------------------------
def _close(a, b):
    if a.shape != b.shape or (a.dtype == torch.bool) != (b.dtype == torch.bool):
        return False
    return torch.allclose(a.double(), b.double(), rtol=RTOL, atol=ATOL, equal_nan=True)


def laid_out(value, shape):
    """`value` as the student's layout `shape`: itself when the shapes agree, else each
    permutation of its dimensions that gives `shape` (heads kept in another order), or that gives
    it once neighbouring dimensions are joined or split (heads stacked along the batch, (B * H, N,
    d) for (B, H, N, d)); those that keep the last two dimensions in place first."""
    shape = tuple(shape)
    if tuple(value.shape) == shape:
        return [value]
    if value.dim() > 5 or not shape:
        return []
    if value.dim() == len(shape):
        return [value.permute(order) for order in itertools.permutations(range(value.dim()))
                if tuple(value.shape[i] for i in order) == shape]
    return _regrouped(value, shape)


def _regrouped(value, shape):
    """`value` with its dimensions permuted, then neighbouring ones joined or split into `shape` (a
    reshape that keeps the order of the numbers); the orders that keep the last two dimensions in
    place first. [] when the numbers do not fit, or for more than 5 dimensions."""
    if value.dim() > 5 or value.numel() != math.prod(shape):
        return []
    squeezed = [n for n in shape if n != 1]
    last = tuple(range(value.dim()))[-2:]
    orders = sorted((order for order in itertools.permutations(range(value.dim()))
                     if _regroups(tuple(value.shape[i] for i in order), squeezed)),
                    key=lambda order: order[-2:] != last)
    return [value.permute(order).reshape(shape) for order in orders]


def alike(student_value, reference_value):
    """Equal values, in the same layout, or (when the shapes differ) with the dimensions in
    another order or split and joined another way (heads side by side or apart). Masks (booleans)
    only in the same shape, and only with masks."""
    a, b = student_value, reference_value
    if (a.dtype == torch.bool) != (b.dtype == torch.bool):
        return False
    if a.dtype == torch.bool:
        return a.shape == b.shape and bool((a == b).all())
    if a.numel() != b.numel():
        return False
    if a.shape == b.shape:
        return _close(a, b)
    # A different shape: the same numbers, arranged otherwise? Sorted values first (cheap).
    if not _close(a.reshape(-1).sort().values, b.reshape(-1).sort().values):
        return False
    if any(_close(a, option) for option in laid_out(b, a.shape)):
        return True
    # (in the same number of dimensions laid_out only permutes them; in another it has regrouped)
    return (a.dim() == b.dim() or not a.shape) and any(_close(a, option) for option in _regrouped(b, a.shape))


def _regroups(shape, target):
    """Whether `target` is `shape` with neighbouring sizes joined or split (a reshape that
    keeps the order of the numbers): the cumulative products of both meet at the end."""
    def marks(sizes):
        total, out = 1, set()
        for n in sizes:
            total *= n
            out.add(total)
        return out
    a, b = marks([n for n in shape if n != 1]), marks(target)
    return (a <= b or b <= a) and max(a | {1}) == max(b | {1})


# Steps that only rearrange, copy or pass on their input's numbers. Their values match the
# step they come from in another layout, so they match only in the same shape, and a match
# of theirs says nothing about whether the step before them is right.
LAYOUT = {"transpose", "permute", "view", "reshape", "contiguous", "unsqueeze", "squeeze", "flatten",
          "unflatten", "T", "mT", "t", "expand", "expand_as", "clone", "to", "float", "double", "detach",
          "dropout", "split", "chunk", "unbind", "movedim", "swapaxes", "swapdims", "view_as", "reshape_as",
          "getitem", "narrow", "select", "type", "cpu", "cuda", "identity", "linear_identity",
          "cat", "concat", "concatenate", "stack", "hstack", "vstack"}


def match(student_steps, reference_steps):
    """{student step index: [reference step indices with the same values]} (float steps). A step
    not masked yet matches a masked reference step where that one is not hidden (`hidden_as`):
    code that masks later is right up to there."""
    found = {}
    for step in student_steps:
        if step.value is None:
            continue
        exact = step.op in LAYOUT
        found[step.index] = [ref.index for ref in reference_steps if ref.value is not None and (
            _close(step.value, ref.value) if exact else alike(step.value, ref.value))]
        if not found[step.index] and not exact:
            found[step.index] = [ref.index for ref in reference_steps
                                 if ref.value is not None and hidden_as(step.value, ref.value) == "not yet"]
    return found


def hidden_as(student_value, reference_value):
    """How a student's value stands to a reference value that hides entries with -inf (a causal
    mask filled before softmax), where the two agree everywhere else: "not yet" where the student's
    value still holds its own numbers there (the masking comes later), "filled" where it holds one
    finite number there (a mask filled with 0, say, which softmax still weights); else ""."""
    a, b = student_value, reference_value
    if a.shape != b.shape or not a.is_floating_point() or not b.is_floating_point():
        return ""
    hidden = torch.isneginf(b)
    if int(hidden.sum()) < 2 or bool(hidden.all()) or not bool(torch.isfinite(a).all()):
        return ""
    if not torch.allclose(a[~hidden].double(), b[~hidden].double(), rtol=RTOL, atol=ATOL):
        return ""
    there = a[hidden].double()
    return "filled" if float(there.max() - there.min()) < 1e-6 else "not yet"


def downstream(steps):
    """{step: every later step that uses its value, directly or not}."""
    users = {step.index: set() for step in steps}
    for step in steps:
        for source in step.came_from:
            if source in users:
                users[source].add(step.index)
    below = {}
    for step in reversed(steps):
        found = set(users[step.index])
        for user in users[step.index]:
            found |= below.get(user, set())
        below[step.index] = found
    return below


def _same_kind(ref, step):
    """Both have values, and both are masks (booleans) or both are numbers."""
    return (ref.value is not None and step.value is not None
            and (ref.value.dtype == torch.bool) == (step.value.dtype == torch.bool))


def _mask(step):
    return step.value is not None and step.value.dtype == torch.bool


def _walk_back(steps, index, through=lambda step: True):
    """Each step that step `index` is made from, once: the ones it uses, and what those are
    made from for each step `through(step)` says to look through."""
    seen, todo = set(), list(steps[index].came_from)
    while todo:
        source = todo.pop()
        if source in seen or not 0 <= source < len(steps):
            continue
        seen.add(source)
        yield source
        if through(steps[source]):
            todo.extend(steps[source].came_from)


def _nearest_matched(steps, index, matches):
    """The closest steps before `index`, along what it is made from, whose values are right."""
    return {source for source in _walk_back(steps, index, lambda step: not matches.get(step.index))
            if matches.get(source)}


def _upstream(steps, index):
    """Every step that step `index` is made from, directly or not."""
    return set(_walk_back(steps, index))


def candidates(student_steps, reference_steps, matches, output):
    """The steps that may hold the mistake, in the order they ran, each with the reference
    values to try in its place: a float step whose value the reference never makes (or only
    makes where another of the student's steps already made it), none of whose later steps
    matches either, and that the output comes from."""
    below = downstream(student_steps)
    matched_refs = {}
    for index, refs in matches.items():
        for ref in refs:
            matched_refs.setdefault(ref, index)
    made_output = next((step.index for step in reversed(student_steps)
                        if step.value is not None and output is not None and _close(step.value, output)), None)
    feeding = None if made_output is None else _upstream(student_steps, made_output) | {made_output}
    found = []
    for step in student_steps:
        if step.value is None or (feeding is not None and step.index not in feeding):
            continue
        if step.constant and not _mask(step):
            continue  # a constant (torch.zeros(...)): replacing it by the answer proves nothing
        own = matches.get(step.index, [])
        duplicate = own and all(matched_refs.get(ref) != step.index for ref in own)
        if own and not duplicate:
            continue
        if any(matches.get(later) for later in below[step.index] if student_steps[later].op not in LAYOUT):
            continue  # its values are used by a step that is right: another way to the same result
        targets = [ref for ref in reference_steps if _same_kind(ref, step) and ref.index not in matched_refs
                   and laid_out(ref.value, step.shape)]
        if duplicate:
            targets = [ref for ref in reference_steps if _same_kind(ref, step) and ref.index not in own
                       and laid_out(ref.value, step.shape)] or targets
        same = [ref for source in _nearest_matched(student_steps, step.index, matches) for ref in matches[source]
                if _same_kind(reference_steps[ref], step) and reference_steps[ref].value.shape == step.value.shape]
        if same and not targets:  # it changes values that were right already: should it leave them be?
            targets = [reference_steps[ref] for ref in dict.fromkeys(same)]
        if step.op in LAYOUT:  # a rearrangement gone wrong: it should hold a value already right, rearranged
            known = {ref for source in _nearest_matched(student_steps, step.index, matches)
                     for ref in matches.get(source, [])}
            start = min(known, default=-1)
            targets = [ref for ref in reference_steps if _same_kind(ref, step) and ref.index >= start
                       and laid_out(ref.value, step.shape)] + [ref for ref in targets if ref.index < start]
            targets.sort(key=lambda ref: tuple(ref.value.shape) != tuple(step.shape))  # the same shape first
        if not targets:
            continue
        if step.op not in LAYOUT:
            rank = step.index / max(len(student_steps), 1)
            targets.sort(key=lambda ref: abs(ref.index / max(len(reference_steps), 1) - rank))
        # a mask filled with a finite number: the masked values it should hold are tried first
        filled = [ref for ref in reference_steps if ref.value is not None and hidden_as(step.value, ref.value) == "filled"]
        targets = filled + [ref for ref in targets if ref not in filled]
        found.append((step, targets[:TARGETS_PER_STEP]))
        if len(found) >= MAX_CANDIDATES:
            break
    return found


# -- trying them ----------------------------------------------------------------------------
MAX_STEPS = 160  # steps read from one trace (the tracer sends no more: inside/trace.py)
MAX_CODE = 160  # characters of a line's text or file name
MAX_MISTAKES = 3  # places found one after another before localisation stops
MAX_TRIES = 24  # what-if runs in one round


@dataclass
class WhatIf:
    """A request for what-if runs: the student's `target` on `inputs` once per trial, each trial
    ({step index: tensor}) with those steps' values replaced; with `steps`, each run's steps too.
    Its answer (`answer`) is a list as long as `trials`: a dict per trial, or None."""
    target: object
    inputs: list
    trials: list
    seed: int
    steps: bool = False


def answer(student, request):
    """The student's answers to a WhatIf, None for each trial that could not be answered."""
    if not request.trials:
        return []
    try:
        answers = student.trace(request.target, request.inputs, trials=request.trials, seed=request.seed,
                                steps=request.steps).get("trials", [])
    except (StudentError, AttributeError):
        return [None] * len(request.trials)
    answers = [item if isinstance(item, dict) else None for item in answers[:len(request.trials)]]
    return answers + [None] * (len(request.trials) - len(answers))


def complete(staged, student, first=None):
    """Run the generator `staged` (see `localising`) to its end, answering each WhatIf it yields
    with `student`; its result. `first`: a request it has yielded already (to answer first)."""
    try:
        request = first if first is not None else next(staged)
        while True:
            request = staged.send(answer(student, request))
    except StopIteration as done:
        return done.value


class Started:
    """The generator `staged` (see `localising`) run now up to its first what-if: its untouched
    questions are asked at once, its what-ifs later, by `yield from started.rest()`."""

    def __init__(self, staged):
        self.staged, self.request, self.result = staged, None, None
        try:
            self.request = next(staged)
        except StopIteration as done:
            self.result = done.value

    def rest(self):
        """A generator: the what-ifs left, yielded as `staged` yields them; its result at the end."""
        if self.request is None:
            return self.result
        request = self.request
        try:
            while True:
                request = self.staged.send((yield request))
        except StopIteration as done:
            return done.value


def localise(student, target, inputs, reference_output, reference_steps, seed=0):
    """`localising`, its what-ifs answered at once by `student` (no sandbox in between)."""
    return complete(localising(student, target, inputs, reference_output, reference_steps, seed), student)


def localising(student, target, inputs, reference_output, reference_steps, seed=0):
    """A Finding for the student's `target` (a module handle or a function's name) on `inputs`,
    given the reference's output and steps on the same inputs; None when the student's output
    is right (the mistake is not in these values) or its code could not be traced. A generator:
    it traces the code untouched at once, then yields a WhatIf per what-if request (see the
    module's docstring) and takes its answer.

    Each round tries the reference's values in the place of each step where the values may go
    wrong (`candidates`, in the order the code ran them), in one request. The first place whose
    replacement makes the output right, or else makes more of the later steps right, is a
    mistake: its value stays replaced and the run, traced again, is searched for the next one
    (where no one place helps at first, a pair may: `_as_a_pair`). It ends when the output is
    right (`repaired`), or when nothing helps (`stopped`: where the values go wrong for a reason
    the grader cannot tell)."""
    try:
        traced = student.trace(target, inputs, seed=seed)
    except StudentError as error:
        return Finding(error=str(error))  # the cell's checks say this error in their own words
    output = traced.get("output")
    if not isinstance(output, torch.Tensor) or not isinstance(reference_output, torch.Tensor) or _close(
            output, reference_output):
        return None  # nothing to compare, or right: the mistake is not in these values
    finding, replace, steps = Finding(reference_steps=reference_steps), {}, steps_of(traced.get("steps", []))
    finding.inputs = [item for item in inputs if isinstance(item, torch.Tensor) and item.is_floating_point()]
    finding.student_steps = steps
    finding.early = _stops_early(steps, reference_steps, output)
    if finding.early is not None:
        return finding  # right until it stops: what is missing is the steps after it
    # The only text of the student's code a message may quote: the untouched run's (a what-if
    # run's code had the reference's values to hand, and could have written anything there).
    own_lines = {(step.file, step.line): step.code for step in steps}
    run = _Run(target, inputs, seed, reference_output, reference_steps, own_lines)
    for _ in range(MAX_MISTAKES):
        matches = match(steps, reference_steps)
        for index, ref in replace.items():
            matches[index] = [ref.index]
        options = [option for option in candidates(steps, reference_steps, matches, output)
                   if option[0].index not in replace]
        if not options:
            break
        if finding.first is None:
            finding.first = options[0][0]
            finding.matched = _matched_before(steps, matches, reference_steps, finding.first)
        chosen = yield from run.best_place(options, steps, matches, replace, {p.index: p.expected for p, _ in finding.places})
        if chosen is None and not finding.places and (yield from _as_a_pair(run, finding, options, steps, matches)):
            return finding
        if chosen is None:
            after = set().union(*(downstream(steps)[i] for i in replace)) if replace else None
            finding.stopped = next((step for step, _ in options if (after is None or step.index in after)
                                    and _credible(step, steps, matches, replace)), options[0][0])
            break
        step, ref, answer_, progress, made, value = chosen
        replace[step.index], step.expected = ref, value
        finding.places += ((step, ref),)
        if progress == float("inf"):
            finding.repaired = True
            return finding
        steps, output = made, answer_["output"]
        finding.student_steps = steps
    return finding


def _as_a_pair(run, finding, options, steps, matches):
    """Two mistakes, each hiding the other: no one place helps alone, but a pair repairs it all. True
    when a pair did (its places added to `finding`, repaired). Not past heads split by a view alone
    (`scrambled`): that is where the values go wrong, and the message says so. A generator, as
    `localising` is."""
    if scrambled(finding, matches) is not None:
        return False
    pair = yield from run.best_pair(options, steps, matches)
    if pair is None:
        return False
    for step, ref, value in pair:
        step.expected = value
        finding.places += ((step, ref),)
    finding.repaired = True
    return True


class _Run:
    """The student's code on the localisation's inputs, run again with values replaced."""

    def __init__(self, target, inputs, seed, reference_output, reference_steps, own_lines):
        self.target, self.inputs, self.seed = target, inputs, seed
        self.reference_output, self.reference_steps = reference_output, reference_steps
        self.own_lines = own_lines

    def best_place(self, options, steps, matches, replace, kept):
        """(step, reference step, answer, progress, its steps, value) of the first credible place whose
        expected value makes the output right (progress inf), or else the most later steps
        right; None when no place helps. All tried in one request (a generator: it yields the
        WhatIf requests and takes their answers). `kept`: {step index: value} of the places found,
        which stay replaced."""
        tries = [(step, ref, value) for step, refs in options for ref in refs
                 for value in laid_out(ref.value, step.shape)[:2]][:MAX_TRIES]
        trials = [{**kept, step.index: value} for step, _, value in tries]
        # First only the outputs (small): most single mistakes are repaired by one place.
        outputs = yield WhatIf(self.target, self.inputs, trials, self.seed)
        for (step, ref, value), answered in zip(tries, outputs):
            if (isinstance(answered, dict) and _distance(answered.get("output"), self.reference_output) == 0.0
                    and _credible(step, steps, matches, replace)):
                return step, ref, answered, float("inf"), steps, value
        answers = yield WhatIf(self.target, self.inputs, trials, self.seed, steps=True)
        chosen = None
        for (step, ref, value), answered in zip(tries, answers):
            made = answered.get("steps") if isinstance(answered, dict) else None
            if not isinstance(made, list) or not isinstance(answered.get("output"), torch.Tensor):
                continue
            made = self._own_lines(steps_of(made))
            repaired = _distance(answered["output"], self.reference_output) == 0.0
            lines_up = len(made) == len(steps)  # the same path through the code: its steps line up
            progress = float("inf") if repaired else (  # later steps it makes right
                _right(made, self.reference_steps, {**replace, step.index: ref}, after=step.index) if lines_up else 0)
            if progress <= 0 or not _credible(step, steps, matches, replace):
                continue
            if chosen is None or (step.index, -progress) < (chosen[0].index, -chosen[3]):
                chosen = (step, ref, answered, progress, made, value)
        return chosen

    def best_pair(self, options, steps, matches):
        """((step, reference step, value), (step, reference step, value)): the first two places, in the
        order the code ran them, whose expected values together make the output right, the second
        credible once the first is replaced; None when no pair does (each place with its first two
        targets, MAX_TRIES runs at most, outputs only)."""
        # (not the last step that computes: its expected value repairs any code, so a pair with it shows nothing)
        last = max((step.index for step in steps if step.op not in LAYOUT and step.value is not None), default=-1)
        singles = [(step, ref, value) for step, refs in options if step.index < last for ref in refs[:2]
                   for value in laid_out(ref.value, step.shape)[:1]]
        pairs = [(first, second) for n, first in enumerate(singles) for second in singles[n + 1:]
                 if first[0].index < second[0].index and _credible(first[0], steps, matches, {})
                 and _credible(second[0], steps, matches, {first[0].index: first[1]})][:MAX_TRIES]
        if not pairs:
            return None
        outputs = yield WhatIf(self.target, self.inputs,
                               [{first[0].index: first[2], second[0].index: second[2]} for first, second in pairs],
                               self.seed)
        for pair, answered in zip(pairs, outputs):
            if isinstance(answered, dict) and _distance(answered.get("output"), self.reference_output) == 0.0:
                return pair
        return None

    def _own_lines(self, steps):
        """A what-if run's steps, each with its line's text as the untouched run read it ("" for a
        line that run never reached)."""
        for step in steps:
            step.code = self.own_lines.get((step.file, step.line), "")
        return steps


def _stops_early(steps, reference_steps, output):
    """(student step, reference step) when the student's output is exactly what the reference has
    made before its last computing step (a projection left out): the code stops early."""
    last = max((ref.index for ref in reference_steps if ref.op not in LAYOUT and ref.value is not None), default=None)
    made = next((step for step in reversed(steps) if step.value is not None and _close(step.value, output)), None)
    if last is None or made is None:
        return None
    earlier = [ref for ref in reference_steps if ref.index < last and ref.value is not None and ref.op not in LAYOUT
               and alike(output, ref.value)]
    return (made, earlier[-1]) if earlier else None


def _credible(step, steps, matches, replace):
    """Whether a step can be where a mistake is: the values its line is computed from are right
    (or were replaced by right ones), so what goes wrong goes wrong on that line. The line counts
    as a whole (`a @ b.T` is two steps), and steps without a float value (a boolean mask, the
    parts of a split) pass on what they are made from. A step computed from values already wrong
    in an earlier line is a consequence, whatever its own replacement repairs (replacing the
    output would repair any code)."""
    def right(before):
        return before.index in replace or (before.value is not None and bool(matches.get(before.index)))

    def passes_on(before):  # looked through, to what it is made from
        return before.value is None or _mask(before) or before.line == step.line or before.op in LAYOUT

    for source in _walk_back(steps, step.index, lambda before: not right(before) and passes_on(before)):
        before = steps[source]
        if right(before) or passes_on(before):
            continue
        if not before.constant:  # a constant the code made (torch.tensor(-1e5)) has nothing wrong before it
            return False
    return True


def _right(steps, reference_steps, replace, after=None):
    """How many of the steps that compute (not LAYOUT) have right values, replaced ones aside;
    with `after`, only among the steps that use its value."""
    matches = match(steps, reference_steps)
    users = downstream(steps).get(after, set()) if after is not None else None
    return sum(1 for step in steps if step.op not in LAYOUT and step.index not in replace and matches.get(step.index)
               and (users is None or step.index in users))


def _distance(output, expected):
    """0.0 when `output` is right; else how far it is (inf when it cannot be compared)."""
    if not isinstance(output, torch.Tensor) or output.shape != expected.shape:
        return float("inf")
    if _close(output, expected):
        return 0.0
    return (output.double() - expected.double()).abs().nan_to_num(1e9, 1e9, 1e9).sum().item() or 1e-12


def _matched_before(steps, matches, reference_steps, step):
    """The names of the reference steps the student's values match before `step`, among the
    steps it is made from, in order, each once."""
    names = []
    for index in sorted(_upstream(steps, step.index)):
        for ref in matches.get(index, []):
            name = reference_steps[ref].name
            if name and name not in names:
                names.append(name)
                break
    return names


# -- saying it ----------------------------------------------------------------------------
def difference(got, expected, sizes=None, code=""):
    """How `got` differs from `expected`, in a few words ("" when nothing simple is true).
    `sizes` ({name: int} the code was called with) name a scale factor that is one of them
    where `code` (the student's line and the reference's) uses the name (`_number`)."""
    if got is None or expected is None or got.shape != expected.shape:
        return ""
    got, expected = got.double(), expected.double()
    rows_of_one = expected.dim() >= 2 and torch.allclose(expected.nan_to_num(0).sum(-1), torch.ones(()).double(), atol=1e-4)
    if rows_of_one and got.dim() >= 2:
        for dim in range(got.dim() - 1):  # a softmax (or a division by sums) over another dimension
            sums = got.sum(dim)
            known = torch.isfinite(sums)
            if known.any() and torch.allclose(sums[known], torch.ones(()).double(), atol=1e-4):
                return (f"it sums to 1 over dimension {dim} (of {got.dim()}) instead of over the last one,"
                        " so its rows do not sum to 1: normalise over dim=-1 (softmax without dim= may pick"
                        " another dimension)")
    if torch.isnan(got).any() and not torch.isnan(expected).any():
        return "it has NaN values where none are expected"
    if hidden_as(got, expected) == "filled":
        fill = got[torch.isneginf(expected)][0].item() + 0.0  # (-0.0 reads as 0)
        return (f"where the expected values are -inf (hidden), yours are {fill:g}: softmax still gives a"
                f" weight of e^{fill:g} to them, and only -inf gives weight 0. Fill them with float('-inf')")
    ratio = _constant(got, expected)
    if ratio is not None and abs(ratio - 1) > 1e-3 and abs(ratio) > 1e-3:  # all zeros is no scale: nothing to say
        if 0 < ratio < 1 and _nice(1 / ratio):  # a division too many: by 2, by sqrt(8)
            return f"its values are the expected ones divided by {_number(1 / ratio, 'size', sizes, code)}"
        return f"its values are {_number(ratio, 'size', sizes, code) if ratio > 0 else f'{ratio:.3g}'} times the expected ones"
    if got.dim() >= 2 and got.shape[-1] == got.shape[-2] and _close(got, expected.transpose(-2, -1)):
        return "its values are the expected ones transposed"
    offset = (got - expected)[torch.isfinite(got) & torch.isfinite(expected)]
    if offset.numel() > 1 and offset.std().item() < 1e-4 and abs(offset.mean().item()) > 1e-3:
        shift = offset.mean().item()
        return f"its values are the expected ones {'+' if shift > 0 else '-'} {_number(abs(shift))}"
    if got.dim() >= 2 and got.shape[-1] == got.shape[-2] and got.shape[-1] > 1:
        wrong = ~torch.isclose(got.nan_to_num(0, 1e30, -1e30), expected.nan_to_num(0, 1e30, -1e30), rtol=RTOL, atol=ATOL)
        n = got.shape[-1]
        for part, words in ((torch.eye(n, dtype=torch.bool), "on the diagonal (each token with itself)"),
                            (torch.ones(n, n, dtype=torch.bool).triu(1), "above the diagonal (the future)"),
                            (torch.ones(n, n, dtype=torch.bool).tril(-1), "below the diagonal (the past)")):
            if wrong.any() and not (wrong & ~part).any():
                return f"it differs from them only {words}"
    if torch.isinf(expected).any() and not torch.isinf(got).any():
        return "it has no -inf where the expected values are hidden with -inf"
    if rows_of_one:
        sums = got.nan_to_num(0).sum(-1)
        if not torch.allclose(sums, torch.ones(()).double(), atol=1e-4):
            low, high = sums.min().item(), sums.max().item()
            return (f"its rows sum to {low:.3g}, where each should sum to 1" if abs(high - low) < 1e-3 else
                    f"its rows sum to {low:.3g} to {high:.3g}, where each should sum to 1")
    if expected.dim() >= 2 and got.shape[-1] == got.shape[-2]:
        upper = torch.ones(got.shape[-2:], dtype=torch.bool).triu(1)
        hidden = (expected[..., upper].nan_to_num(0).abs() < 1e-9).all() | torch.isinf(expected[..., upper]).all()
        if hidden and not ((got[..., upper].nan_to_num(0).abs() < 1e-9).all() | torch.isinf(got[..., upper]).all()):
            return "it is not hidden above the diagonal (the future)"
    return ""


def _expected(step, ref):
    """The reference's value at a place found, in the layout of the student's step: the one whose
    replacement helped (Step.expected), else the first that fits (None when none does)."""
    if step.expected is not None:
        return step.expected
    options = laid_out(ref.value, step.shape)
    return options[0] if options else None


def quoted(step):
    return f"line {step.line}, `{short(step.code, 100)}`" if step.code else f"line {step.line}"


def specific(finding):
    """Whether every place found says how its values differ (a factor, a transpose, rows that do
    not sum to 1...), not only that they differ."""
    if finding is not None and finding.early is not None:
        return True  # what is missing, named
    return bool(finding and finding.places) and all(
        _scaling(step, ref, finding.reference_steps, finding.inputs)
        or difference(step.value, _expected(step, ref))
        for step, ref in finding.places)


def _should(step, ref, reference_steps=(), inputs=(), sizes=None):
    what = ref.name or "the expected values"
    diff = (_scaling(step, ref, reference_steps, inputs, sizes)
            or difference(step.value, _expected(step, ref), sizes, f"{step.code}\n{ref.code}"))
    return f"should give {what}{f', but {diff}' if diff else ', but its values differ'}"


def _scaling(step, ref, reference_steps, inputs=(), sizes=None):
    """For a reference step that divides (or multiplies) a value by a constant, and a student's
    step that is a constant times it: what the student's line divides by, and what it should."""
    if ref.op not in ("div", "truediv", "mul", "rdiv") or step.value is None:
        return ""
    sources = [reference_steps[i].value for i in reversed(ref.came_from)
               if i < len(reference_steps) and reference_steps[i].value is not None]
    sources += list(inputs)  # a function's own inputs (the scores it was given) are no step
    source = next((value for value in sources if value.shape == ref.value.shape), None)
    expected = _expected(step, ref)
    if source is None or expected is None:
        return ""
    divisor = _constant(source, ref.value)
    ratio = _constant(step.value, expected)
    if divisor is None or ratio is None or abs(ratio - 1) < 1e-3 or abs(ratio) < 1e-3:
        return ""
    return (f"it {_divides_by(divisor / ratio, sizes, step.code)}, where it should divide by"
            f" {_number(divisor, True, sizes, ref.code)}")


def _divides_by(d, sizes, code, what=""):
    """"divides{what} by 2 (the square root of d_out = 4)", or "multiplies{what} by 2" where d < 1."""
    if abs(d) < 1:
        return f"multiplies{what} by {_number(1 / d, 'named', sizes, code)}"
    return f"divides{what} by {_number(d, 'named', sizes, code)}"


def _constant(a, b):
    """c when a == c * b everywhere both are finite and b is not zero, else None."""
    if a.shape != b.shape:
        return None
    a, b = a.double(), b.double()
    finite = torch.isfinite(a) & torch.isfinite(b) & (b.abs() > 1e-6)
    if finite.sum() < 2:
        return None
    ratio = a[finite] / b[finite]
    mean = ratio.mean().item()
    return mean if ratio.std().item() <= 1e-3 * max(abs(mean), 1e-6) else None


def _number(x, root=False, sizes=None, code=""):
    """2, 2.83 (the square root of 8), 0.5; with `root`, 2 (the square root of 4) too; with
    root="size" only where 4 is one of `sizes` ({name: int} the code was called with), and with
    root="named" only where `code` names that size.
    A number that is one of them, or its square root, says which where `code` (the line the
    number is about) uses that name: "2 (the square root of d_out = 4)", "4 (d_out)". A size
    the line does not name is not named (d_head = 2 is not num_heads = 2), nor two of one value."""
    whole, square, is_root = _forms(x)
    root_name, name = _size_name(square, sizes, code), whole and _size_name(round(x), sizes, code)
    wants_root = root is True or (root == "size" and square in (sizes or {}).values())
    if is_root and (not whole or root_name or (wants_root and not name)):
        of = f"{root_name} = {square}" if root_name else f"{square}"
        return f"{round(x) if whole else f'{x:.3g}'} (the square root of {of})"
    if whole:
        return f"{round(x)}" + (f" ({name})" if name else "")
    return f"{x:.3g}"


def _forms(x):
    """(whether x is whole, round(x * x), whether x is the square root of that whole number > 1)."""
    square = round(x * x)
    return abs(x - round(x)) < 1e-4, square, square > 1 and abs(x - square ** 0.5) < 1e-4 * max(x, 1)


def _nice(x):
    """Whether x is a whole number or the square root of one (a scale worth naming)."""
    whole, _, is_root = _forms(x)
    return whole or is_root


def _size_name(n, sizes, code):
    """The name of the one size in `sizes` that is n, where `code` uses that name (else None)."""
    names = [name for name, value in (sizes or {}).items() if value == n]
    if len(names) == 1 and n > 1 and re.search(rf"(?<![\w]){re.escape(names[0])}(?![\w])", code or ""):
        return names[0]
    return None


def unused(finding):
    """' Line K, `...`, computes <name> right, but no later line uses it.' for a step whose value
    is right, that the reference needs for its output, and that nothing in the student's code
    uses (a result thrown away: `scores.masked_fill(...)` without assigning it)."""
    steps, refs = finding.student_steps, finding.reference_steps
    if not steps or not refs:
        return ""
    matches = match(steps, refs)
    below = downstream(steps)
    needed = _upstream(refs, len(refs) - 1) | {len(refs) - 1}
    for step in steps:
        if step.index == len(steps) - 1 or below[step.index] or step.op in LAYOUT or step.line == steps[-1].line:
            continue
        named = [refs[i] for i in matches.get(step.index, []) if i in needed and refs[i].name
                 and refs[i].op not in LAYOUT and not any(other.index != step.index and i in matches.get(other.index, [])
                                                          for other in steps)]
        if named:
            # (a place whose expected value the reference makes from it: that line is where it went unused)
            there = next((place for place, ref in finding.places if named[0].index in _upstream(refs, ref.index)
                          and step.index not in _upstream(steps, place.index)), None)
            if there is not None:
                them = "them" if named[0].name.endswith("s") else "it"
                return (f" Note that {quoted(step)} computes {named[0].name} right, but no later line uses that value:"
                        f" line {there.line} should start from {them}, and starts from {_given(there, finding)} instead.")
            return (f" Note that {quoted(step)} computes {named[0].name} right, but no later line uses that value"
                    " (was its result meant to be assigned, or used in the next line?).")
    return ""


def _zeros_and_ones(step):
    """A mask: true/false, or made of 0s and 1s (torch.tril(torch.ones(n, n)))."""
    value = step.value
    return value.dtype == torch.bool or bool(((value == 0) | (value == 1)).all())


def _given(step, finding):
    """What `step` starts from where it uses no computed value but one the code was given: "qkt, the
    input," when its values are that input's wherever they are kept (not zeroed or hidden by a
    mask), measured; "other values" otherwise."""
    by_index = {other.index: other for other in finding.student_steps}
    if step.value is None or any(i in by_index and by_index[i].value is not None and not _zeros_and_ones(by_index[i])
                                 for i in step.came_from):
        return "other values"
    kept = torch.isfinite(step.value) & (step.value != 0)
    if kept.sum() < 2:
        return "other values"
    for position, given in enumerate(finding.inputs):
        try:
            given = given.expand_as(step.value)
        except RuntimeError:
            continue
        if _close(step.value[kept], given[kept]):
            name = finding.input_names[position] if position < len(finding.input_names) else ""
            named = name and re.search(rf"(?<![\w]){re.escape(name)}(?![\w])", step.code or "")
            return f"{name}, the input," if named else "the input"
    return "other values"


def _rearranged(step, steps, matches, reference_steps):
    """' The queries and the keys are right before line 22 and 23 rearrange them: ...' when
    the step is computed from right values only through other lines that rearrange them
    (reshape, transpose, split, join): then those lines are where to look."""
    def rearranges(before):
        return not matches.get(before.index) and (before.op in LAYOUT or before.value is None
                                                  or before.line == step.line)

    lines, names = set(), []
    for index in _walk_back(steps, step.index, rearranges):
        if matches.get(index):
            name = reference_steps[matches[index][0]].name
            if name and name not in names:
                names.append(name)
        elif rearranges(steps[index]) and steps[index].line != step.line:
            lines.add(steps[index].line)
    if not lines:
        return ""
    numbers = [str(line) for line in sorted(lines)]
    where = f"line {numbers[0]}" if len(numbers) == 1 else f"lines {', '.join(numbers[:-1])} and {numbers[-1]}"
    what = _and(names) if names else "your values"
    plural = len(names) != 1 or names[0].endswith("s")
    return (f" {what[0].upper() + what[1:]} {'are' if plural else 'is'} right before {where}"
            f" rearrange{'s' if len(numbers) == 1 else ''} {'them' if plural else 'it'} (reshape, transpose, split"
            " or join): look at how those lines order the dimensions.")


def _and(items):
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]


def scrambled(finding, matches=None):
    """(student step, reference step it comes from) for the first view or reshape that the student's
    right values go into and whose output holds the same numbers as the reference's own arrangement
    of them, in an order none of that arrangement's layouts gives (heads split by a view alone, with
    no transpose); None when there is none. `matches`: `match` of the finding's steps, if made."""
    steps, refs = finding.student_steps, finding.reference_steps
    matches = match(steps, refs) if matches is None else matches
    for step in steps:
        if step.op not in ("view", "reshape") or step.value is None or matches.get(step.index):
            continue
        source = next((i for i in reversed(step.came_from) if 0 <= i < len(steps) and matches.get(i)), None)
        if source is None or steps[source].op in LAYOUT:
            continue
        made = [refs[i] for i in matches[source]]
        arranged = [ref for ref in refs if ref.op in LAYOUT and ref.value is not None and ref.value.dim() > 2
                    and ref.value.numel() == step.value.numel()
                    and any(ref.index > origin.index for origin in made)
                    and _close(ref.value.reshape(-1).sort().values, step.value.reshape(-1).sort().values)]
        options = [option for ref in arranged for option in laid_out(ref.value, step.shape)]
        if arranged and options and not any(_close(step.value, option) for option in options):
            named = next((ref for ref in made if ref.name), None)
            return (step, named) if named is not None else None
    return None


def misshapen(finding, matches=None):
    """(student step, reference step, [names of what it is made from]) for the first computing step
    made from right values whose shape no step of the reference has, where the reference makes a
    named step of the same kind from those values (`queries.T @ keys`, a (d_out, d_out) table where
    the scores are (N, N)); None when there is none. `matches`: `match` of the finding's steps, if made."""
    steps, refs = finding.student_steps, finding.reference_steps
    matches = match(steps, refs) if matches is None else matches
    shapes = {tuple(ref.shape) for ref in refs}
    for step in steps:
        if step.op in LAYOUT or step.value is None or matches.get(step.index) or tuple(step.shape) in shapes:
            continue
        right = {ref for source in _nearest_matched(steps, step.index, matches) for ref in matches[source]}
        # (as many numbers as the reference's step is a layout of it, held otherwise: not this)
        ref = next((ref for ref in refs if ref.op == step.op and ref.name and ref.value is not None
                    and ref.value.numel() != step.value.numel() and len(right & _upstream(refs, ref.index)) >= 2), None)
        if ref is not None:
            names = list(dict.fromkeys(refs[i].name for i in sorted(right & _upstream(refs, ref.index)) if refs[i].name))
            return (step, ref, names) if names else None
    return None


SCALING = ("div", "truediv", "mul", "rdiv")


def _scale_past(step, ref, finding):
    """For a table of the wrong shape (`misshapen`): the constant the student's code scales it by
    next, where that differs from the one the reference scales its own table by. Both are measured
    on the values (each scaled step over the table it is made from), never read from the code."""
    (mine, scaled), (theirs, expected) = _scaled_by(finding.student_steps, step), _scaled_by(finding.reference_steps, ref)
    if mine is None or theirs is None or abs(mine / theirs - 1) < 1e-3:
        return ""
    return (f" Then {quoted(scaled)} {_divides_by(mine, finding.sizes, scaled.code, ' it')}, where {ref.name}"
            f" {'are' if ref.name.endswith('s') else 'is'} divided by {_number(theirs, True, finding.sizes, expected.code)}.")


def _scaled_by(steps, table):
    """(d, the step) where the first step made from `table` by a division or product is `table` / d,
    else (None, None)."""
    scaled = next((s for s in steps if s.index > table.index and table.index in s.came_from and s.op in SCALING),
                  None)
    if scaled is None or scaled.value is None or table.value is None:
        return None, None
    factor = _constant(scaled.value, table.value)
    return (None, None) if factor is None or abs(factor) < 1e-6 else (1 / factor, scaled)


def _uses(step, steps):
    """What else to look at: the line that made a mask (an input that is not a float) the
    step uses, or the mask itself when it was made before the code ran (a buffer)."""
    by_index = {s.index: s for s in steps}
    others = [by_index[i] for i in step.came_from if i in by_index and (by_index[i].value is None or _mask(by_index[i]))
              and by_index[i].line != step.line]
    if others:
        return f" It uses what {quoted(others[-1])} makes: check that line too."
    if not step.came_from and step.op in LAYOUT:
        return (" That line only takes part of a tensor made before it ran (a buffer or a parameter made in"
                " __init__), so the mistake is in how that tensor is made.")
    if step.op in ("masked_fill", "where", "masked_fill_"):
        return " It fills by a mask: check that mask too (which positions it marks, and how it was made)."
    return ""


def message(finding, where="your code"):
    """What the student reads: where the values go wrong, and what they should be there; ""
    when no place was found (the cell's own checks then speak)."""
    said = _message(finding, where)
    return said + finding.also if said else ""


def _early(finding, where):
    """The message for code whose output is an earlier step of the expected computation."""
    step, ref = finding.early
    after = [other for other in finding.reference_steps if other.index > ref.index and other.op not in LAYOUT]
    rest = _and(list(dict.fromkeys(other.name for other in after if other.name))) or "more steps"
    lacks = (f" Your module has no {_and(finding.missing_parameters[:4])}: add the layer they belong to."
             if finding.missing_parameters else "")
    return (f"In {where}, the output is {ref.name or 'an earlier step of the expected computation'}, made right at"
            f" {quoted(step)}, but the expected computation does not stop there: it goes on to {rest}.{lacks}")


def _message(finding, where):
    if finding is None:
        return ""
    if finding.early is not None:
        return _early(finding, where)
    if not finding.places:
        matches = match(finding.student_steps, finding.reference_steps)  # (read by both below)
        mixed = scrambled(finding, matches)
        if mixed is not None:
            step, ref = mixed
            return (f"In {where}, the values first go wrong at {quoted(step)}: it holds the numbers of {ref.name}, but"
                    " in an order no arrangement of the heads gives. A view or reshape alone keeps the numbers in"
                    " token order, so each head gets features of several tokens. Split with .view(B, N, num_heads,"
                    " d_head), then move the heads forward with .transpose(1, 2); to join the heads, transpose back"
                    f" first, then view.{unused(finding)}")
        shaped = misshapen(finding, matches)
        if shaped is not None:
            step, ref, made_from = shaped
            return (f"In {where}, the values first go wrong at {quoted(step)}: from {_and(made_from)}, which are"
                    f" right, it makes a tensor of shape {sized_shape(step.shape, finding.sizes)}, where"
                    f" {ref.name} {'have' if ref.name.endswith('s') else 'has'} shape"
                    f" {sized_shape(ref.shape, finding.sizes)}: check which dimensions that line combines."
                    f"{_scale_past(step, ref, finding)}{unused(finding)}")
        thrown_away = unused(finding)
        return f"In {where}, the values go wrong, and the grader cannot tell where.{thrown_away}" if thrown_away else ""
    matched = (f"Up to there your values match the expected ones ({', '.join(finding.matched[:MAX_NAMES])}). "
               if finding.matched else "")
    matches = match(finding.student_steps, finding.reference_steps)
    said = [f"{quoted(step)}: it {_should(step, ref, finding.reference_steps, finding.inputs, finding.sizes)}"
            for step, ref in finding.places]
    notes = [_rearranged(step, finding.student_steps, matches, finding.reference_steps) for step, _ in finding.places]
    if len(said) == 1 and finding.repaired:
        step, ref = finding.places[0]
        there = "" if notes[0] else ", so the mistake is there"
        # (a fill that is wrong only where the expected values are hidden: its mask marks the right places)
        uses = "" if hidden_as(step.value, _expected(step, ref)) == "filled" else _uses(step, finding.student_steps)
        return (f"In {where}, the values first go wrong at {said[0]}. {matched}With the expected values on that"
                f" line, the rest of your code gives the right output{there}.{notes[0]}"
                f"{uses}{unused(finding)}")
    if finding.repaired:
        listed_places = "; ".join(f"({n}) {text}" for n, text in enumerate(said, 1))
        notes = "".join(dict.fromkeys(notes))  # each said once
        return (f"In {where}, {len(said)} lines give values that differ from the expected ones: {listed_places}."
                f" {matched}With the expected values on those lines, the rest of your code gives the right output."
                f"{notes}{unused(finding)}")
    text = f"In {where}, the values first go wrong at {said[0]}. {matched}"
    for more in said[1:]:
        text += f"With the expected values there, they go wrong again at {more}. "
    if finding.stopped is not None:
        text += (f"After that, from {quoted(finding.stopped)} on, your values match none of the expected ones in a"
                 " way the grader cannot name: compare those lines with the exercise text.")
    return (text.rstrip() + unused(finding))


def where(finding):
    """' (your line N: `code`)' for a finding with one repaired place; '' otherwise."""
    if finding is None or len(finding.places) != 1 or not finding.repaired:
        return ""
    step = finding.places[0][0]
    return f" The values first go wrong at your {quoted(step)}."
