"""exercises/<a>/notebook.md + solutions/<a>.py -> source/<a>/<a>.ipynb (nbgrader source).

The exercise file is Markdown. Prose becomes markdown cells; fenced blocks whose
info string names a role become cells (any other fence stays in the prose):

    ```python given                 code students get as is
    ```python given=REGION          the same, taken from the solutions file
    ```python answer=REGION         an answer cell: the solutions region, whose
                                    BEGIN/END SOLUTION part nbgrader stubs out
    ```python check                 visible tests, read-only
    ```python graded=ID points=P    graded cell: hidden checks run here
    ```markdown question=ID points=P   a manually graded written answer
    ```markdown readonly=ID         read-only prose; a `### BEGIN MARK SCHEME` ...
                                    `### END MARK SCHEME` region in it is for TAs:
                                    nbgrader leaves it out of the release, and grading
                                    restores the cell, so formgrader shows it

A line `<!-- split -->` splits prose into two markdown cells.
"""
import shlex

import nbformat
from markdown_it import MarkdownIt

from autograder.course import write_atomically

from autograder.course.regions import read_regions

ROLES = ("given", "answer", "check", "graded", "question", "readonly")
SPLIT = "<!-- split -->"


class ExerciseError(ValueError):
    """The exercise file is malformed; the message says where."""


def parse_fence_info(info):
    """'python graded=ex1 points=2' -> ('python', {'graded': 'ex1', 'points': '2'})."""
    words = shlex.split(info)
    if not words:
        return "", {}
    options = {}
    for word in words[1:]:
        key, _, value = word.partition("=")
        options[key] = value
    return words[0], options


def role_of(options):
    roles = [role for role in ROLES if role in options]
    if len(roles) > 1:
        raise ExerciseError(f"a cell can have one role, got {roles}")
    return roles[0] if roles else None


def nbgrader_metadata(grade_id, *, grade=False, solution=False, locked=False, points=None):
    meta = {
        "grade": grade, "grade_id": grade_id, "locked": locked,
        "schema_version": 3, "solution": solution, "task": False,
    }
    if points is not None:
        meta["points"] = points
    return {"nbgrader": meta}


def graded_cell_source(assignment, grade_id, points):
    noun = "point" if points == 1 else "points"
    return "\n".join([
        f"# Graded cell ({points:g} {noun}): hidden checks run here when your notebook",
        "# is graded. Nothing to do; please leave this cell as it is.",
        "### BEGIN HIDDEN TESTS",
        "from autograder.checks.kernel import grade_here",
        f"grade_here({assignment!r}, {grade_id!r}, globals(), points={points!r})",
        "### END HIDDEN TESTS",
    ])


def _points(options, where):
    try:
        points = float(options["points"])
    except (KeyError, ValueError):
        raise ExerciseError(f"{where}: needs points=<number>") from None
    return int(points) if points.is_integer() else points


def build_cells(assignment, text, regions):
    """Turn the exercise text into nbformat cells; fail loudly on any mistake."""
    lines = text.splitlines()
    cells, used_ids = [], set()
    cursor = 0
    counter = {"markdown": 0, "code": 0, "check": 0}

    def cell_id(kind):
        counter[kind] += 1
        return f"{kind}-{counter[kind]:02d}"

    def flush_prose(upto):
        chunk = "\n".join(lines[cursor:upto])
        for part in chunk.split(SPLIT):
            part = part.strip("\n")
            if part.strip():
                cells.append(nbformat.v4.new_markdown_cell(part, id=cell_id("markdown")))

    def unique(grade_id, where):
        if grade_id in used_ids:
            raise ExerciseError(f"{where}: id {grade_id!r} is used twice")
        used_ids.add(grade_id)
        return grade_id

    def region(name, where):
        if name not in regions:
            raise ExerciseError(f"{where}: no region {name!r} in {assignment.solutions.name}")
        return regions[name]

    for token in MarkdownIt().parse(text):
        if token.type != "fence":
            continue
        language, options = parse_fence_info(token.info)
        role = role_of(options)
        if role is None:
            continue
        start, end = token.map
        where = f"{assignment.notebook_text.relative_to(assignment.course.root)}:{start + 1}"
        flush_prose(start)
        cursor = end
        body = token.content.rstrip("\n")

        if role == "given":
            source = region(options["given"], where) if options["given"] else body
            cells.append(nbformat.v4.new_code_cell(source, id=cell_id("code")))
        elif role == "answer":
            grade_id = unique(options["answer"], where)
            cells.append(nbformat.v4.new_code_cell(
                region(grade_id, where), id=grade_id,
                metadata=nbgrader_metadata(grade_id, solution=True)))
        elif role == "check":
            grade_id = unique(cell_id("check"), where)
            cells.append(nbformat.v4.new_code_cell(
                body, id=grade_id, metadata=nbgrader_metadata(grade_id, locked=True)))
        elif role == "graded":
            grade_id = unique(options["graded"], where)
            points = _points(options, where)
            cells.append(nbformat.v4.new_code_cell(
                graded_cell_source(assignment.name, grade_id, points), id=grade_id,
                metadata=nbgrader_metadata(grade_id, grade=True, locked=True, points=points)))
        elif role == "question":
            if language != "markdown":
                raise ExerciseError(f"{where}: a question is a ```markdown block")
            grade_id = unique(options["question"], where)
            cells.append(nbformat.v4.new_markdown_cell(
                body, id=grade_id,
                metadata=nbgrader_metadata(grade_id, grade=True, solution=True,
                                           points=_points(options, where))))
        elif role == "readonly":
            if language != "markdown":
                raise ExerciseError(f"{where}: a read-only text is a ```markdown block")
            grade_id = unique(options["readonly"], where)
            cells.append(nbformat.v4.new_markdown_cell(
                body, id=grade_id, metadata=nbgrader_metadata(grade_id, locked=True)))
    flush_prose(len(lines))
    return cells


def build_notebook(assignment):
    """The nbgrader source notebook for `assignment`, built in memory."""
    text = assignment.notebook_text.read_text()
    regions = read_regions(assignment.solutions)
    cells = build_cells(assignment, text, regions)
    unused = set(regions) - {c.id for c in cells} - _given_regions(text)
    if unused:
        raise ExerciseError(f"solutions regions not used by any cell: {sorted(unused)}")
    nb = nbformat.v4.new_notebook(cells=cells)
    nb.metadata = {
        "kernelspec": {"display_name": "Python 3", "language": "python", "name": "python3"},
        "language_info": {"name": "python"},
    }
    nbformat.validate(nb)
    return nb


def _given_regions(text):
    names = set()
    for token in MarkdownIt().parse(text):
        if token.type == "fence":
            _, options = parse_fence_info(token.info)
            if options.get("given"):
                names.add(options["given"])
    return names


def notebook_text(nb):
    return nbformat.writes(nb) + "\n"


def write_source(assignment):
    """Write the source notebook into the assignment's course; return its path."""
    path = assignment.source_notebook
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomically(path, notebook_text(build_notebook(assignment)))
    return path
