"""The hidden checks in process, on a namespace (the corpus in test_corpus.py covers mistakes)."""
import pytest
import torch

from autograder.course import copy_assignment
from autograder.course.regions import read_regions, strip_solution_markers
from autograder.checks.outcomes import CheckResult, withhold_unearned
from autograder.checks.runner import CheckSession, ChecksBroken, run_checks
from autograder.inside.student import NamespaceStudent

from helpers import assignment_of, new_course

ASSIGNMENT = assignment_of()
NOTEBOOK_QKT = torch.tensor([[0.1, 0.2, 0.3], [0.4, 0.5, 0.6], [0.7, 0.8, 0.9]])  # the notebook's scores


@pytest.mark.parametrize("seed", [0, 987654])
def test_in_process_solutions_pass_and_stubs_fail(solved, stubs, seed):
    """The same checks run against a plain namespace (stock nbgrader, instructors' tools)."""
    on_solutions = run_checks(ASSIGNMENT, NamespaceStudent(solved), seed=seed)
    on_stubs = run_checks(ASSIGNMENT, NamespaceStudent(stubs), seed=seed)
    assert sum(len(r.checks) for r in on_solutions.values()) >= 55
    for cell, result in on_solutions.items():
        assert result.checks and all(c.passed for c in result.checks), [c.message for c in result.checks]
        assert not any(c.passed for c in on_stubs[cell].checks), cell


def with_edit(solved, region, old, new):
    """The solved namespace with one answer cell rewritten (a student's mistake)."""
    source = strip_solution_markers(read_regions(ASSIGNMENT.solutions)[region])
    assert old in source, f"{old!r} not in {region}"
    namespace = dict(solved)
    exec(compile(source.replace(old, new), region, "exec"), namespace)
    return namespace


def test_same_seed_same_feedback(solved):
    student = lambda: NamespaceStudent(with_edit(solved, "ex6_answer", "math.sqrt(d_head)", "math.sqrt(self.d_out)"))
    first = run_checks(ASSIGNMENT, student(), ["ex6"], seed=5)["ex6"]
    second = run_checks(ASSIGNMENT, student(), ["ex6"], seed=5)["ex6"]
    assert [(c.name, c.passed, c.message) for c in first.checks] == \
           [(c.name, c.passed, c.message) for c in second.checks]


def test_hard_coded_outputs_fail_on_another_seed(solved):
    """A function that replays outputs recorded under one seed fails under another."""
    recorded = {}
    real = solved["mask_before_softmax"]

    def recorder(qkt, d_out):
        recorded[(tuple(qkt.shape), d_out)] = real(qkt, d_out)
        return recorded[(tuple(qkt.shape), d_out)]

    run_checks(ASSIGNMENT, NamespaceStudent({**solved, "mask_before_softmax": recorder}), ["ex2"], seed=1)
    replay = lambda qkt, d_out: recorded.get((tuple(qkt.shape), d_out), qkt)
    result = run_checks(ASSIGNMENT, NamespaceStudent({**solved, "mask_before_softmax": replay}), ["ex2"], seed=2)["ex2"]
    assert result.fraction < 0.5


def test_the_notebooks_printed_values_alone_earn_nothing(solved):
    """Code that recognises the notebook's 3x3 scores and returns the printed weights, but
    forgets the scaling elsewhere, gets no credit for the notebook-values check."""
    unscaled = with_edit(solved, "ex1_answer", "qkt / math.sqrt(d_out)", "qkt")["mask_after_softmax"]
    printed = solved["mask_after_softmax"](NOTEBOOK_QKT, 100)

    def sly(qkt, d_out):
        return printed if tuple(qkt.shape) == (3, 3) and d_out == 100 else unscaled(qkt, d_out)

    checks = {c.name: c for c in run_checks(ASSIGNMENT, NamespaceStudent({**solved, "mask_after_softmax": sly}),
                                           ["ex1"], seed=3)["ex1"].checks}
    assert not checks["test_notebook_values"].passed
    assert "also right on other inputs" in checks["test_notebook_values"].message
    honest = run_checks(ASSIGNMENT, NamespaceStudent(solved), ["ex1"], seed=3)["ex1"]
    assert all(c.passed for c in honest.checks)


def test_withheld_only_when_a_needed_check_fails():
    def check(name, passed, needs=()):
        return CheckResult("ex1", name, f"about {name}", 1.0, passed, "" if passed else "wrong", needs)

    earned = withhold_unearned([check("test_book", True, ("test_random",)), check("test_random[2d]", True),
                                check("test_other", False)])
    assert earned[0].passed and earned[0].message == ""
    unearned = withhold_unearned([check("test_book", True, ("test_random",)), check("test_random[2d]", True),
                                  check("test_random[3d]", False)])
    assert not unearned[0].passed and "about test_random" in unearned[0].message
    wrong_anyway = withhold_unearned([check("test_book", False, ("test_random",)), check("test_random[3d]", False)])
    assert wrong_anyway[0].message == "wrong"  # its own message stays


def test_a_fixed_inputs_marker_naming_no_check_is_an_instructors_error(tmp_path, solved):
    course = new_course(tmp_path)
    check_file = course / "exercises" / ASSIGNMENT.name / "checks" / "test_ex1.py"
    check_file.write_text(check_file.read_text().replace('fixed_inputs("test_random_scores")',
                                                         'fixed_inputs("test_random_score")'))
    with pytest.raises(ChecksBroken, match="test_random_score"):
        run_checks(assignment_of(course), NamespaceStudent(solved), ["ex1"], seed=0)


def test_feedback_never_shows_check_code(solved, stubs):
    results = run_checks(ASSIGNMENT, NamespaceStudent(stubs), seed=0)
    text = "\n".join(c.message for r in results.values() for c in r.checks)
    assert text  # there are messages to look at
    for leak in ("def test_", "assert ", "student.", "reference.", "Traceback", "/autograder/"):
        assert leak not in text
    assert "This part is not answered yet." in text


def outcome(results):
    return {cell: [(c.name, c.passed, c.message) for c in r.checks] for cell, r in results.items()}


def test_a_check_session_grades_student_after_student_like_run_checks(solved, stubs, capfd):
    """One pytest session reused for many students (what grading workers do) gives the
    same results as a fresh run, in any order, and prints nothing."""
    mistaken = with_edit(solved, "ex6_answer", "math.sqrt(d_head)", "math.sqrt(self.d_out)")
    session = CheckSession(ASSIGNMENT)
    try:
        for namespace, seed in [(solved, 3), (stubs, 3), (mistaken, 3), (solved, 4), (mistaken, 3)]:
            expected = outcome(run_checks(ASSIGNMENT, NamespaceStudent(namespace), seed=seed))
            assert outcome(session.run(NamespaceStudent(namespace), seed)) == expected
    finally:
        session.close()
    assert session.plugin.results == [] and session.plugin._student is None  # no student kept alive
    with pytest.raises(ChecksBroken):
        session.run(NamespaceStudent(solved), 3)
    assert capfd.readouterr().out == ""


def test_a_check_session_with_broken_checks_says_so(tmp_path, monkeypatch):
    broken = copy_assignment(ASSIGNMENT, tmp_path / "course")
    for check in broken.checks.glob("test_*.py"):
        check.unlink()
    (broken.checks / "test_ex1.py").write_text("import no_such_module\n")
    with pytest.raises(ChecksBroken, match="did not load(.|\n)*no_such_module"):
        CheckSession(broken)
    with pytest.raises(ChecksBroken, match="no_such_module"):
        run_checks(broken, NamespaceStudent({}))


def test_a_check_session_recovers_from_an_interrupted_run(solved):
    """If a run breaks off (a bug of ours, not a student's), that run is reported and the
    next student gets a fresh session with nothing left over."""

    class Interrupting(NamespaceStudent):
        def kind(self, name):
            raise KeyboardInterrupt

    session = CheckSession(ASSIGNMENT)
    try:
        expected = outcome(run_checks(ASSIGNMENT, NamespaceStudent(solved), seed=2))
        with pytest.raises(ChecksBroken, match="KeyboardInterrupt"):
            session.run(Interrupting(solved), 2)
        assert outcome(session.run(NamespaceStudent(solved), 2)) == expected
    finally:
        session.close()


def test_a_students_error_names_their_line_and_says_what_went_wrong():
    """An error in the student's cell names the line it came from (IPython's cell file names)
    and, for common errors, says what went wrong in the student's terms; a misspelled name is
    pointed out."""
    import linecache

    from autograder.checks.outcomes import message_of
    from autograder.wire import StudentError

    source = "import torch\n\ndef scores(x, w):\n    return x @ w\n"
    filename = "<ipython-input-1-0123abcd>"
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    namespace = {}
    exec(compile(source, filename, "exec"), namespace)
    namespace["CausalAtention"] = type("CausalAtention", (), {})
    student = NamespaceStudent(namespace)
    with pytest.raises(StudentError) as raised:
        student.call("scores", torch.ones(6, 3), torch.ones(2, 3))
    assert str(raised.value).endswith("(your line 4: return x @ w)")
    message = message_of(raised)
    assert "a 6x3 and a 2x3 matrix, but the inner sizes (3 and 2) must be equal" in message
    with pytest.raises(StudentError, match="defines `CausalAtention`: is that it, spelled differently"):
        student.new("CausalAttention")


@pytest.mark.parametrize("error, says", [
    ("RuntimeError: shape '[2, 5, 3, 2]' is invalid for input of size 40", "shape [2, 5, 3, 2], which does not hold the tensor's 40 numbers"),
    ("AttributeError: cannot assign module before Module.__init__() call", "Call super().__init__() first"),
    ("TypeError: 'Parameter' object is not callable", "a tensor or nn.Parameter is multiplied"),
    ("RuntimeError: Expected size for first two dimensions of batch2 tensor to be: [4, 4] but got: [4, 10].",
     "first two sizes are [4, 4], and got [4, 10]"),

    ("TypeError: descriptor '__init__' of 'super' object needs an argument", "call super first, super().__init__()"),
    ("ValueError: too many values to unpack (expected 2)", "b, num_tokens, d_in = x.shape"),
    ("ValueError: not enough values to unpack (expected 3, got 2)", "unpacks 2 values into 3 names"),
    ("TypeError: unsupported operand type(s) for -: 'set' and 'str'", "cannot apply - to a set and a str"),
    ("TypeError: int() argument must be a string, a bytes-like object or a real number, not 'list'",
     "was given a list: token ids from tokenizer.encode are already integers"),
    ("ValueError: invalid literal for int() with base 10: 'Hello'", "a token is text"),
    ("TypeError: CausalAttention.__init__() got an unexpected keyword argument 'qkv_bias'",
     "CausalAttention.__init__() has no parameter named qkv_bias"),
    ("TypeError: softmax() missing 1 required positional arguments: \"dim\"", "torch.softmax(scores, dim=-1)"),
    ("TypeError: MyData.__init__() missing 1 required positional argument: 'stride'", "called without 'stride'"),
    ("TypeError: MyData.__init__() takes 3 positional arguments but 5 were given", "takes 3 positional arguments"),
    ("AttributeError: 'CausalAttention' object has no attribute 'd_out'", "asks a CausalAttention for .d_out"),
    ("IndexError: Dimension out of range (expected to be in range of [-2, 1], but got 3)",
     "Dimension 3 does not exist here: this tensor's dimensions are -2 to 1"),
])
def test_common_errors_are_said_in_the_students_terms(error, says):
    from autograder.checks.verdict import hint_for

    assert says in hint_for(f"forward raised {error}")


class Enormous(NamespaceStudent):
    """What a hostile submission's sandbox may report (it answers the probes itself): thousands of
    extra parameters, modules, list attributes and dropouts with long names, one name of 100,000
    characters, modules left behind on .to('meta'), and a kind that is a megabyte of text."""
    NAMES = [f"layer{i:05d}_" + "x" * 200 for i in range(3000)] + ["y" * 100_000]

    def structure(self, handle):
        real = super().structure(handle)
        if not real.get("is_module"):
            return real
        names = self.NAMES
        return {**real, "parameters": {**real["parameters"], **{f"{n}.weight": [3, 3] for n in names}},
                "frozen": [f"{n}.weight" for n in names], "repeated_modules": names, "list_attributes": names,
                "modules": {**real["modules"], **{n: "Linear" * 1000 for n in names}},
                "dropouts": {**real["dropouts"], **{n: 0.5 for n in names}},
                "attributes": {**real["attributes"], "num_heads": "z" * 100_000},
                "parameter_count": real["parameter_count"] + 9 * len(names)}

    def load_parameters(self, handle, parameters):
        report = super().load_parameters(handle, parameters)
        return {**report, "extra": report["extra"] + self.NAMES}

    def meta_forward(self, handle, *inputs):
        report = super().meta_forward(handle, *inputs)
        return {**report, "devices": {**report.get("devices", {}), **{n: "cpu" for n in self.NAMES}}}

    def kind(self, name):
        return "k" * 1_000_000 if name == "mask_before_softmax" else super().kind(name)


def test_an_enormous_reported_structure_gives_a_small_result_that_still_says_what_is_wrong(solved):
    """Messages quote what the student's code reports; however much it reports, each message and
    the whole result stay small (before the bound: messages of 4-9 MB, a result of 51 MB)."""
    import json
    import types

    import nbformat

    from autograder.checks.rootcause import one_cause_per_cell, root_cause_once
    from autograder.grading.submission import build_result
    from autograder.grading.notebook import grade_cells
    from autograder.checks.verdict import MAX_MESSAGE, SHORTENED

    checks = run_checks(ASSIGNMENT, Enormous(solved), ["ex2", "ex3", "ex5", "ex6", "ex8_model"], seed=1)
    messages = {f"{cell}:{c.name}": c.message for cell, r in checks.items() for c in r.checks if c.message}
    assert all(len(m) <= MAX_MESSAGE for m in messages.values()), max(map(len, messages.values()))
    # Still says what is wrong, and how much there was.
    assert "keeps modules in a plain Python list (layer00000_" in messages["ex5:test_heads_registered"]
    assert "\u2026 and 2,993 more): their parameters are invisible" in messages["ex5:test_heads_registered"]
    assert messages["ex6:test_structure"].startswith("The parameters should be ['W_key.weight',")
    assert "stayed behind: register tensors as buffers" in messages["ex6:test_moves_with_model"]
    assert "parameters the exercise does not ask for: layer00000_" in messages["ex3:test_reference_values[full]"]
    shortened = [m for m in messages.values() if SHORTENED in m]  # the megabyte `kind`, cut where it is recorded
    assert shortened and all(m.startswith("`mask_before_softmax` should be a function, but it is kkk")
                             for m in shortened)
    one_cause_per_cell(checks)
    root_cause_once(checks, ASSIGNMENT.builds_on)
    spec = types.SimpleNamespace(assignment=ASSIGNMENT.name, seed=1, isolation="none")
    points = {cell: p for cell, p in grade_cells(nbformat.read(ASSIGNMENT.source_notebook, as_version=4)).items()
              if cell in checks}
    result = build_result(spec, {"student_id": "hostile", "path": "x.ipynb"}, points, checks, [], [], 0.0)
    assert result.score < sum(points.values())
    assert len(json.dumps(result.to_json())) < 100_000


def test_a_long_student_error_is_shortened_where_it_is_recorded_and_keeps_its_hint():
    from autograder.checks.outcomes import message_of
    from autograder.checks.verdict import MAX_MESSAGE, SHORTENED
    from autograder.wire import StudentError

    with pytest.raises(StudentError) as raised:
        raise StudentError("forward raised RuntimeError: mat1 and mat2 shapes cannot be multiplied (6x3 and 2x3)"
                           + " and then" * 200_000)
    message = message_of(raised)
    assert len(message) <= MAX_MESSAGE and SHORTENED in message
    assert message.startswith("Your code failed: forward raised RuntimeError: mat1 and mat2 shapes")
    assert message.endswith("the (in, out) sizes of each layer or weight.")  # the hint, at the end, survives


def test_short_lists_read_as_before_and_long_ones_are_capped():
    from autograder.checks.verdict import MAX_NAMES, brief, listed, shape_text

    small = {"W_query.weight": [6, 5], "projection.bias": [6]}
    assert brief(small) == repr(small) and brief([0.25, 0.25]) == "[0.25, 0.25]" and brief(None) == "None"
    assert listed(["a", "b"]) == "a, b" and shape_text([3, 4]) == "(3, 4)"
    many = {f"name{i}": [3, 3] for i in range(10_000)}
    assert brief(many).endswith(f"\u2026 and {10_000 - MAX_NAMES:,} more}}") and len(brief(many)) < 400
    assert len(listed(["n" * 10**6] * 10**4)) < 1000 and len(brief("z" * 10**6)) < 200
    assert len(shape_text(range(10**5))) < 100


# -- the holes of issue 34: checks that gave points for nothing ------------------------------------
@pytest.fixture(scope="module")
def traced():
    """The solutions run as the sandbox runs a notebook: with every module call noted."""
    import contextlib
    import io

    from autograder.course.reference import solved_namespace
    from autograder.inside.calls import ModuleCalls

    with ModuleCalls() as calls, contextlib.redirect_stdout(io.StringIO()):
        namespace = solved_namespace(ASSIGNMENT.solutions)
    return namespace, calls


def failed(results, cell):
    return {c.name: c.message for c in results[cell].checks if not c.passed}


def test_module_calls_trace_a_tensor_to_the_call_that_made_it_and_make_it_again():
    from autograder.inside.calls import ModuleCalls

    class Noisy(torch.nn.Module):  # dropout in training mode: a replay needs the same random state
        def __init__(self):
            super().__init__()
            self.linear, self.dropout = torch.nn.Linear(4, 4), torch.nn.Dropout(0.5)

        def forward(self, x):
            return self.dropout(self.linear(x))

    with ModuleCalls() as calls:
        model = Noisy()
        kept = model(torch.randn(3, 4)).detach()  # detach() shares the output's storage
        for _ in range(200):  # outputs that die leave no notes behind
            model(torch.randn(3, 4))
    assert len(calls.notes) < 64
    namespace = {"Noisy": Noisy, "kept": kept, "made_up": torch.randn(3, 4), "model": model}
    student = NamespaceStudent(namespace, calls=calls)
    origin = student.origin("kept", "Noisy")
    assert origin == {"watched": True, "found": True, "handle": origin["handle"], "type": "Noisy",
                      "is_class": True, "inputs": [[3, 4]], "training": True, "changed": False}
    assert torch.equal(student.replay(origin["handle"]), kept)  # the same weights dropped
    kept.mul_(1)  # an in-place change, even one that keeps the values, is seen (version counter)
    assert student.origin("kept", "Noisy")["changed"] is True
    assert not torch.equal(student.forward(student.new("Noisy"), torch.randn(3, 4), train=True), kept)
    assert student.origin("made_up", "Noisy") == {"watched": True, "found": False}
    assert NamespaceStudent(namespace).origin("kept", "Noisy") == {"watched": False}
    model(torch.randn(3, 4))  # after the cells ran nothing more is noted
    with ModuleCalls() as direct:  # model.forward(x) skips the hooks; the class notes it itself
        class Plain(torch.nn.Module):
            def forward(self, x):
                return x * 2

        forwarded = Plain().forward(torch.ones(2))
    assert torch.nn.Module.__dict__.get("__init_subclass__") is None  # put back
    traced_forward = NamespaceStudent({"Plain": Plain, "forwarded": forwarded}, calls=direct)
    assert traced_forward.origin("forwarded", "Plain")["is_class"]
    # the dropout inside returned the same tensor: the call of the class asked for is the one traced
    assert [type(note[1]).__name__ for note in calls.made(kept)] == ["Dropout", "Noisy"]
    assert student.origin("kept", "Noisy")["type"] == "Noisy"


@pytest.mark.parametrize("cell, name, shape", [("ex4", "causal_embeddings", (20, 100, 768)),
                                               ("ex5", "multihead_embeddings", (20, 100, 768)),
                                               ("ex7", "onemodule_embeddings", (40, 80, 1536))])
def test_a_placeholder_of_the_right_shape_is_not_a_models_output(traced, cell, name, shape):
    namespace, calls = traced
    honest = run_checks(ASSIGNMENT, NamespaceStudent(namespace, calls=calls), [cell], seed=0)
    assert failed(honest, cell) == {}
    placeholder = run_checks(ASSIGNMENT, NamespaceStudent({**namespace, name: torch.randn(shape)}, calls=calls),
                             [cell], seed=0)
    assert "did not come out of" in failed(placeholder, cell)[f"test_{name}"]
    changed = namespace[name].clone()
    changed[0, 0, 0] += 1.0  # not what the model returned any more
    tampered = run_checks(ASSIGNMENT, NamespaceStudent({**namespace, name: changed}, calls=calls), [cell], seed=0)
    assert "did not come out of" in failed(tampered, cell)[f"test_{name}"]


    class ChangedInPlace(NamespaceStudent):  # as origin answers once the variable was changed in place
        def origin(self, *args):
            return {**super().origin(*args), "changed": True}

    saved = namespace[name].clone()
    namespace[name].mul_(1.5)  # changed in place: the model's call still made it, its values differ now
    try:
        message = failed(run_checks(ASSIGNMENT, ChangedInPlace(namespace, calls=calls), [cell], seed=0), cell)[f"test_{name}"]
    finally:
        namespace[name].copy_(saved)
    assert "changed in place" in message and "not what the exercise's" in message  # its values were made again
    said_only = run_checks(ASSIGNMENT, ChangedInPlace(namespace, calls=calls), [cell], seed=0)
    assert failed(said_only, cell) == {}  # a claim costs nothing either: the values are right


def test_exercise_1s_method_in_exercise_2_loses_points(solved):
    ex1_method = with_edit(solved, "ex2_answer", '''    masked = qkt.masked_fill(keep == 0, float("-inf"))
    return torch.softmax(masked / math.sqrt(d_out), dim=-1)''', '''    weights = torch.softmax(qkt / math.sqrt(d_out), dim=-1) * keep
    return weights / weights.sum(dim=-1, keepdim=True)''')
    lost = failed(run_checks(ASSIGNMENT, NamespaceStudent(ex1_method), ["ex2"], seed=0), "ex2")
    assert list(lost) == ["test_future_far_above_past"]
    assert "softmax ran before the mask" in lost["test_future_far_above_past"]
    assert failed(run_checks(ASSIGNMENT, NamespaceStudent(solved), ["ex2"], seed=0), "ex2") == {}
    guarded = with_edit(solved, "ex2_answer", '''    masked = qkt.masked_fill(keep == 0, float("-inf"))
    return torch.softmax(masked / math.sqrt(d_out), dim=-1)''', '''    weights = torch.softmax(qkt / math.sqrt(d_out), dim=-1) * keep
    return weights / (weights.sum(dim=-1, keepdim=True) + 1e-12)''')  # no 0 / 0: rows of zeros instead
    lost = failed(run_checks(ASSIGNMENT, NamespaceStudent(guarded), ["ex2"], seed=0), "ex2")
    assert "softmax ran before the mask" in lost["test_future_far_above_past"]
    diagonal = with_edit(solved, "ex2_answer", "torch.ones(n, n, device=qkt.device))",
                         "torch.ones(n, n, device=qkt.device), diagonal=-1)")  # NaN in the first row only
    lost = failed(run_checks(ASSIGNMENT, NamespaceStudent(diagonal), ["ex2"], seed=0), "ex2")
    assert "hides the diagonal" in lost["test_future_far_above_past"]


def test_an_output_independent_of_the_input_earns_no_no_leak_points(solved):
    nothing = with_edit(solved, "ex3_answer", "        B, N, _ = x.shape\n",
                        "        B, N, _ = x.shape\n        return torch.zeros(B, N, self.d_out) + 0 * x.sum()\n")
    lost = failed(run_checks(ASSIGNMENT, NamespaceStudent(nothing), ["ex3"], seed=0), "ex3")
    assert "does not depend on the input" in lost["test_no_future_leak"]


def test_attention_that_ignores_queries_and_keys_earns_no_property_points(solved):
    uniform = with_edit(solved, "ex3_answer", '''        weights = torch.softmax(scores / math.sqrt(self.d_out), dim=-1)''', '''        keep = self.mask[:N, :N]
        weights = (keep / keep.sum(dim=-1, keepdim=True)).expand(B, N, N)''')
    lost = failed(run_checks(ASSIGNMENT, NamespaceStudent(uniform), ["ex3"], seed=0), "ex3")
    assert "ignore the queries and keys" in lost["test_dropout_on_weights"]
    assert "ignore the queries and keys" in lost["test_attention_weights"]
    # Causal, yet no leak earns nothing: the property is only worth something of real attention (issue 43)
    assert "ignore the queries and keys" in lost["test_no_future_leak"]
    assert "ignore the queries and keys" in lost["test_moves_with_model"]


@pytest.mark.parametrize("got, expected, says", [
    ((1, 5), (5,), "an extra dimension of size 1"),
    ((5,), (5, 1), "a dimension of size 1 is missing"),
    ((3, 6), (6, 3), "the same sizes in another order"),
    ((2, 5), (5,), None),  # a batch of two is not a reshape: nothing simple to say
])
def test_a_wrong_shape_says_how_it_differs_when_that_is_simple(got, expected, says):
    """Issue 44, item 4: a shape message says what the sizes show (an extra 1, a missing 1, a transpose)."""
    from autograder.checks.verdict import expect_tensor

    with pytest.raises(pytest.fail.Exception) as failed:
        expect_tensor(torch.zeros(got), "The output", shape=expected)
    message = str(failed.value)
    assert message.startswith(f"The output: expected shape {expected}, got {got}")
    assert (says in message) if says else message.endswith(f"got {got}.")
