"""Shared trusted-side steps for the `causal_attention` hidden checks."""
import torch

from autograder.checks import randn, reference_module, unused_results
from autograder.checks import (all_finite, close, expect_tensor, fail, listed, max_difference,
                                        name_mistake, no_known_mistake,
                                        shape_text, short)

# "Your journey starts with one step": the book's six 3-d token embeddings.
JOURNEY = torch.tensor([[0.43, 0.15, 0.89], [0.55, 0.87, 0.66], [0.57, 0.85, 0.64],
                        [0.22, 0.58, 0.33], [0.77, 0.25, 0.10], [0.05, 0.80, 0.55]])


def diagnose_weights(got, expected, what, variants=()):
    """Explain why attention weights `got` (..., n, n) differ from `expected`.

    `variants` are (tensor, explanation) pairs: what a known mistake produces.
    Does nothing when `got` is right.
    """
    expect_tensor(got, what, shape=expected.shape, finite=False)
    if close(got, expected):
        return
    name_mistake(got, variants, what)
    inner = what[0].lower() + what[1:]  # `what` in the middle of a sentence
    n = got.shape[-1]
    if n > 1 and torch.isposinf(got).triu(diagonal=1).any() and not torch.isposinf(got).tril().any():
        fail(f"{what} are +inf above the diagonal: the future is filled with +inf, not hidden (-float('-inf')"
             " is +inf). Fill the future scores with float('-inf') before softmax, so that softmax gives them"
             " weight 0.", named=True)
    visible = got.nan_to_num(0.0).abs() > 1e-6
    # (the last row has no future: with the mask inverted every score of it is hidden, and a fill
    # such as -1e9 then gives it equal weights everywhere, so only the rows above it tell)
    if n > 1 and visible.triu(diagonal=1).any() and not visible[..., :-1, :].tril(diagonal=-1).any():
        fail(f"{what} are zero (or NaN) below the diagonal and not above it: the mask is"
             " inverted. Keep the past and the current token (torch.tril), hide the future.", named=True)
    if n > 1 and visible.tril(diagonal=-1).any() and not visible.diagonal(dim1=-2, dim2=-1)[..., 1:].any():
        fail(f"{what} are zero (or NaN) on the diagonal: the mask hides the diagonal too, but"
             " every token must see itself. torch.tril(ones) keeps the diagonal; to mark only"
             " the future use torch.triu(ones, diagonal=1).", named=True)
    if visible.triu(diagonal=1).any():
        fail(f"{what} are not zero above the diagonal, so tokens see the future. Is the mask"
             " applied? Before softmax, fill the future with float('-inf'): a fill of 0 still"
             " gets weight after softmax.")
    expect_tensor(got, what)
    rows_ok = torch.allclose(got.sum(-1).double(), torch.ones(()).double(), atol=1e-4)
    if not rows_ok:
        if n > 1 and torch.allclose(got.sum(-2).double(), torch.ones(()).double(), atol=1e-4):
            fail(f"In {inner}, each column sums to 1 instead of each row: softmax ran over the"
                 " wrong dimension. Use dim=-1 (the keys), not dim=1 or dim=-2.", named=True)
        fail(f"Each row of {inner} should sum to 1, but the row sums range from"
             f" {got.sum(-1).min().item():.4f} to {got.sum(-1).max().item():.4f}."
             " After zeroing the future, divide each row by its sum.")
    no_known_mistake(got, expected, what)  # where it differs, never a list of guesses


QUERIES_AND_KEYS = {"queries": "W_query.weight", "keys": "W_key.weight"}


def expect_depends_on_input(student, handle, x, other, what):
    """A property (no future leak, moving with the model) earns nothing for an output that does not
    depend on the input: `x` and `other` must give different outputs (zeros, noise drawn anew, or
    zeros times the right answer give the same)."""
    before = expect_tensor(student.forward(handle, x), "The output", finite=False)
    if torch.allclose(before, expect_tensor(student.forward(handle, other), "The output", finite=False), atol=1e-6,
                      equal_nan=True):
        fail(f"{what}: the output does not depend on the input (another input gives the same output), so there is"
             " nothing for this check to judge. Compute it from x: queries, keys and values, the masked attention"
             " weights, then weights @ values.", named=True)


def expect_uses_queries_and_keys(student, handle, x, what):
    """Nor for attention whose output stays the same when the queries' or the keys' weights change
    (a plain average of the values). Last in a check: it leaves those weights changed (each changed
    in turn, the output compared before and after)."""
    parameters = student.parameters(handle)
    output = expect_tensor(student.forward(handle, x), "The output", finite=False)
    unused = []
    for role, ending in QUERIES_AND_KEYS.items():
        names = sorted(name for name in parameters if name == ending or name.endswith("." + ending))
        if not names:
            continue  # no such weights: the structure checks say so
        student.load_parameters(handle, {name: parameters[name] * 2 + 0.5 for name in names})
        changed = expect_tensor(student.forward(handle, x), "The output", finite=False)
        if torch.allclose(output, changed, atol=1e-6, equal_nan=True):
            unused.append((role, ending.split(".")[0]))
        output = changed
    if len(unused) == 2:
        fail(f"{what}: the output stays the same when the weights of both W_query and W_key change, so the"
             " attention weights " + IGNORES_QK, named=True)
    if unused:
        (role, layer), = unused
        fail(f"{what}: the output stays the same when the weights of {layer} change, so the {role} are not"
             f" computed with {layer} (or not used): {role} = self.{layer}(x), and the scores"
             " queries @ keys.transpose(...).")  # not named: a diagnosis may say where, and what else


def expect_no_leak(student, handle, x, make_later, what):
    """Changing tokens after position t must leave outputs up to t unchanged,
    and gradients of early outputs w.r.t. later inputs must be zero; and the output must depend
    on the input and the queries and keys at all (`expect_uses_queries_and_keys`)."""
    n = x.shape[1]
    t = n // 2
    changed = x.clone()
    changed[:, t + 1:] = make_later(changed[:, t + 1:])
    before = expect_tensor(student.forward(handle, x), "The output")
    after = expect_tensor(student.forward(handle, changed), "The output", shape=before.shape)
    if not torch.allclose(before[:, : t + 1], after[:, : t + 1], atol=1e-5):
        fail(f"{what}: changing tokens after position {t} changed the outputs at positions"
             f" 0..{t}, so the future leaks into the past. Check the causal mask.")
    if x.is_floating_point():
        cotangent = torch.zeros_like(before)
        cotangent[:, : t + 1] = 1.0
        grad = student.vjp(handle, [x], cotangent)
        if grad is None:
            fail(f"{what}: the output is not differentiable with respect to the input"
                 " (was it computed under torch.no_grad() or detached?).")
        grad = expect_tensor(grad, "The gradient", shape=x.shape)
        if grad[:, t + 1:].abs().max() > 1e-6:
            fail(f"{what}: outputs at positions 0..{t} have a nonzero gradient with respect to"
                 " later inputs, so the future leaks into the past. Check the causal mask.")
    # No leak is only worth something when the output depends on the past at all.
    first = x.clone()
    first[:, :1] = make_later(first[:, :1])
    moved = expect_tensor(student.forward(handle, first), "The output", shape=before.shape)
    if torch.allclose(before, after, atol=1e-5) and torch.allclose(before, moved, atol=1e-5):
        fail(f"{what}: the output does not depend on the input at all (changing the tokens changed"
             " no output), so there is nothing for the mask to hide. Compute it from x: queries, keys"
             " and values, the masked attention weights, then weights @ values.", named=True)
    if torch.allclose(before[:, 1:], moved[:, 1:], atol=1e-5):
        fail(f"{what}: changing the first token changed none of the later outputs, but every token"
             " should also attend to the tokens before it. Keep the past and the current token in the"
             " mask (torch.tril) and hide only the future.")
    expect_uses_queries_and_keys(student, handle, x, what)


def expect_mask_buffer(student, handle, structure, class_name, context_length):
    """`mask` is a registered buffer with the causal pattern, not a parameter."""
    if "mask" in structure["parameters"]:
        fail(f"In your {class_name}, `mask` is a parameter, so an optimiser would change it."
             " Register it with self.register_buffer('mask', ...).", named=True)
    shape = structure["buffers"].get("mask")
    if shape is None:
        fail(f"Your {class_name} has no buffer named `mask`. Register the causal mask with"
             " self.register_buffer('mask', torch.tril(torch.ones(context_length, context_length))).", named=True)
    expected_shape = (context_length, context_length)
    if tuple(shape) != expected_shape:
        fail(f"The `mask` buffer should have shape {shape_text(expected_shape)}, got {shape_text(shape)}.")
    mask = expect_tensor(student.buffers(handle).get("mask"), "The `mask` buffer", shape=expected_shape,
                         finite=False)
    keep = torch.tril(torch.ones(expected_shape, dtype=torch.bool))
    if torch.equal(mask != 0, keep.tril(-1)) or torch.equal(mask != 0, ~keep.tril(-1)):
        fail("The `mask` buffer hides the diagonal too, but every token must see itself: use"
             " torch.tril(torch.ones(context_length, context_length)) without diagonal=-1.", named=True)
    if not (torch.equal(mask != 0, keep) or torch.equal(mask != 0, ~keep)):
        fail("The `mask` buffer is not a causal (triangular) mask: build it with"
             " torch.tril(torch.ones(context_length, context_length)).")


def expect_moves_to_meta(student, handle, x, class_name, out_shape, other=None):
    """After .to('meta') everything is on meta and forward creates nothing on the CPU; and on the
    CPU the output depends on the input (`other` gives another output) and the queries and keys."""
    student.forward(handle, x)  # code that fails on the CPU too has no device problem to name
    report = student.meta_forward(handle, x)
    if not report["moved"]:
        fail(f"Your {class_name} could not be moved with .to('meta'): {short(report['error'], 300)}")
    stuck = [name for name, device in report.get("devices", {}).items() if device != "meta"]
    if stuck:
        fail(f"After model.to(device), {listed(stuck)} stayed behind: register tensors as"
             " buffers or parameters so they move with the model.")
    if report["error"] or report["cpu_ops"]:
        fail(f"Your {class_name} does not work once moved to another device (as on a GPU):"
             " forward creates or uses a tensor on the CPU. Use buffers (self.mask) and create new"
             " tensors with device=x.device.")
    if tuple(report["output_shape"] or ()) != tuple(out_shape):
        fail(f"On another device the output has shape {shape_text(report['output_shape'] or ())},"
             f" expected {shape_text(out_shape)}.")
    expect_depends_on_input(student, handle, x, x * -1.5 + 1 if other is None else other, f"Your {class_name}")
    expect_uses_queries_and_keys(student, handle, x, f"Your {class_name}")


def weights_from(student, name, qkt, d_out):
    """Call the student's weights function `name`; it must be a function."""
    if student.kind(name) != "function":
        fail(f"`{name}` should be a function, but it is {student.kind(name)}.")
    return student.call(name, qkt.clone(), d_out)


def scale_mistakes(weights_function, qkt, d_out):
    """(weights, explanation) for wrong scalings, via the reference itself:
    scaling by sqrt(s) with s = 1, d_out**2 and 1/d_out."""
    return [
        (weights_function(qkt, 1), "the scores are not scaled. Divide them by sqrt(d_out)."),
        (weights_function(qkt, d_out ** 2),
         "the scores are divided by d_out; divide by its square root, sqrt(d_out)."),
        (weights_function(qkt, 1 / d_out),
         "the scores are multiplied by sqrt(d_out); divide by it instead."),
    ]


def random_scores(rng, shape):
    # d_out from 5 up: at 4, d_out ** 1/2 (which is d_out / 2) equals sqrt(d_out), and at 1 no
    # scale differs from another, so those wrong answers would pass with some seeds only.
    d_out = int(torch.randint(5, 64, (1,), generator=rng))
    return randn(rng, *shape) * 4, d_out


def expect_embeddings(student, reference, rng, name, shape, class_name, args, input_shape):
    """A notebook variable holding the output of the notebook's `class_name(*args)` on a random batch
    of `input_shape`: traced to the module call that made it, and its values made again here, on
    the grader's side, by the reference with that module's parameters on that call's input (a row
    of the batch): where the sandbox says a value came from earns nothing by itself."""
    kind = student.kind(name)
    if kind == "missing":
        fail(f"`{name}` is not defined. Store the model's output in a variable with that name.")
    if kind in ("class", "function"):
        fail(f"`{name}` holds the model (or a function), not a tensor: store the model's output,"
             " model(x_batch).")
    value = expect_tensor(student.value(name), f"`{name}`", shape=shape, dtype=torch.float32)
    if value.std() == 0:
        fail(f"Every entry of `{name}` is the same number: run the model on a random batch"
             " (torch.randn) and store its output.")
    if torch.equal(value, value[:1, :1].expand_as(value)):
        fail(f"Every row of `{name}` is the same row: the input had no information in it. Run"
             " the model on a random batch (torch.randn) and store its output.")
    origin = student.origin(name, class_name)
    if not origin["watched"]:  # graded in this process (stock nbgrader): no module call was noted, so the
        expect_class_right(student, reference, rng, name, class_name, args, input_shape)  # class must be right
        return
    if not origin["found"]:
        fail(f"`{name}` has the right shape, but it did not come out of your {class_name}: no model"
             f" call returned it. Build the model, run it on the batch and store what it returns,"
             f" {name} = model(x_batch), not a tensor made to the expected shape.", named=True)
    if not origin["is_class"]:
        fail(f"`{name}` came out of a {short(origin['type'])}, not out of your {class_name}: run a"
             f" {class_name} on the batch and store its output.", named=True)
    if [tuple(s) for s in origin["inputs"]] != [tuple(input_shape)]:
        got = ", ".join(shape_text(s) for s in origin["inputs"][:3]) or "no tensor"
        fail(f"`{name}` came out of your {class_name}, but from an input of shape {got}; the exercise"
             f" asks for a batch of shape {shape_text(input_shape)}.")
    expect_made_again(student, reference, rng, name, value, class_name, args, input_shape, origin)


def expect_class_right(student, reference, rng, name, class_name, args, input_shape):
    """Where no module call was watched (stock nbgrader's in-kernel mode), a variable's points are
    withheld while the class that should make it computes other values than the exercise's does
    (with the same parameters, on a short random input)."""
    from autograder.checks import paired

    handle, made = paired(student, reference, class_name, args, rng)
    x = randn(rng, 1, min(8, input_shape[1]), input_shape[-1])
    with torch.no_grad():
        expected = made(x)
    got = expect_tensor(student.forward(handle, x), "The output", finite=False)
    if not close(got, expected):
        fail(f"`{name}` is meant to be what your {class_name} computes, but your {class_name} does not compute what"
             f" the exercise's does yet: fix {class_name} first; this variable counts once it does.")


_MADE = {}  # (reference, class, args, dropout, bias) -> the module, built once per grading process


def _made_again(reference, class_name, args, dropout, bias):
    """The reference `class_name(*args)` to make a variable again with (every parameter is then
    copied in from the student's module: its own initial values never count, so it is built once)."""
    key = (id(reference), class_name, args, dropout, bias)
    if key not in _MADE:
        if len(_MADE) > 16:
            _MADE.clear()
        _MADE[key] = (reference, reference_module(reference, class_name, *args, dropout=dropout, qkv_bias=bias))
    return _MADE[key][1]


def expect_made_again(student, reference, rng, name, value, class_name, args, input_shape, origin):
    """The variable `value` equals, on one row of the batch drawn from `rng` (the whole batch where
    dropout drew numbers), what the reference `class_name(*args)` computes with the parameters of
    the module that made it, on the input it was given: plain data the sandbox sends, the
    computation made here."""
    handle = origin["handle"]
    structure = student.structure(handle)
    rates = [rate for rate in structure.get("dropouts", {}).values() if type(rate) in (int, float)]
    dropout = max(rates, default=0.0)
    drawn = origin["training"] and dropout > 0  # its dropout drew numbers for the whole batch at once
    row = int(torch.randint(0, input_shape[0], (1,), generator=rng))
    call = student.recorded_call(handle, None if drawn else [row])
    inputs = call.get("inputs") if isinstance(call, dict) else None
    if call.get("shapes") != [list(input_shape)] or not isinstance(inputs, list) or len(inputs) != 1 \
            or type(inputs[0]) is not torch.Tensor or tuple(inputs[0].shape) != ((input_shape[0] if drawn else 1),
                                                                                 *input_shape[1:]):
        fail(f"`{name}` came out of your {class_name}, but the input it was given cannot be read back as"
             f" one batch of shape {shape_text(input_shape)}: store the output of model(x_batch).")
    parameters = student.parameters(handle)
    bias = any(key.endswith(".bias") and "projection" not in key for key in parameters)
    made = _made_again(reference, class_name, tuple(args), float(dropout), bias)
    own = dict(made.named_parameters())
    if set(parameters) != set(own) or any(tuple(parameters[key].shape) != tuple(p.shape) for key, p in own.items()):
        fail(f"`{name}` came out of your {class_name}, but its parameters are not those of the exercise's"
             f" {class_name}{tuple(args)} ({listed(sorted(set(parameters) ^ set(own)) or sorted(own), 4)}), so its"
             " values cannot be checked. Build the model as the exercise says and store its output.")
    with torch.no_grad():
        for key, parameter in own.items():
            parameter.copy_(parameters[key])
        x = inputs[0].to(torch.float32)
        if drawn:
            state = call.get("random_state")
            if type(state) is not torch.Tensor or state.dtype != torch.uint8:
                fail(f"`{name}` came out of your {class_name} in training mode, but the random numbers its"
                     " dropout drew cannot be read back: run the model in eval mode (model.eval()).")
            generator = torch.default_generator
            saved = generator.get_state()
            try:
                generator.set_state(state)
                expected = made.train()(x)[row]
            except RuntimeError:
                fail(f"`{name}` came out of your {class_name} in training mode, but the random numbers its"
                     " dropout drew cannot be read back: run the model in eval mode (model.eval()).")
            finally:
                generator.set_state(saved)
        else:
            expected = made.eval()(x)[0]
    if not close(value[row], expected):
        changed = (" It was also changed in place after the model returned it: store the model's output and"
                   " leave it as it is.") if origin.get("changed") else ""
        fail(f"`{name}` came out of your {class_name}, but its values are not what the exercise's {class_name}"
             f" computes with your model's parameters on that batch (largest difference"
             f" {max_difference(value[row], expected):.3g} in row {row}).{changed} When {class_name}'s own checks"
             " pass, run it on the batch again and store its output.")


def expect_registered_heads(structure, num_heads, head_params, class_name):
    """heads is an nn.ModuleList of distinct modules, all visible to parameters()."""
    if structure["list_attributes"]:
        fail(f"Your {class_name} keeps modules in a plain Python list"
             f" ({listed(structure['list_attributes'])}): their parameters are invisible to"
             " model.parameters() and .to(device). Use nn.ModuleList.", named=True)
    if structure["modules"].get("heads") != "ModuleList":
        fail(f"`heads` should be an nn.ModuleList, got {short(structure['modules'].get('heads', 'nothing'))}.")
    heads = [name for name in structure["modules"] if name.count(".") == 1 and name.startswith("heads.")]
    if structure["repeated_modules"]:
        fail("The same head object appears more than once in `heads`, so all heads share one set"
             " of weights. Create a new CausalAttention for every head.", named=True)
    if len(heads) != num_heads:
        fail(f"Expected {num_heads} heads in `heads`, got {len(heads)}.")
    if structure["parameter_count"] != num_heads * head_params:
        fail(f"Expected {num_heads * head_params} parameters ({num_heads} heads of {head_params}),"
             f" got {short(structure['parameter_count'])}. Is each head a CausalAttention(d_in, d_out //"
             " num_heads, ...)?")


IGNORES_QK = ("ignore the queries and keys: every visible token gets the same weight"
              " (a plain average of the values). Compute the scores queries @ keys.transpose(...),"
              " mask the future, scale and apply softmax.")


def uniform_weights(scores):
    """(weights, explanation) of attention that averages the visible tokens equally."""
    n = scores.shape[-1]
    keep = torch.tril(torch.ones(n, n))
    return (keep / keep.sum(-1, keepdim=True)).expand_as(scores), "they " + IGNORES_QK


def one_module_forward(x, params, num_heads, scale_by=None, split="transpose",
                       merge="transpose", project=True, softmax_dim=-1, uniform=False):
    """Multi-head attention from a parameter dict, with switches that reproduce
    common mistakes (used only to name a mistake in the feedback)."""
    batch, tokens, _ = x.shape
    d_out = params["W_query.weight"].shape[0]
    d_head = d_out // num_heads

    def linear(name, t):
        out = t @ params[f"{name}.weight"].T
        return out + params[f"{name}.bias"] if f"{name}.bias" in params else out

    def split_heads(t):
        if split == "transpose":
            return t.view(batch, tokens, num_heads, d_head).transpose(1, 2)
        return t.reshape(batch, num_heads, tokens, d_head)

    queries, keys, values = (split_heads(linear(n, x)) for n in ("W_query", "W_key", "W_value"))
    scores = queries @ keys.transpose(2, 3)
    future = torch.triu(torch.ones(tokens, tokens, dtype=torch.bool), diagonal=1)
    weights = torch.softmax(scores.masked_fill(future, float("-inf")) / (scale_by or d_head) ** 0.5,
                            softmax_dim)
    if uniform:
        weights = uniform_weights(scores)[0]
    context = weights @ values
    if merge == "transpose":
        context = context.transpose(1, 2)
    context = context.reshape(batch, tokens, d_out)
    return linear("projection", context) if project else context


ONE_MODULE_MISTAKES = (
    ({"scale_by": "d_out"}, "the scores are scaled by sqrt(d_out); each head needs sqrt(d_head)."),
    ({"split": "view"}, "the heads are split with view alone, which mixes tokens and features."
     " Use .view(B, N, num_heads, d_head).transpose(1, 2)."),
    ({"merge": "view"}, "the heads are merged without moving tokens first again: call"
     " .transpose(1, 2) before .contiguous().view(B, N, d_out)."),
    ({"project": False}, "the output projection is missing: return self.projection(context)."),
    ({"softmax_dim": 1}, "softmax ran over the wrong dimension, dim=1 (the heads), which turns"
     " the masked -inf scores into NaN. Use dim=-1 (the keys)."),
    ({"uniform": True}, "the attention weights " + IGNORES_QK),
)


def one_module_mistakes(x, ref, num_heads):
    params = {name: p.detach() for name, p in ref.named_parameters()}
    d_out = params["W_query.weight"].shape[0]
    variants = []
    for switches, explanation in ONE_MODULE_MISTAKES:
        switches = {k: (d_out if v == "d_out" else v) for k, v in switches.items()}
        variants.append((one_module_forward(x, params, num_heads, **switches), explanation))
    return variants


def expect_weights_not_uniform(weights, what):
    """Attention weights (..., n, n) that give every visible token the same weight ignore the
    queries and keys: dropout on them, or their being causal, says nothing then."""
    n = weights.shape[-1]
    if n < 2 or not all_finite(weights):
        return
    uniform, explanation = uniform_weights(weights)
    if close(weights, uniform):
        fail(f"{what} are not right: {explanation}", named=True)


DROPOUT_P, OTHER_P = 0.5, 0.2  # the check's dropout, and another to tell a by-hand 1/(1 - p) by


def expect_dropout_on_weights(student, handle, x, heads=1, rebuilt=None):
    """With all-ones value vectors (and an identity output projection), each
    head's output block holds the sums of its attention weights: 1 in eval mode,
    one number per row and head in training mode when dropout hits the weights.
    `handle` is the student's module made so with dropout DROPOUT_P; `rebuilt(p)` makes it again
    with another p (to tell weights scaled by hand).
    (Whether those weights depend on the queries and keys is the caller's part:
    `expect_weights_not_uniform`.)"""
    shape = tuple(x.shape)
    evaluated = expect_tensor(student.forward(handle, x), "The output", shape=shape)
    if not torch.allclose(evaluated, torch.ones(shape), atol=1e-5):
        if rebuilt is not None:
            expect_no_rescaling_by_hand(student, rebuilt, x, evaluated)
        fail("In eval mode (model.eval()) dropout must do nothing, but the attention weights"
             " changed. Use the nn.Dropout layer self.dropout; it switches off in eval mode.")
    trained = expect_tensor(student.forward(handle, x, train=True, seed=1), "The output", shape=shape)
    if torch.allclose(trained, torch.ones(shape), atol=1e-5):
        thrown_away = unused_results(student, handle, [x], "dropout", train=True, seed=1)
        if thrown_away:  # computed, then never used: `self.dropout(weights)` on a line of its own
            fail(f"In training mode no attention weight was dropped: {thrown_away[0]} applies dropout, but no"
                 " later line uses its result. Assign it and use that: weights = self.dropout(weights).",
                 apart=True)
        # (the same module, parameters and inputs were right in eval mode: what differs in training
        # mode is dropout's alone, whatever else the cell gets wrong: verdict.MistakeApart)
        fail("In training mode no attention weight was dropped: apply self.dropout to the"
             " attention weights after softmax.", apart=True)
    blocks = trained.view(*shape[:-1], heads, shape[-1] // heads)
    if not torch.allclose(blocks, blocks[..., :1].expand_as(blocks), atol=1e-5):
        fail("Dropout is applied to the context vectors or the output, not to the attention"
             " weights: apply self.dropout to the weights, before multiplying by the values.", apart=True)


def expect_no_rescaling_by_hand(student, built, x, evaluated):
    """Name weights scaled by 1/(1 - p) by hand: in eval mode they sum to 1/(1 - p) with the check's p
    and with another p too (the same code, dropout's p alone changed: verdict.MistakeApart)."""
    def by_hand(value, p):
        return isinstance(value, torch.Tensor) and value.shape == x.shape and torch.allclose(
            value, torch.full(value.shape, 1 / (1 - p)), atol=1e-4)

    if not by_hand(evaluated, DROPOUT_P) or not by_hand(student.forward(built(OTHER_P), x), OTHER_P):
        return
    fail(f"In eval mode your attention weights sum to {1 / (1 - DROPOUT_P):g} with dropout p = {DROPOUT_P:g} and to"
         f" {1 / (1 - OTHER_P):g} with p = {OTHER_P:g}: they are scaled by 1/(1 - p) by hand. nn.Dropout already"
         " scales the weights it keeps by 1/(1 - p) in training mode and does nothing in eval mode: remove the"
         " extra factor.", apart=True)


def causal_mistakes(x, ref):
    """What a CausalAttention that scales by sqrt(d_in) instead of sqrt(d_out) returns."""
    queries, keys, values = ref.W_query(x), ref.W_key(x), ref.W_value(x)
    n = x.shape[1]
    future = torch.triu(torch.ones(n, n, dtype=torch.bool), diagonal=1)
    scores = (queries @ keys.transpose(1, 2)).masked_fill(future, float("-inf"))
    by_d_in = torch.softmax(scores / x.shape[-1] ** 0.5, dim=-1) @ values
    return [(by_d_in, "the scores are scaled by sqrt(d_in), the input size; scale them by"
             " sqrt(d_out), the size of the queries and keys."),
            (uniform_weights(scores)[0] @ values, "the attention weights " + IGNORES_QK)]


def language_model_mistakes(ids, ref):
    """What BadLM_V2 returns without position embeddings, or without attention."""
    positions = ref.pos_embs(torch.arange(ids.shape[1]))
    tokens = ref.token_embs(ids)
    return [
        (ref.prediction_layer(ref.att(tokens)),
         "the position embeddings are not added: embeddings = token_embs(ids) + pos_embs(positions)."),
        (ref.prediction_layer(tokens + positions),
         "the attention layer is skipped: pass the embeddings through self.att before"
         " prediction_layer."),
    ]


# The notebook's own 3x3 scores, shown with their weights in Exercises 1 and 2.
NOTEBOOK_QKT = torch.tensor([[0.1, 0.2, 0.3], [0.4, 0.5, 0.6], [0.7, 0.8, 0.9]])


def expect_weights(student, name, expected, mistakes, qkt, d_out, shape=None):
    """`name(qkt, d_out)` must give `expected(qkt, d_out)`; a known mistake is named."""
    got = weights_from(student, name, qkt, d_out)
    if shape is not None:
        got = expect_tensor(got, f"For scores of shape {shape}, the result", shape=shape)
    diagnose_weights(got, expected(qkt, d_out), "The attention weights", mistakes(qkt, d_out))


def weights_probe(name):
    """The diagnosis probe of a weights function: 2-D, batched and head-batched scores."""
    def probe(student, rng):
        for shape in ((5, 5), (2, 6, 6), (2, 3, 4, 4)):
            qkt, d_out = random_scores(rng, shape)
            yield student.call(name, qkt, d_out)
    return probe
