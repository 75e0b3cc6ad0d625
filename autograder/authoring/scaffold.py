"""For instructors: `autograder init DIR` makes an empty course, `autograder new NAME` an assignment.

A new assignment works as created: one exercise, its solution, one hidden check,
one corpus mistake and two example students, so `autograder release NAME`,
`autograder validate NAME` and `autograder demo` run on it at once. Then the
instructor edits it into the real thing.
"""
import keyword
import re
from pathlib import Path

from autograder.course import SETTINGS, Course, CourseError

NBGRADER_CONFIG = '''"""This folder is an nbgrader course directory: source/, release/, submitted/ ..."""
c = get_config()  # noqa: F821 (provided by nbgrader)

c.CourseDirectory.root = "."
c.CourseDirectory.course_id = {course_id!r}

# A stub that tells students what to do, kept in their notebook.
c.ClearSolutions.code_stub = {{
    "python": '# YOUR CODE HERE\\nraise NotImplementedError("Not answered yet: replace this line with your code.")'
}}
c.ClearSolutions.text_stub = "YOUR ANSWER HERE"

# The hidden checks import the `autograder` package, installed next to nbgrader.
c.Execute.timeout = 120

# Feedback shows students their results, never the hidden test cells' code:
# nbgrader's own feedback keeps hidden tests unless told otherwise (issues #917, #1363).
from nbconvert.preprocessors import CSSHTMLHeaderPreprocessor  # noqa: E402
from nbgrader.preprocessors import ClearHiddenTests, ClearMarkScheme, GetGrades  # noqa: E402

c.GenerateFeedback.preprocessors = [GetGrades, ClearHiddenTests, ClearMarkScheme, CSSHTMLHeaderPreprocessor]

# A read-only cell (```markdown readonly=ID in notebook.md) may hold a rubric for TAs between
# ### BEGIN MARK SCHEME and ### END MARK SCHEME: the release leaves it out, grading restores the
# cell, so formgrader shows it, and feedback (above) drops it. nbgrader expects mark schemes only
# in task cells, which carry points of their own; a read-only cell carries none.
c.ClearMarkScheme.enforce_metadata = False
'''

GITIGNORE = """__pycache__/
# what grading writes
submitted/
autograded/
feedback/
graded/
gradebook.db
dist/
.ipynb_checkpoints/
"""

ASSIGNMENT_TOML = '''# Settings of one assignment; the engine reads them (autograder/course/settings.py, docs/settings.md).
title = {title!r}
order = {order}  # its place in the course

# [limits]          # per submission, when the TA passes none
# timeout = 120     # seconds
# memory_mb = 4096

[sandbox]
preimport = []  # modules the warm sandbox imports once, before forking a child per student
# warm_up_on_release = true  # it also runs the untouched release once (tried in a fork first)
# warm_up_seconds = 2         # ... unless that takes longer
'''

NOTEBOOK_MD = '''# {title}

Each exercise has an answer cell for your code and a cell that checks it.

## 1. Scaling a tensor

**Exercise 1.** Write `scale(x, factor)`, which returns `x` with every element
multiplied by `factor`.

```python answer=ex1_answer
```

```python check
import torch
assert torch.equal(scale(torch.ones(2, 3), 2.0), torch.full((2, 3), 2.0))
print("Exercise 1 looks right.")
```

```python graded=ex1 points=1
```
'''

SOLUTIONS_PY = '''"""Reference solutions of `{name}`: every `# %% NAME` region becomes the notebook cell NAME;
the lines between BEGIN and END SOLUTION are what students write."""

# %% ex1_answer
import torch


def scale(x, factor):
    ### BEGIN SOLUTION
    return x * factor
    ### END SOLUTION
'''

CHECK_PY = '''"""Exercise 1: scale(x, factor)."""
import torch

from autograder.checks import diagnosis, expect_close, expect_tensor, fail


def test_scales_every_element(student, rng):
    """Multiplies every element of x by the factor"""
    x = torch.randn(3, 4, generator=rng)
    got = expect_tensor(student.call("scale", x, 2.5), "scale(x, 2.5)", shape=x.shape)
    if torch.allclose(got, x):
        fail("scale(x, 2.5) returned x unchanged: multiply it by `factor`.")
    expect_close(got, x * 2.5, "scale(x, 2.5)", "Multiply every element of x by `factor`.")


def probe(student, rng):
    """What the error model (errors.toml) compares: scale on a random matrix."""
    yield student.call("scale", torch.randn(3, 4, generator=rng), 2.5)


test_diagnosis = diagnosis(probe)  # runs after the other checks: names a known mistake when one failed
'''

ERRORS_TOML = '''# The error model: known mistakes as small edits of the reference, each with the message its
# student reads (see docs/instructors.md). `autograder validate` checks that the probe tells them apart.

[[mutant]]
exercise = "ex1"
name = "adds-factor"
message = "x + factor adds the factor to every element; scaling multiplies: x * factor."
edit = [{ old = "return x * factor", new = "return x + factor" }]
'''

CORPUS_TOML = '''# Realistic mistakes and correct answers in other styles, graded by `autograder validate`.
# An entry starts from the solutions and changes one answer cell (see docs/instructors.md).

[[entry]]
name = "ex1-returns-x"
exercise = "ex1"
outcome = "mistake"
about = "returns x without scaling it"
diagnostic = "unchanged"
edit = [{ cell = "ex1_answer", old = "return x * factor", new = "return x" }]

[[entry]]
name = "ex1-adds-factor"
exercise = "ex1"
outcome = "mistake"
about = "adds the factor instead of multiplying"
diagnostic = "scaling multiplies"
edit = [{ cell = "ex1_answer", old = "return x * factor", new = "return x + factor" }]

[[entry]]
name = "ex1-alt-mul"
exercise = "ex1"
outcome = "alternative"
about = "torch.mul instead of *"
edit = [{ cell = "ex1_answer", old = "return x * factor", new = "return torch.mul(x, factor)" }]
'''

EXAMPLES_TOML = '''# The demo's example students: each fills in the release from the solutions, then applies
# its edits; `untouched = true` hands in the release as it is.

[[student]]
name = "ada"
about = "everything right"

[[student]]
name = "dee"
about = "handed in the release untouched"
untouched = true
'''


def init_course(folder):
    """An empty course in `folder` (created if needed); refuses to overwrite a course."""
    root = Path(folder).resolve()
    if (root / "exercises").exists() or (root / "nbgrader_config.py").exists():
        raise CourseError(f"{root} already holds a course (exercises/ or nbgrader_config.py)")
    (root / "exercises").mkdir(parents=True)
    (root / "solutions").mkdir()
    course_id = re.sub(r"[^A-Za-z0-9_-]", "-", root.name) or "course"
    (root / "nbgrader_config.py").write_text(NBGRADER_CONFIG.format(course_id=course_id))
    (root / ".gitignore").write_text(GITIGNORE)
    return Course(root)


def new_assignment(course, name, title=None):
    """A working assignment `name` in `course`; refuses to overwrite one."""
    if not name.isidentifier() or keyword.iskeyword(name) or name != name.lower():
        raise CourseError(f"{name!r} cannot name an assignment: use lower-case letters, digits and _"
                          " (it becomes a Python package name, as in exercises/{name}/checks)")
    if not (course.root / "exercises").is_dir():
        raise CourseError(f"{course.root} is not a course: create one with `autograder init DIR`")
    folder = course.root / "exercises" / name
    solutions = course.root / "solutions" / f"{name}.py"
    if folder.exists() or solutions.exists():
        raise CourseError(f"the course already has an assignment {name!r} ({folder} or {solutions})")
    title = title or name.replace("_", " ").capitalize()
    order = max((a.order for a in course.assignments()), default=0) + 1
    (folder / "checks").mkdir(parents=True)
    (folder / "__init__.py").write_text("")
    (folder / "checks" / "__init__.py").write_text("")
    (folder / SETTINGS).write_text(ASSIGNMENT_TOML.format(title=title, order=order))
    (folder / "notebook.md").write_text(NOTEBOOK_MD.format(title=title))
    (folder / "checks" / "test_ex1.py").write_text(CHECK_PY)
    (folder / "corpus.toml").write_text(CORPUS_TOML)
    (folder / "errors.toml").write_text(ERRORS_TOML)
    (folder / "examples.toml").write_text(EXAMPLES_TOML)
    solutions.parent.mkdir(exist_ok=True)
    solutions.write_text(SOLUTIONS_PY.format(name=name))
    return course.assignment(name)
