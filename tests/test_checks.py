"""The hidden checks: pass the solutions, fail the stubs, name realistic mistakes."""
import re

import pytest

from autograder.regions import read_regions, solutions_path, strip_solution_markers
from autograder.runner import run_checks
from autograder.student import NamespaceStudent
from autograder.validate import is_clean, validate

ASSIGNMENT = "causal_attention"


@pytest.mark.parametrize("seed", [0, 987654])
def test_validate_is_clean(seed):
    rows = validate(ASSIGNMENT, seed=seed)
    assert is_clean(rows), [r["failures"] for r in rows if r["failures"]]
    assert sum(r["checks"] for r in rows) >= 55


def with_edit(solved, region, old, new):
    """The solved namespace with one answer cell rewritten (a student's mistake)."""
    source = strip_solution_markers(read_regions(solutions_path(ASSIGNMENT))[region])
    assert old in source, f"{old!r} not in {region}"
    namespace = dict(solved)
    exec(compile(source.replace(old, new), region, "exec"), namespace)
    return namespace


MISTAKES = [
    # (grade cell, region, text in the solution, mistaken text, words the feedback must say)
    ("ex1", "ex1_answer", "return weights / weights.sum(dim=-1, keepdim=True)", "return weights",
     "divide each row by its sum"),
    ("ex1", "ex1_answer", "qkt / math.sqrt(d_out), dim=-1", "qkt / math.sqrt(d_out), dim=-2",
     "wrong dimension"),
    ("ex2", "ex2_answer", 'float("-inf")', "0.0", "not zero above the diagonal"),
    ("ex2", "ex2_answer", "masked / math.sqrt(d_out)", "masked", "not scaled"),
    ("ex2", "ex2_answer", "keep == 0", "keep == 1", "mask is inverted"),
    ("ex3", "ex3_answer", "math.sqrt(self.d_out), dim=-1", "math.sqrt(self.d_out), dim=1",
     "wrong dimension"),
    ("ex3", "ex3_answer", "self.mask[:N, :N] == 0", "self.mask == 0", r"self\.mask\[:N, :N\]"),
    ("ex3", "ex3_answer", 'self.register_buffer(\n            "mask", torch.tril(torch.ones(context_length, context_length))\n        )',
     "self.mask = torch.tril(torch.ones(context_length, context_length))", "buffer"),
    ("ex3", "ex3_answer", "weights = self.dropout(weights)\n        return weights @ values",
     "return self.dropout(weights @ values)", "not to the attention weights"),
    ("ex5", "ex5_answer", "self.heads = nn.ModuleList(\n            CausalAttention(d_in, self.d_head, context_length, dropout, qkv_bias)\n            for _ in range(num_heads)\n        )",
     "self.heads = [CausalAttention(d_in, self.d_head, context_length, dropout, qkv_bias) for _ in range(num_heads)]",
     "plain Python list"),
    ("ex5", "ex5_answer", "self.heads = nn.ModuleList(\n            CausalAttention(d_in, self.d_head, context_length, dropout, qkv_bias)\n            for _ in range(num_heads)\n        )",
     "self.heads = nn.ModuleList([CausalAttention(d_in, self.d_head, context_length, dropout, qkv_bias)] * num_heads)",
     "same head object"),
    ("ex6", "ex6_answer", "math.sqrt(d_head)", "math.sqrt(self.d_out)", r"sqrt\(d_out\)"),
    ("ex6", "ex6_answer", ".contiguous().view(", ".view(", r"contiguous"),
    ("ex6", "ex6_answer", "context.transpose(1, 2).contiguous()", "context.contiguous()",
     "merged without"),
    ("ex6", "ex6_answer", "return self.projection(context)", "return context", "projection is missing"),
    ("ex8_model", "ex8_model_answer", "nn.Embedding(context_length, emb_dim)",
     "nn.Embedding(vocab_size, emb_dim)", "context_length rows"),
    ("ex8_model", "ex8_model_answer", "torch.arange(N, device=token_ids.device)", "torch.arange(N)",
     "device"),
    ("ex8_model", "ex8_model_answer", "torch.arange(N, device=token_ids.device)",
     "torch.arange(self.context_length)", r"arange\(N\)"),
    ("ex8_data", "ex8_data_answer", "window[1:]", "window[:-1]", "targets equal the inputs"),
    ("ex8_data", "ex8_data_answer", "len(ids) - context_length, stride", "len(ids) - context_length, 1",
     "windows"),
]


@pytest.mark.parametrize("cell, region, old, new, words", MISTAKES,
                         ids=[f"{m[0]}:{m[4][:24]}" for m in MISTAKES])
def test_mistake_loses_points_with_a_message_that_names_it(solved, cell, region, old, new, words):
    student = NamespaceStudent(with_edit(solved, region, old, new))
    result = run_checks(ASSIGNMENT, student, [cell], seed=3)[cell]
    assert result.fraction < 1, f"{cell}: the mistake was not caught"
    messages = " | ".join(c.message for c in result.checks if not c.passed)
    assert re.search(words, messages), messages


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


def test_feedback_never_shows_check_code(solved, stubs):
    results = run_checks(ASSIGNMENT, NamespaceStudent(stubs), seed=0)
    text = "\n".join(c.message for r in results.values() for c in r.checks)
    assert text  # there are messages to look at
    for leak in ("def test_", "assert ", "student.", "reference.", "Traceback", "/autograder/"):
        assert leak not in text
    assert "This part is not answered yet." in text
