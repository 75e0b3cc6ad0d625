"""What students read keeps its promises (issue 34).

- Every visible check cell starts with "# Check your answer" and passes on its own: in a fresh
  namespace holding only the given cells before it and the answer cells of its own exercise
  (and of the exercises it builds on, `[builds_on]`), filled with the reference solutions. A
  student who restarts the kernel at Exercise 6, or whose Exercise 1 is wrong, is not told
  that a right Exercise 6 or 2 is wrong.
- The release states every name, layer and shape the hidden checks require.
- The worked numbers in the self-attention prose are what the reference computes.
- The concept questions' rubric reaches the TA (source/, and the graded notebook formgrader
  shows) and never the student (release/).
"""
import contextlib
import io
import math
import re

import nbformat
import pytest
import torch

from autograder.authoring.examples import filled_notebook
from autograder.course.reference import solved_namespace
from autograder.grading.notebook import sanitize

from helpers import COURSE

ASSIGNMENTS = COURSE.names()
HEADER = "# Check your answer"


def nbgrader_meta(cell):
    return cell.metadata.get("nbgrader", {})


def is_check(cell):
    meta = nbgrader_meta(cell)
    return cell.cell_type == "code" and meta.get("locked") and not meta.get("grade")


def is_graded(cell):
    meta = nbgrader_meta(cell)
    return cell.cell_type == "code" and meta.get("grade") and not meta.get("solution")


def is_answer(cell):
    return cell.cell_type == "code" and nbgrader_meta(cell).get("solution")


def is_given(cell):
    return cell.cell_type == "code" and not nbgrader_meta(cell)


def release(name):
    return nbformat.read(COURSE.assignment(name).release_notebook, as_version=4)


def sections(nb):
    """{graded cell id: the cells of its exercise}, from the cell after the previous graded cell
    through its own graded cell (prose, given code, answers, the check)."""
    found, current = {}, []
    for cell in nb.cells:
        current.append(cell)
        if is_graded(cell):
            found[nbgrader_meta(cell)["grade_id"]] = current
            current = []
    return found


def upstream(assignment, grade_id):
    """grade_id and every graded cell it builds on, transitively."""
    table, seen, todo = assignment.builds_on, set(), [grade_id]
    while todo:
        cell = todo.pop()
        if cell not in seen:
            seen.add(cell)
            todo.extend(table.get(cell, ()))
    return seen


def check_cells():
    """(assignment, check cell id, graded cell id) for every visible check."""
    found = []
    for name in ASSIGNMENTS:
        for grade_id, cells in sections(release(name)).items():
            found += [(name, nbgrader_meta(c)["grade_id"], grade_id) for c in cells if is_check(c)]
    return found


CHECKS = check_cells()


def test_every_exercise_has_a_visible_check():
    assert {name for name, _, _ in CHECKS} == set(ASSIGNMENTS)
    for name in ASSIGNMENTS:
        graded = {nbgrader_meta(c)["grade_id"] for c in release(name).cells if is_graded(c)}
        autograded = {g for g in graded if not g.startswith("q")}
        assert {g for n, _, g in CHECKS if n == name} == autograded, name


@pytest.mark.parametrize("name, check_id, grade_id", CHECKS, ids=[f"{n}-{g}" for n, _, g in CHECKS])
def test_check_cell_starts_with_check_your_answer(name, check_id, grade_id):
    cell = next(c for c in release(name).cells if nbgrader_meta(c).get("grade_id") == check_id)
    assert cell.source.splitlines()[0] == HEADER, f"{name} {grade_id}: {cell.source.splitlines()[0]!r}"


def alone(name, check_id, grade_id):
    """The cells a student who restarted the kernel runs before this check: every given cell
    above it, and the answer cells of its own exercise and of those it builds on."""
    assignment = COURSE.assignment(name)
    nb = filled_notebook(release(name), assignment, {})
    owner = {}  # answer cell id -> its exercise's graded cell
    for exercise, cells in sections(nb).items():
        owner.update({nbgrader_meta(c)["grade_id"]: exercise for c in cells if is_answer(c)})
    wanted = upstream(assignment, grade_id)
    cells = []
    for cell in nb.cells:
        if nbgrader_meta(cell).get("grade_id") == check_id:
            return cells, cell
        if is_given(cell) or (is_answer(cell) and owner[nbgrader_meta(cell)["grade_id"]] in wanted):
            cells.append(cell)
    raise AssertionError(f"no check cell {check_id}")


def run_cells(cells, namespace):
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        for cell in cells:
            exec(compile(cell.source, f"<{nbgrader_meta(cell).get('grade_id', cell.get('id'))}>", "exec"), namespace)
    return printed.getvalue()


@pytest.mark.parametrize("name, check_id, grade_id", CHECKS, ids=[f"{n}-{g}" for n, _, g in CHECKS])
def test_check_cell_passes_on_its_own(name, check_id, grade_id):
    before, check = alone(name, check_id, grade_id)
    namespace = {"__name__": "__main__"}
    run_cells(before, namespace)
    printed = run_cells([check], namespace)
    assert re.search(r"Exercise \w+ looks right\.", printed), printed


def test_a_check_that_uses_another_exercise_is_caught():
    """The namespace really holds only what it should: a check that used Exercise 1's function
    or another check cell's variable (as Exercise 2's once did) fails there."""
    before, _ = alone("causal_attention", *next((c, g) for n, c, g in CHECKS if g == "ex2"))
    namespace = {"__name__": "__main__"}
    run_cells(before, namespace)
    assert "mask_before_softmax" in namespace
    assert "mask_after_softmax" not in namespace and "QKT" not in namespace


# -- the release states what the hidden checks require --------------------------------
# names the checks look up in the student's notebook: NAME = "...", student.new("..."), and
# helpers called as f(student, "...")
PROBED = re.compile(r"""(?:NAME\s*=\s*|student\.\w+\(\s*|\(student,\s*(?:reference,\s*rng,\s*)?)["']([A-Za-z_]\w*)["']""")
PARAMETER = re.compile(r"""["']((?:[A-Za-z_]\w*\.)+)(weight|bias)["']""")
EXPECTED_PARAMETERS = re.compile(r"expect_parameters\([^{]*\{([^}]*)\}")  # {"W_query": (5, 3), ...}
EMBEDDINGS = re.compile(r"""expect_embeddings\(student,\s*reference,\s*rng,\s*["'](\w+)["'],\s*(\([\d, ]+\))""")

# The layers each check builds or names in its messages, as the check writes them: the
# release must say how to make each one (issue 34: Exercise 8a once named its layers but
# not what they are, and a prediction layer without its bias scored 0.4 of 3).
LAYERS = {
    ("causal_attention", "ex3"): ["nn.Linear(d_in, d_out, bias=qkv_bias)", "nn.Dropout(dropout)",
                                  "register_buffer('mask'"],
    ("causal_attention", "ex5"): ["nn.ModuleList"],
    ("causal_attention", "ex8_model"): ["nn.Embedding(vocab_size, emb_dim)", "nn.Embedding(context_length, emb_dim)",
                                        "MultiHeadAttentionOneModule(emb_dim, att_dim, num_heads, context_length)",
                                        "nn.Linear(att_dim, vocab_size)"],
    ("self_attention", "ex4"): ["nn.Parameter(torch.rand(d_in, d_out))"],
    ("self_attention", "ex5"): ["nn.Linear(d_in, d_out, bias=qkv_bias)"],
    ("self_attention", "ex7"): ["nn.Parameter(torch.rand(d_in, d_out_kq))", "nn.Parameter(torch.rand(d_in, d_out_v))"],
}
# Attributes the checks read through a shared helper (common.py), by name.
ATTRIBUTES = {("causal_attention", "ex3"): ["mask", "dropout"], ("causal_attention", "ex5"): ["heads"],
              ("causal_attention", "ex6"): ["mask", "dropout", "projection"]}


def flat(text):
    """Whitespace collapsed, string literals split over lines joined, one kind of quote: a
    wrapped line of prose or of a check's message still matches."""
    text = re.sub(r"\"\s*\n\s*f?\"", "", text)
    return re.sub(r"\s+", " ", text).replace('"', "'")


def required(name, grade_id):
    """What the hidden checks of one graded cell need the student to have made:
    (names, {attribute: needs a bias}, {variable: shape text})."""
    text = (COURSE.assignment(name).checks / f"test_{grade_id}.py").read_text()
    names = set(PROBED.findall(text))
    attributes = {}  # the module's own attributes; those of a submodule (att.W_key) are its exercise's
    for path, kind in PARAMETER.findall(text):
        parts = path.rstrip(".").split(".")
        attributes[parts[0]] = attributes.get(parts[0], False) or (kind == "bias" and len(parts) == 1)
    for listed in EXPECTED_PARAMETERS.findall(text):
        for attribute in re.findall(r"""["'](\w+)["']\s*:""", listed):
            attributes.setdefault(attribute, False)
    shapes = dict(EMBEDDINGS.findall(text))
    return names, attributes, shapes


EXERCISES = [(name, grade_id) for name in ASSIGNMENTS for grade_id in sections(release(name))
             if (COURSE.assignment(name).checks / f"test_{grade_id}.py").is_file()]


@pytest.mark.parametrize("name, grade_id", EXERCISES, ids=[f"{n}-{g}" for n, g in EXERCISES])
def test_release_states_what_the_checks_require(name, grade_id):
    cells = sections(release(name))[grade_id]
    text = "\n".join(c.source for c in cells)
    names, attributes, shapes = required(name, grade_id)
    assert names, "the checks probe nothing by name: is the pattern out of date?"
    for word in names | set(attributes):
        assert re.search(rf"\b{re.escape(word)}\b", text), f"{name} {grade_id}: the checks need `{word}`"
    for attribute, bias in attributes.items():
        if not bias:
            continue
        # a bias is stated in the prose, or visible in given code as an nn.Linear left with its default
        lines = [line for c in cells for line in c.source.splitlines() if re.search(rf"\b{attribute}\b", line)]
        assert any("bias" in line or ("nn.Linear(" in line and "bias=False" not in line) for line in lines), (
            f"{name} {grade_id}: the checks need {attribute} with a bias, and the text does not say so")
    for variable, shape in shapes.items():
        assert variable in text and shape in text, f"{name} {grade_id}: `{variable}` of shape {shape}"
    checks_text = flat((COURSE.assignment(name).checks / f"test_{grade_id}.py").read_text()
                       + (COURSE.assignment(name).checks / "common.py").read_text())
    for attribute in ATTRIBUTES.get((name, grade_id), []):
        assert re.search(rf"\b{attribute}\b", checks_text), f"the checks of {grade_id} no longer use `{attribute}`"
        assert re.search(rf"\b{attribute}\b", text), f"{name} {grade_id}: the checks need `{attribute}`"
    for layer in LAYERS.get((name, grade_id), []):
        assert flat(layer) in checks_text, f"{layer} is no longer what the checks of {grade_id} ask for"
        assert flat(layer) in flat(text), f"{name} {grade_id}: the release does not say {layer}"


def test_exercise_8a_states_its_layers_and_the_bias():
    """The checks build BadLM_V2 and compare exactly these parameters; the text names each."""
    names, attributes, _ = required("causal_attention", "ex8_model")
    assert {"token_embs", "pos_embs", "att", "prediction_layer"} <= set(attributes)
    assert attributes["prediction_layer"]  # the checks want its bias
    text = "\n".join(c.source for c in sections(release("causal_attention"))["ex8_model"] if c.cell_type == "markdown")
    row = next(line for line in text.splitlines() if "`prediction_layer`" in line)
    assert "nn.Linear(att_dim, vocab_size)" in row and "bias" in row and "bias=False" not in row.replace("no `bias=False`", "")


# -- worked numbers in the prose --------------------------------------------------------
def numbers(tensor):
    return "[" + ", ".join(f"{v:.4f}" for v in tensor.tolist()) + "]"


def test_worked_numbers_are_what_the_reference_computes():
    with contextlib.redirect_stdout(io.StringIO()):
        ref = solved_namespace(COURSE.assignment("self_attention").solutions)
    prose = "\n".join(c.source for c in release("self_attention").cells if c.cell_type == "markdown")
    inputs, x2 = ref["inputs"], ref["inputs"][1]
    plain = inputs @ x2
    weights = torch.softmax(plain, dim=0)
    expected = [numbers(plain), numbers(weights), numbers(weights @ inputs)]
    assert torch.allclose(ref["context_vectors"](inputs)[1], weights @ inputs)
    torch.manual_seed(123)
    v1 = ref["SelfAttention_v1"](3, 2)
    with torch.no_grad():
        q2, keys, values = x2 @ v1.W_query, inputs @ v1.W_key, inputs @ v1.W_value
        omega = q2 @ keys.T
        alpha = torch.softmax(omega / math.sqrt(2), dim=-1)
        assert torch.allclose(v1(inputs)[1], alpha @ values)
    expected += [numbers(q2), numbers(omega), numbers(alpha), numbers(alpha @ values)]
    torch.manual_seed(123)
    cross = ref["CrossAttention"](3, 2, 4)
    with torch.no_grad():
        v = inputs @ cross.W_value
        assert v.shape == (6, 4)
        expected += [numbers(v[1]), numbers(cross(inputs, inputs)[1])]
    for text in expected:
        assert text in prose, f"the prose should show {text}"


# -- the concept questions' rubric ------------------------------------------------------
RUBRIC = "Rubric for the TA"


def rubric_cells(nb):
    return [c for c in nb.cells if RUBRIC in c.source]


def test_the_rubric_is_in_source_and_not_in_the_release():
    assignment = COURSE.assignment("causal_attention")
    source = nbformat.read(assignment.source_notebook, as_version=4)
    [cell] = rubric_cells(source)
    assert cell.cell_type == "markdown" and nbgrader_meta(cell).get("locked")
    assert not nbgrader_meta(cell).get("grade") and "points" not in nbgrader_meta(cell)  # no points of its own
    for question in ("Q1", "Q2", "Q3", "Q4"):
        assert f"**{question}," in cell.source
    text = assignment.release_notebook.read_text()
    assert RUBRIC not in text and "MARK SCHEME" not in text
    released = next(c for c in release("causal_attention").cells
                    if nbgrader_meta(c).get("grade_id") == nbgrader_meta(cell)["grade_id"])
    assert released.source.strip() and released.source in cell.source  # students keep the first line


def test_grading_restores_the_rubric_for_formgrader():
    """The graded notebook (what formgrader shows the TA) holds the rubric; the student's
    untouched rubric cell is no tampering."""
    assignment = COURSE.assignment("causal_attention")
    source = nbformat.read(assignment.source_notebook, as_version=4)
    submission = filled_notebook(release("causal_attention"), assignment, {})
    clean = sanitize(submission, source, release("causal_attention"))
    assert clean.tampering == []
    assert len(rubric_cells(clean.notebook)) == 1
