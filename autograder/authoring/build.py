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

A line `<!-- split -->` splits prose into two markdown cells. A fence with only a
language (```python, ```bash, ```) is prose; one whose extra words look like a role
but name none (```python checks, ```python answer=x point=2) is refused, naming the
line and the closest role, rather than quietly becoming prose. Solution markers that
nbgrader would stop on (unpaired, or outside an answer or question) are refused here,
in one line naming the file, the line and the region or cell.
"""
import difflib
import re
import shlex

import nbformat
from markdown_it import MarkdownIt

from autograder.course import CourseError, write_atomically

from autograder.course.regions import SOLUTION_BEGIN, has_markers, marker_problem, read_regions

ROLES = ("given", "answer", "check", "graded", "question", "readonly")
TAKE_POINTS = ("graded", "question")  # the roles that also take points=P
SYNTAX = {"given": "```python given (or given=REGION)", "answer": "```python answer=REGION",
          "check": "```python check", "graded": "```python graded=ID points=P",
          "question": "```markdown question=ID points=P", "readonly": "```markdown readonly=ID"}
SPLIT = "<!-- split -->"
WORD = re.compile(r"[A-Za-z_][\w-]*")  # a bare word an author may have meant as a role


class ExerciseError(CourseError):
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


def fence_role(info, where):
    """The role of a fence whose info string is `info`, or None for a fence that stays in the
    prose (only a language, or options that try no role, such as title="x"). ExerciseError,
    saying `where`, for words that try to name a role and do not: a misspelled or unknown role
    word, or an option the role does not take."""
    try:
        language, options = parse_fence_info(info)
    except ValueError as error:  # shlex: a quote left open
        raise ExerciseError(f"{where}: cannot read ```{info.strip()}: {error}") from None
    try:
        role = role_of(options)
    except ExerciseError as error:
        raise ExerciseError(f"{where}: {error}") from None
    if language in ROLES:
        raise ExerciseError(f"{where}: ```{info.strip()} names the role {language!r} where the language goes:"
                            f" write {SYNTAX[language]}")
    if role is None:
        attempts = [key for key, value in options.items()
                    if key == "points" or _closest(key, ROLES) or ("=" not in key and not value and WORD.fullmatch(key))]
        if not attempts:
            return None
        word = attempts[0]
        why = ("points=P needs a role: graded=ID or question=ID" if word == "points" else
               f"{word!r} is not a role" + (f" (did you mean {_closest(word, ROLES)!r}?)" if _closest(word, ROLES) else ""))
        raise ExerciseError(f"{where}: ```{info.strip()} is not a cell: {why}. A cell's role is one of"
                            f" {', '.join(ROLES)}; a fence with only a language, such as ```{language or 'python'},"
                            f" stays in the prose")
    allowed = (role, "points") if role in TAKE_POINTS else (role,)
    unknown = [key for key in options if key not in allowed]
    if unknown:
        word, close = unknown[0], _closest(unknown[0], allowed)
        article = "an" if role[0] in "aeiou" else "a"
        raise ExerciseError(f"{where}: ```{info.strip()}: {article} {role} cell takes no {word!r}"
                            f"{f' (did you mean {close!r}?)' if close else ''}: write {SYNTAX[role]}")
    return role


def _closest(word, known):
    """The word of `known` that `word` most likely misspells, or None."""
    close = difflib.get_close_matches(word, known, n=1, cutoff=0.6)
    return close[0] if close else None


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
    shown = assignment.notebook_text.relative_to(assignment.course.root)
    solutions = assignment.solutions.relative_to(assignment.course.root)
    cursor = 0
    for token in MarkdownIt().parse(text):
        if token.type != "fence":
            continue
        start, end = token.map
        where = f"{shown}:{start + 1}"
        role = fence_role(token.info, where)
        if role is None:
            continue
        language, options = parse_fence_info(token.info)
        cells.add_prose(lines[cursor:start])
        cursor = end
        body = token.content.rstrip("\n")
        _check_body(role, options, body, where, f"{shown}:", start + 2, solutions)
        cells.add_fence(role, language, options, body, where)
    cells.add_prose(lines[cursor:])
    return cells.cells


def _check_body(role, options, body, where, path, first, solutions):
    """Refuse what nbgrader's generate_assignment would stop on, or what would vanish unseen,
    in a fence's `body` (its first line is line `first` of `path`): text in an answer or graded
    block (the cell is made from elsewhere), solution markers outside an answer, and markers that
    do not pair up in a written question's model answer."""
    if role in ("answer", "graded") and body.strip():
        made = (f"region {options['answer']!r} of {solutions}" if role == "answer" else "the build itself")
        count = len(body.splitlines())
        raise ExerciseError(f"{where}: the code of {'an answer' if role == 'answer' else 'a graded'} cell comes from"
                            f" {made}, so the {count} line{'' if count == 1 else 's'} in this block would be left"
                            f" out: leave the block empty")
    if role == "question":
        problem = marker_problem(body.splitlines(), first)
        if problem:
            raise ExerciseError(f"{path}{problem[0]}: question {options['question']!r}: {problem[1]}")
    elif role != "answer" and has_markers(body):
        raise ExerciseError(f"{where}: a {role} cell holds a solution marker ({SOLUTION_BEGIN}); only an answer"
                            f" cell (```python answer=REGION, its code in {solutions}) or a written question"
                            f" (```markdown question=ID points=P) may")


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
        if options["given"] and has_markers(source):
            solutions = self.assignment.solutions.relative_to(self.assignment.course.root)
            raise ExerciseError(f"{where}: region {options['given']!r} of {solutions}"
                                f" holds a solution marker ({SOLUTION_BEGIN}), but given code is not an answer:"
                                f" show it with ```python answer={options['given']}")
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
    regions = read_regions(assignment.solutions, assignment.solutions.relative_to(assignment.course.root))
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
