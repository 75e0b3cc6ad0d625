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
    cells = _Cells(assignment, regions)
    cursor = 0
    for token in MarkdownIt().parse(text):
        if token.type != "fence":
            continue
        language, options = parse_fence_info(token.info)
        role = role_of(options)
        if role is None:
            continue
        start, end = token.map
        where = f"{assignment.notebook_text.relative_to(assignment.course.root)}:{start + 1}"
        cells.add_prose(lines[cursor:start])
        cursor = end
        cells.add_fence(role, language, options, token.content.rstrip("\n"), where)
    cells.add_prose(lines[cursor:])
    return cells.cells


class _Cells:
    """The cells build_cells has made so far: ids numbered by kind, each graded id used once."""

    def __init__(self, assignment, regions):
        self.assignment, self.regions = assignment, regions
        self.cells, self.used_ids = [], set()
        self.counter = {"markdown": 0, "code": 0, "check": 0}

    def cell_id(self, kind):
        self.counter[kind] += 1
        return f"{kind}-{self.counter[kind]:02d}"

    def unique(self, grade_id, where):
        if grade_id in self.used_ids:
            raise ExerciseError(f"{where}: id {grade_id!r} is used twice")
        self.used_ids.add(grade_id)
        return grade_id

    def region(self, name, where):
        if name not in self.regions:
            raise ExerciseError(f"{where}: no region {name!r} in {self.assignment.solutions.name}")
        return self.regions[name]

    def add_prose(self, lines):
        """Markdown cells of the prose `lines`, split at SPLIT."""
        for part in "\n".join(lines).split(SPLIT):
            part = part.strip("\n")
            if part.strip():
                self.cells.append(nbformat.v4.new_markdown_cell(part, id=self.cell_id("markdown")))

    def add_fence(self, role, language, options, body, where):
        """The cell of a fenced block whose role is `role` (one of ROLES)."""
        self.cells.append(getattr(self, f"_{role}")(language, options, body, where))

    def _given(self, language, options, body, where):
        source = self.region(options["given"], where) if options["given"] else body
        return nbformat.v4.new_code_cell(source, id=self.cell_id("code"))

    def _answer(self, language, options, body, where):
        grade_id = self.unique(options["answer"], where)
        return nbformat.v4.new_code_cell(self.region(grade_id, where), id=grade_id,
                                         metadata=nbgrader_metadata(grade_id, solution=True))

    def _check(self, language, options, body, where):
        grade_id = self.unique(self.cell_id("check"), where)
        return nbformat.v4.new_code_cell(body, id=grade_id, metadata=nbgrader_metadata(grade_id, locked=True))

    def _graded(self, language, options, body, where):
        grade_id = self.unique(options["graded"], where)
        points = _points(options, where)
        return nbformat.v4.new_code_cell(
            graded_cell_source(self.assignment.name, grade_id, points), id=grade_id,
            metadata=nbgrader_metadata(grade_id, grade=True, locked=True, points=points))

    def _question(self, language, options, body, where):
        if language != "markdown":
            raise ExerciseError(f"{where}: a question is a ```markdown block")
        grade_id = self.unique(options["question"], where)
        return nbformat.v4.new_markdown_cell(
            body, id=grade_id,
            metadata=nbgrader_metadata(grade_id, grade=True, solution=True, points=_points(options, where)))

    def _readonly(self, language, options, body, where):
        if language != "markdown":
            raise ExerciseError(f"{where}: a read-only text is a ```markdown block")
        grade_id = self.unique(options["readonly"], where)
        return nbformat.v4.new_markdown_cell(body, id=grade_id, metadata=nbgrader_metadata(grade_id, locked=True))


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
