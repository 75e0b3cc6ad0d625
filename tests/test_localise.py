"""Localising mistakes by value (checks/localise.py, inside/trace.py) and what the student reads.

The student's code here is the reference with edits, compiled as a notebook cell would be (its
own file name, its lines in linecache), and answered in this process (NamespaceStudent): the
same probes a sandbox answers. One test goes through a real sandbox.
"""
import linecache
from pathlib import Path

import pytest
import torch

from autograder.checks import errormodel, localise
from autograder.checks.checklib import Locating, locate_function, locate_module
from autograder.course import reference as reference_code
from autograder.inside.student import NamespaceStudent
from autograder.inside.trace import own_files, traced
from autograder.record import UNTESTED
from autograder.wire import StudentError

from helpers import COURSE

SOLUTIONS = COURSE.root / "solutions" / "causal_attention.py"
NAMES = errormodel.step_names(COURSE.root / "exercises" / "causal_attention")
CAUSAL = locate_module("CausalAttention", (6, 4, 9), (3, 7, 6), longest=[(3, 9, 6)])


def notebook(edits=(), replace=None, solutions=SOLUTIONS):
    """The namespace of a notebook whose answers are the reference with `edits` (or the cells in
    `replace`), each cell compiled under a file name of its own, as IPython does."""
    regions = dict(reference_code.edited_regions(Path(solutions), list(edits)))
    regions.update(replace or {})
    namespace = {"__name__": "__main__"}
    for number, (name, source) in enumerate(regions.items()):
        if reference_code.is_script(name):
            continue
        filename = f"<ipython-input-{number}-test>"
        source = reference_code.strip_solution_markers(source)
        linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
        exec(compile(source, filename, "exec"), namespace)
    return namespace


def found_in(namespace, locate=CAUSAL, solutions=SOLUTIONS, names=NAMES, seed=3):
    at = Locating(NamespaceStudent(namespace), reference_code.load(solutions), names, seed)
    finding = locate(at)
    return finding, localise.message(finding, locate.where) if finding is not None else ""


# -- the trace ------------------------------------------------------------------------------
def test_a_trace_notes_each_line_of_the_students_code_and_nothing_of_the_libraries():
    namespace = notebook()
    module = namespace["CausalAttention"](6, 4, 9).eval()
    output, steps, _ = traced(own_files(namespace), lambda: module(torch.randn(2, 5, 6)))
    assert output.shape == (2, 5, 4)
    assert [step["op"] for step in steps][:3] == ["linear"] * 3  # nn.Linear's F.linear, at the student's line
    assert steps[0]["code"].startswith("queries = self.W_query(x)")
    assert all(step["file"].startswith("<ipython-input-") for step in steps)
    softmax = next(step for step in steps if step["op"] == "softmax")
    assert softmax["from"] and torch.allclose(softmax["value"].sum(-1), torch.ones(2, 5))


def test_replacing_a_step_changes_what_the_code_goes_on_with_in_place_too():
    namespace = notebook(replace={"ex2_answer": (
        "def mask_before_softmax(qkt, d_out):\n"
        "    scores = qkt.clone()\n"
        "    scores[0, 0] = 5.0\n"
        "    return scores * 2\n")})
    run = lambda: namespace["mask_before_softmax"](torch.zeros(2, 2), 4)  # noqa: E731
    _, steps, _ = traced(own_files(namespace), run)
    assert [step["op"] for step in steps] == ["clone", "__setitem__", "mul"]  # x[i] = v is a step
    output, _, replaced = traced(own_files(namespace), run, replace={1: torch.ones(2, 2)})
    assert replaced == [1] and torch.equal(output, torch.full((2, 2), 2.0))


def test_a_module_on_the_meta_device_traces_without_values():
    namespace = notebook()
    module = namespace["CausalAttention"](6, 4, 9).to("meta").eval()
    output, steps, _ = traced(own_files(namespace), lambda: module(torch.randn(2, 5, 6, device="meta")))
    assert output.device.type == "meta" and steps and all(step["value"] is None for step in steps)


# -- finding the place ------------------------------------------------------------------------
def test_right_code_has_nothing_to_localise():
    finding, said = found_in(notebook())
    assert finding is None and said == ""


def test_softmax_over_the_wrong_dimension_is_found_on_its_line_in_the_words_of_the_steps():
    finding, said = found_in(notebook([("ex3_answer", "dim=-1)", "dim=1)")]))
    assert finding.repaired and len(finding.places) == 1
    assert "`weights = torch.softmax(scores / math.sqrt(self.d_out), dim=1)`" in said
    assert "should give the attention weights" in said and "over dimension 1" in said
    assert "the queries, the keys, the attention scores" in said


def test_keys_made_with_the_query_layer_are_blamed_on_that_line_not_on_the_scores():
    _, said = found_in(notebook([("ex3_answer", "keys = self.W_key(x)", "keys = self.W_query(x)")]))
    assert "`keys = self.W_query(x)" in said and "should give the keys" in said


def test_two_mistakes_are_both_named():
    finding, said = found_in(notebook([("ex3_answer", "keys = self.W_key(x)", "keys = self.W_query(x)"),
                                       ("ex3_answer", "dim=-1)", "dim=1)")]))
    assert finding.repaired and len(finding.places) == 2
    assert "2 lines give values that differ" in said and "W_query(x)" in said and "dim=1" in said


def test_a_scale_is_said_as_what_the_line_divides_by_and_what_it_should():
    _, said = found_in(notebook([("ex3_answer", "math.sqrt(self.d_out)", "self.d_out")]))
    # (its numbers say which size they are: CausalAttention(6, 4, 9) has d_out = 4, the only 4)
    assert "it divides by 4 (d_out), where it should divide by 2 (the square root of d_out = 4)" in said


def test_numbers_name_the_size_they_are_only_where_one_size_has_that_value():
    sizes = {"d_in": 6, "d_out": 4, "num_heads": 2, "context_length": 9}
    line = "weights = torch.softmax(scores / math.sqrt(d_out) + d_in, dim=-1)"
    assert localise._number(2, True, sizes, line) == "2 (the square root of d_out = 4)"
    assert localise._number(6, True, sizes, line) == "6 (d_in)"
    # A size the line does not use is not named: 2 is num_heads, but this line divides by d_head.
    assert localise._number(2, "named", sizes, "scores / self.d_head") == "2"
    assert localise._number(1.4142136, True, sizes, "scores / math.sqrt(self.d_head)") == "1.41 (the square root of 2)"
    assert localise._number(2, True, {"d_in": 4, "d_out": 4}, line) == "2 (the square root of 4)"  # which 4?
    assert localise._number(2.8284271, True, sizes, line) == "2.83 (the square root of 8)"
    assert localise._number(5, "size", sizes, line) == "5"  # not the square root of 25: no size is 25
    assert localise._number(2, "size", sizes, "") == "2 (the square root of 4)"  # some size is 4
    scores = torch.randn(3, 3)
    assert localise.difference(scores * 2, scores, sizes, line) == (
        "its values are 2 (the square root of d_out = 4) times the expected ones")
    assert localise.difference(scores / 2, scores, sizes, "scores * k.shape[-1] ** 0.5") == (
        "its values are the expected ones divided by 2 (the square root of 4)")
    assert localise.difference(scores * 0.37, scores, sizes) == "its values are 0.37 times the expected ones"


def test_another_valid_order_of_steps_is_not_blamed():
    # Scaling the queries first is right; with a mistake after it, only the mistake's line is named.
    style = ("ex3_answer", "scores = queries @ keys.transpose(1, 2)",
             "scores = (queries / math.sqrt(self.d_out)) @ keys.transpose(1, 2)")
    unscale = ("ex3_answer", "weights = torch.softmax(scores / math.sqrt(self.d_out), dim=-1)",
               "weights = torch.softmax(scores, dim=-1)")
    assert found_in(notebook([style, unscale]))[0] is None  # right, another way
    finding, said = found_in(notebook([style, unscale, ("ex3_answer", "return weights @ values", "return weights @ keys")]))
    assert [step.code for step, _ in finding.places] == ["return weights @ keys  # (B, N, d_out)"]
    assert "queries / math.sqrt" not in said


def test_a_wrong_mask_buffer_is_traced_to_the_slice_and_to_how_the_buffer_is_made():
    _, said = found_in(notebook([("ex3_answer", "torch.tril(torch.ones(context_length, context_length))",
                                  "torch.triu(torch.ones(context_length, context_length))")]))
    assert "self.mask[:N, :N]" in said and "the causal mask" in said
    assert "how that tensor is made" in said  # the buffer, made in __init__


def test_an_output_that_ignores_the_computation_names_no_line():
    # Replacing a constant by the expected output repairs any code: that proves nothing.
    finding, said = found_in(notebook(replace={"ex3_answer": (
        "class CausalAttention(nn.Module):\n"
        "    def __init__(self, d_in, d_out, context_length, dropout=0.0, qkv_bias=False):\n"
        "        super().__init__()\n"
        "        self.W_query = nn.Linear(d_in, d_out, bias=qkv_bias)\n"
        "        self.W_key = nn.Linear(d_in, d_out, bias=qkv_bias)\n"
        "        self.W_value = nn.Linear(d_in, d_out, bias=qkv_bias)\n"
        "        self.dropout = nn.Dropout(dropout)\n"
        "        self.register_buffer('mask', torch.tril(torch.ones(context_length, context_length)))\n"
        "        self.d_out = d_out\n"
        "    def forward(self, x):\n"
        "        return torch.zeros(x.shape[0], x.shape[1], self.d_out)\n")}))
    assert finding is not None and not finding.places and said == ""


def test_a_thrown_away_result_is_pointed_out():
    finding, said = found_in(notebook([("ex2_answer", 'masked = qkt.masked_fill(keep == 0, float("-inf"))',
                                        'masked = qkt\n    qkt.masked_fill(keep == 0, float("-inf"))')]),
                             locate=locate_function("mask_before_softmax", lambda rng: [torch.randn(2, 5, 5, generator=rng), 5]))
    assert "no later line uses that value" in said and "qkt.masked_fill(" in said


def test_code_that_crashes_on_short_inputs_is_localised_on_long_ones_and_the_error_said():
    finding, said = found_in(notebook([("ex3_answer", "self.mask[:N, :N]", "self.mask[:N][:N]"),
                                       ("ex3_answer", "keys = self.W_key(x)", "keys = self.W_query(x)")]))
    assert "keys = self.W_query(x)" in said
    assert "stops with an error" in said and "(3, 7, 6)" in said


def test_code_that_raises_says_nothing_from_here():
    finding, said = found_in(notebook([("ex3_answer", "return weights @ values", "return weights @ values.T")]))
    assert finding.error and not finding.places and said == ""


# -- what a crash says -------------------------------------------------------------------------
def test_an_error_in_right_code_also_names_the_students_line_that_called_it():
    namespace = notebook(replace={"ex5_answer": (
        "class MultiHeadAttention(nn.Module):\n"
        "    def __init__(self, d_in, d_out, num_heads, context_length, dropout=0.0, qkv_bias=False):\n"
        "        super().__init__()\n"
        "        self.heads = nn.ModuleList(\n"
        "            [CausalAttention(d_in, d_out // num_heads, dropout, context_length) for _ in range(num_heads)])\n"
        "    def forward(self, x):\n"
        "        return torch.cat([head(x) for head in self.heads], dim=-1)\n")})
    with pytest.raises(StudentError) as raised:
        NamespaceStudent(namespace).new("MultiHeadAttention", (6, 4, 2, 9))
    text = str(raised.value)
    assert "your line" in text and "called from your line 5: [CausalAttention(d_in, d_out // num_heads, dropout" in text


# -- through the grader: a sandbox, the result, the page -------------------------------------------
@pytest.mark.slow
def test_a_held_out_answer_graded_in_the_sandbox_names_its_line_and_its_consequences(tmp_path):
    from markupsafe import escape

    from autograder.authoring.validate import grade_corpus
    from autograder.outputs.feedback import layout_of, render_feedback
    from autograder.runs.recording import read_source

    name = "held37-a-ex3-scaled-by-number-of-dims"  # d_k = keys.dim(): always divides by sqrt(3)
    assignment = COURSE.assignment("causal_attention")
    report = grade_corpus(assignment, tmp_path / "submissions", 0, 1, tmp_path / "graded", only={name})
    cell = next(cell for cell in report.results[name].cells if cell.name == "ex3")
    said = [check.message for check in cell.checks if check.message]
    assert len(said) == 1, said  # one cause, said once
    assert "`weights = torch.softmax(scores / math.sqrt(d_k), dim=-1)`" in said[0]
    # what it does is a number; what it should do is the square root of a size of the check's call
    assert "divides by 1.73 (the square root of 3), where it should divide by 2 (the square root of d_out = 4)" in said[0]
    followers = [check for check in cell.checks if not check.passed and not check.message]
    # the replacement run was on the localising check's own call: for the others no run showed it
    assert followers and all(check.because == UNTESTED + "above" for check in followers)
    page = render_feedback(report.results[name], layout_of(read_source(assignment)))
    section = page[page.index('id="ex3"'):page.index("</section>", page.index('id="ex3"'))]
    items = section.split("<li")[1:]
    for check in followers:  # listed under the cause, not as failures of their own
        start = str(escape(check.description.split("`")[0]))[:25]
        item = next(item for item in items if start in item)
        assert item.startswith(' class="consequence"') and "fails too: once what is above is fixed" in item
        assert "fails because of" not in item
    assert [item.startswith(' class="consequence"') for item in items].count(True) == len({
        check.description for check in followers})


def test_a_module_that_stops_early_is_told_what_is_missing():
    # No output projection: the output is the heads' context vectors, right, and nothing after them.
    finding, said = found_in(notebook([("ex6_answer", "return self.projection(context)  # (B, N, d_out)",
                                        "return context"),
                                       ("ex6_answer", "self.projection = nn.Linear(d_out, d_out)", "pass")]),
                             locate=locate_module("MultiHeadAttentionOneModule", (6, 4, 2, 9), (3, 7, 6)))
    assert finding.early is not None and finding.missing_parameters == ["projection.weight", "projection.bias"]
    assert "the output is the context vectors, made right at line" in said
    assert "goes on to the output projection" in said and "no projection.weight and projection.bias" in said


def test_a_forged_trace_from_the_sandbox_is_read_safely():
    # The student's code could replace the tracer in its sandbox: what comes back is checked.
    forged = ["not a step", {"line": "9; rm -rf", "code": "x" * 10_000, "shape": "big", "from": [1, "a"],
                             "value": torch.ones(2), "op": None}, {"line": 4, "from": None}] + [{}] * 1000
    steps = localise.steps_of(forged)
    assert len(steps) == localise.MAX_STEPS - 1  # the string left out, the rest cut at MAX_STEPS
    assert steps[0].line == 0 and len(steps[0].code) <= localise.MAX_CODE and steps[0].shape == ()
    assert steps[0].came_from == [1] and steps[1].line == 4 and steps[1].came_from == []


def test_heads_stacked_along_the_batch_are_a_layout_of_the_expected_values():
    """(B, H, N, d) laid out as the student's (H * B, N, d) (torch.cat(torch.split(q, d_head, -1), 0)) or
    (B * H, N, d): both orders are tried first, with the last two dimensions in place."""
    value = torch.randn(2, 3, 4, 5)  # (B, H, N, d)
    options = localise.laid_out(value, (6, 4, 5))
    heads_first = torch.cat(torch.split(value.transpose(1, 2).reshape(2, 4, 15), 5, dim=-1), dim=0)
    assert any(torch.equal(option, heads_first) for option in options[:2])
    assert any(torch.equal(option, value.reshape(6, 4, 5)) for option in options[:2])
    assert localise.laid_out(value, (7, 4, 5)) == []  # other numbers of values: no layout


def test_a_result_computed_and_thrown_away_is_named_at_its_line():
    """Issue 44, item 3: `self.dropout(weights)` on a line of its own drops weights no later line uses.
    The trace runs in training mode (in eval mode dropout returns its input, the same tensor)."""
    from autograder.checks import unused_results

    thrown_away = notebook([("ex3_answer", "weights = self.dropout(weights)", "self.dropout(weights)")])
    student = NamespaceStudent(thrown_away)
    handle = student.new("CausalAttention", (6, 4, 9), {"dropout": 0.5})
    found = unused_results(student, handle, [torch.randn(2, 5, 6)], "dropout", train=True, seed=1)
    assert len(found) == 1 and found[0].endswith("`self.dropout(weights)`") and found[0].startswith("line ")
    assert unused_results(student, handle, [torch.randn(2, 5, 6)], "dropout") == []  # eval: dropout is its input
    right = NamespaceStudent(notebook())
    handle = right.new("CausalAttention", (6, 4, 9), {"dropout": 0.5})
    assert unused_results(right, handle, [torch.randn(2, 5, 6)], "dropout", train=True, seed=1) == []


# -- issue 44: faults where they are made, and two that hide each other ----------------------------
ONE_MODULE = locate_module("MultiHeadAttentionOneModule", (6, 4, 2, 9), (3, 7, 6), longest=[(3, 9, 6)])


def test_a_mask_filled_with_zero_is_named_at_the_fill_not_at_the_right_scores_before_it():
    # The scores are scaled before masking (right, only not masked yet) and the future is filled with 0
    finding, said = found_in(notebook([
        ("ex6_answer", "scores = scores.masked_fill(self.mask[:N, :N] == 0, float(\"-inf\"))",
         "scores = (scores / math.sqrt(d_head)).masked_fill(self.mask[:N, :N] == 0, 0.0)"),
        ("ex6_answer", "weights = torch.softmax(scores / math.sqrt(d_head), dim=-1)",
         "weights = torch.softmax(scores, dim=-1)")]), locate=ONE_MODULE)
    assert finding.repaired and len(finding.places) == 1
    assert "masked_fill(self.mask[:N, :N] == 0, 0.0)" in finding.places[0][0].code
    assert "where the expected values are -inf (hidden), yours are 0: softmax still gives a weight of e^0" in said
    assert "check that mask too" not in said  # it marks the right places: only the fill is wrong


def test_a_wrong_fill_and_a_wrong_scale_are_found_together_as_two_places():
    # Each hides the other: with the fill fixed the scale is still wrong, and the other way round.
    finding, said = found_in(notebook([
        ("ex3_answer", "scores = scores.masked_fill(self.mask[:N, :N] == 0, float(\"-inf\"))",
         "scores = scores * self.mask[:N, :N]"),
        ("ex3_answer", "math.sqrt(self.d_out)", "math.sqrt(N)")]))
    assert finding.repaired and len(finding.places) == 2
    assert said.startswith("In your CausalAttention, 2 lines give values that differ from the expected ones")
    assert "yours are 0: softmax still gives a weight of e^0" in said
    assert "where it should divide by 2 (the square root of d_out = 4)" in said


def test_a_pair_never_rests_on_the_last_computing_step():
    # Softmax first, then the future filled with +inf: replacing the last line repairs any code, so
    # no pair of places is claimed with it.
    finding, said = found_in(notebook(replace={"ex2_answer": (
        "def mask_before_softmax(qkt, d_out):\n"
        "    mask = torch.ones(qkt.shape[-2:]).triu(1).bool()\n"
        "    attn = (qkt / math.sqrt(d_out)).softmax(dim=-1)\n"
        "    return attn.masked_fill(mask, -float('-inf'))\n")}),
        locate=locate_function("mask_before_softmax", lambda rng: [torch.randn(2, 5, 5, generator=rng), 4]))
    assert finding is None or len(finding.places) < 2


def corpus_code(name):
    """The answer cells of a bundled causal_attention corpus entry (answers from public code)."""
    import tomllib

    entries = tomllib.loads((COURSE.root / "exercises" / "causal_attention" / "corpus.toml").read_text())["entry"]
    return next(entry for entry in entries if entry["name"] == name)["code"]


def test_heads_split_by_a_view_alone_are_named_at_that_view():
    # Q.view(B * num_heads, -1, d_head) with no transpose: each "head" holds features of several tokens
    finding, said = found_in(notebook(replace=corpus_code("h44-b-ex6-heads-viewed-without-transpose-and-output-dropout")),
                             locate=ONE_MODULE)
    assert not finding.places and "Q = Q.view(batch_size * self.num_heads, -1, self.d_head)" in said
    assert "it holds the numbers of the queries, but in an order no arrangement of the heads gives" in said
    assert "then move the heads forward with .transpose(1, 2)" in said


def test_values_not_masked_yet_match_masked_ones_where_those_are_not_hidden():
    expected = torch.tensor([[1.0, float("-inf")], [2.0, 3.0]])
    assert localise.hidden_as(torch.tensor([[1.0, 5.0], [2.0, 3.0]]), expected) == ""  # one hidden: too few
    expected = torch.tensor([[1.0, float("-inf"), float("-inf")], [2.0, 3.0, float("-inf")], [1.0, 2.0, 3.0]])
    assert localise.hidden_as(torch.tensor([[1.0, 5.0, 6.0], [2.0, 3.0, 7.0], [1.0, 2.0, 3.0]]), expected) == "not yet"
    assert localise.hidden_as(torch.tensor([[1.0, 0.0, 0.0], [2.0, 3.0, 0.0], [1.0, 2.0, 3.0]]), expected) == "filled"
    assert localise.hidden_as(torch.tensor([[9.0, 0.0, 0.0], [2.0, 3.0, 0.0], [1.0, 2.0, 3.0]]), expected) == ""


def test_a_table_over_the_features_is_named_by_its_shape():
    # queries.T @ keys: a (d_out, d_out) table where the scores are (N, N)
    solutions = COURSE.root / "solutions" / "self_attention.py"
    code = {"ex4_answer": (
        "class SelfAttention_v1(nn.Module):\n"
        "    def __init__(self, d_in, d_out):\n"
        "        super().__init__()\n"
        "        self.W_query = nn.Parameter(torch.rand(d_in, d_out))\n"
        "        self.W_key = nn.Parameter(torch.rand(d_in, d_out))\n"
        "        self.W_value = nn.Parameter(torch.rand(d_in, d_out))\n"
        "\n"
        "    def forward(self, x):\n"
        "        queries, keys, values = x @ self.W_query, x @ self.W_key, x @ self.W_value\n"
        "        scores = queries.T @ keys\n"
        "        return values @ torch.softmax(scores / keys.shape[-1] ** 0.5, dim=-1)\n")}
    finding, said = found_in(notebook(replace=code, solutions=solutions),
                             locate=locate_module("SelfAttention_v1", (3, 4), (6, 3)), solutions=solutions,
                             names=errormodel.step_names(COURSE.root / "exercises" / "self_attention"))
    assert "line 10, `scores = queries.T @ keys`: from the queries and the keys, which are right" in said
    assert "a tensor of shape (4, 4), that is (d_out, d_out), where the attention scores have shape (6, 6)" in said
    assert "divides it by" not in said  # its scale is the reference's: nothing more to say
    # the same table divided by the square root of d_in: a second mistake, measured past the first
    code["ex4_answer"] = code["ex4_answer"].replace("keys.shape[-1] ** 0.5", "self.d_in ** 0.5").replace(
        "super().__init__()\n", "super().__init__()\n        self.d_in = d_in\n")
    _, said = found_in(notebook(replace=code, solutions=solutions),
                       locate=locate_module("SelfAttention_v1", (3, 4), (6, 3)), solutions=solutions,
                       names=errormodel.step_names(COURSE.root / "exercises" / "self_attention"))
    assert "a tensor of shape (4, 4), that is (d_out, d_out)" in said
    assert ("Then line 12, `return values @ torch.softmax(scores / self.d_in ** 0.5, dim=-1)` divides it by 1.73"
            " (the square root of d_in = 3), where the attention scores are divided by 2") in said
    code["ex4_answer"] = code["ex4_answer"].replace("scores / self.d_in ** 0.5", "scores * self.d_in ** 0.5")
    _, said = found_in(notebook(replace=code, solutions=solutions),
                       locate=locate_module("SelfAttention_v1", (3, 4), (6, 3)), solutions=solutions,
                       names=errormodel.step_names(COURSE.root / "exercises" / "self_attention"))
    assert "multiplies it by 1.73 (the square root of d_in = 3), where the attention scores are divided by 2" in said


def test_a_value_computed_right_and_left_unused_is_named_where_it_should_have_been_used():
    # The softmax weights are computed, then the raw scores are masked and renormalised instead
    code = {"ex1_answer": (
        "def mask_after_softmax(qkt, d_out):\n"
        "    weights = torch.softmax(qkt / d_out ** 0.5, dim=-1)\n"
        "    n = qkt.shape[-1]\n"
        "    masked = qkt * torch.tril(torch.ones(n, n))\n"
        "    return masked / masked.sum(dim=-1, keepdim=True)\n")}
    finding, said = found_in(notebook(replace=code), locate=locate_function(
        "mask_after_softmax", lambda rng: [torch.rand(2, 5, 5, generator=rng) + 0.5, 4]))
    assert "line 2, `weights = torch.softmax(qkt / d_out ** 0.5, dim=-1)` computes the attention weights right" in said
    assert "no later line uses that value: line 4 should start from them, and starts from qkt, the input, instead" in said
    # measured on the values, not read from the line: where they are not the input's, "other values"
    qkt = torch.rand(2, 5, 5) + 0.5
    mask = localise.Step(0, 3, "m = torch.tril(torch.ones(n, n))", "tril", (5, 5), torch.ones(5, 5).tril(), [])
    for value, said in ((qkt * mask.value, "qkt, the input,"), (qkt * mask.value / 2, "other values")):
        step = localise.Step(1, 4, "masked = qkt * m", "mul", (2, 5, 5), value, [0])
        finding = localise.Finding(student_steps=[mask, step], inputs=[qkt], input_names=["qkt"])
        assert localise._given(step, finding) == said
