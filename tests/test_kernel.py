"""The entry point nbgrader's hidden test cells call, and the probe API under it."""
import sys
import warnings

import pytest
import torch

from autograder.checks.kernel import grade_here
from autograder.inside.student import NamespaceStudent, StudentError, to_plain

ASSIGNMENT = "causal_attention"


def test_grade_here_prints_feedback_returns_score_and_keeps_stderr_clean(solved, capsys):
    real = solved["mask_before_softmax"]

    def noisy(qkt, d_out):
        warnings.warn("student debugging")
        print("debug", file=sys.stderr)
        return real(qkt, d_out)

    score = grade_here(ASSIGNMENT, "ex2", {**solved, "mask_before_softmax": noisy}, points=2)
    out, err = capsys.readouterr()
    assert err == ""
    assert score == 2 and repr(score) == "2"
    assert "ex2: 2 / 2 points" in out and "[PASS]" in out


def test_grade_here_gives_partial_credit_as_a_bare_number(solved, capsys):
    wrong = lambda qkt, d_out: torch.softmax(qkt, dim=-1)  # no mask, no scale
    score = grade_here(ASSIGNMENT, "ex2", {**solved, "mask_before_softmax": wrong}, points=2)
    assert score == 0 and repr(score) == "0"
    assert "[FAIL]" in capsys.readouterr().out


def test_grade_here_survives_broken_checks(capsys):
    score = grade_here(ASSIGNMENT, "no_such_cell", {}, points=3)
    assert score == 0
    assert "could not run" in capsys.readouterr().out


def test_to_plain_strips_tensor_subclasses_and_rejects_objects():
    class Sneaky(torch.Tensor):
        def __eq__(self, other):
            return True

    value = to_plain(torch.ones(2).as_subclass(Sneaky))
    assert type(value) is torch.Tensor
    assert to_plain([torch.zeros(1), 3, "x"])[1:] == [3, "x"]
    with pytest.raises(StudentError, match="not a tensor or plain value"):
        to_plain(object())


def test_probes_report_student_errors_without_raising_them():
    student = NamespaceStudent({"f": lambda x: 1 / 0})
    with pytest.raises(StudentError, match="ZeroDivisionError"):
        student.call("f", torch.ones(1))
    with pytest.raises(StudentError, match="not defined"):
        student.call("g")
    assert student.kind("g") == "missing"


def test_structure_names_buffers_and_their_values_come_on_request(solved):
    """A GPT-2 sized mask is 4 MB: `structure` gives its shape, `buffers` its values."""
    student = NamespaceStudent(solved)
    handle = student.new("MultiHeadAttentionOneModule", (768, 768, 12, 1024))
    structure = student.structure(handle)
    assert structure["buffers"] == {"mask": [1024, 1024]}
    assert structure["parameter_count"] == 2_360_064
    small = student.new("CausalAttention", (3, 2, 4))
    mask = student.buffers(small)["mask"]
    assert type(mask) is torch.Tensor and torch.equal(mask != 0, torch.ones(4, 4).tril().bool())


def test_build_is_new_and_load_parameters_in_one_probe(solved):
    student = NamespaceStudent({**solved, "broken": lambda: None, "Crashes": type("Crashes", (), {
        "__init__": lambda self, *args: 1 / 0})})
    assert student.build("Nothing", (), {}, {}) == {"kind": "missing"}
    assert student.build("broken", (), {}, {}) == {"kind": "function"}
    weight = torch.full((2, 3), 0.5)
    built = student.build("CausalAttention", (3, 2, 4), {}, {"W_query.weight": weight, "extra.weight": weight})
    assert built["report"] == {"missing": ["extra.weight"], "wrong_shape": {},
                               "extra": ["W_key.weight", "W_value.weight"]}
    assert torch.equal(student.parameters(built["handle"])["W_query.weight"], weight)
    with pytest.raises(StudentError, match="ZeroDivisionError"):
        student.build("Crashes", (1,), {}, {})


def test_gpt2_tokenizer_fails_with_a_clear_message_offline(solved, monkeypatch):
    import tiktoken

    def offline(name):
        raise ConnectionError("no network")

    monkeypatch.setattr(tiktoken, "get_encoding", offline)
    with pytest.raises(RuntimeError, match="Pass a tokenizer yourself"):
        solved["my_batch"]("some text here", batch_size=1, context_length=2, stride=1)
