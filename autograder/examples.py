"""Example submissions for the demo and the tests, made from the release notebook.

Each student fills in the release's answer cells from the solutions, then applies
some edits: a realistic mistake, a crash, or nothing at all.
"""
import nbformat

from .regions import read_regions, solutions_path, strip_solution_markers

# student id -> {answer cell: [(text in the solution, replacement)]}; None = untouched release
EXAMPLES = {
    "ada": {},  # everything right
    "ben": {  # softmax over the wrong dimension in Ex3, sqrt(d_out) per head in Ex6
        "ex3_answer": [("scores / math.sqrt(self.d_out), dim=-1)", "scores / math.sqrt(self.d_out), dim=1)")],
        "ex6_answer": [("math.sqrt(d_head)", "math.sqrt(self.d_out)")],
    },
    "cy": {  # forgets .contiguous(); Ex1 not renormalised
        "ex6_answer": [(".contiguous().view(", ".view(")],
        "ex1_answer": [("return weights / weights.sum(dim=-1, keepdim=True)", "return weights")],
    },
    "dee": None,  # handed in the release untouched
}

# The same four kinds of student for the first assignment.
SELF_ATTENTION_EXAMPLES = {
    "ada": {},
    "ben": {  # softmax over the queries in Ex3, sqrt(d_in) in Ex4
        "ex3_answer": [("inputs.T, dim=-1)", "inputs.T, dim=0)")],
        "ex4_answer": [("math.sqrt(keys.shape[-1])", "math.sqrt(x.shape[-1])")],
    },
    "cy": {  # softmax_stable without the shift; Ex6 copies without transposing
        "ex2_answer": [("shifted = x - x.max(dim=dim, keepdim=True).values", "shifted = x")],
        "ex6_answer": [("sa_v2.W_query.weight.T", "sa_v2.W_query.weight")],
    },
    "dee": None,
}

EXAMPLES_BY_ASSIGNMENT = {"causal_attention": EXAMPLES, "self_attention": SELF_ATTENTION_EXAMPLES}

CONCEPT_ANSWER = "Masking hides future tokens so that each position only uses the past."


def filled_notebook(release_nb, assignment, edits):
    regions = read_regions(solutions_path(assignment))
    nb = nbformat.from_dict(release_nb)
    for cell in nb.cells:
        meta = cell.metadata.get("nbgrader", {})
        if not meta.get("solution"):
            continue
        if cell.cell_type == "markdown":
            cell.source = CONCEPT_ANSWER
            continue
        source = strip_solution_markers(regions[meta["grade_id"]])
        for old, new in edits.get(meta["grade_id"], []):
            if old not in source:
                raise ValueError(f"example edit {old!r} no longer fits {meta['grade_id']}")
            source = source.replace(old, new)
        cell.source = source
    return nb


def write_examples(assignment, release_file, submitted_dir):
    """Write submitted/<student>/<assignment>/<assignment>.ipynb for every example."""
    release_nb = nbformat.read(release_file, as_version=4)
    paths = {}
    for student, edits in EXAMPLES_BY_ASSIGNMENT[assignment].items():
        nb = release_nb if edits is None else filled_notebook(release_nb, assignment, edits)
        path = submitted_dir / student / assignment / f"{assignment}.ipynb"
        path.parent.mkdir(parents=True, exist_ok=True)
        nbformat.write(nb, path)
        paths[student] = path
    return paths
