"""The generated notebooks are up to date and the release gives nothing away."""
import json
import re

import nbformat
import pytest

from autograder.authoring.build import ExerciseError, build_cells, notebook_text, build_notebook
from autograder.authoring.nbgrader_steps import generate_assignment
from autograder.authoring.scaffold import init_course, new_assignment
from autograder.cli import main
from autograder.course import CourseError
from autograder.course.regions import read_regions, split_regions

from helpers import COURSE, assignment_of

ASSIGNMENTS = COURSE.names()

ASSIGNMENT = "causal_attention"
TOTAL_POINTS = {"causal_attention": 30, "self_attention": 18}
STALE = "is stale: run `autograder release` and commit the result"


@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_source_notebook_is_not_stale(assignment):
    committed = COURSE.assignment(assignment).source_notebook.read_text()
    assert committed == notebook_text(build_notebook(COURSE.assignment(assignment))), f"source notebook {STALE}"


def comparable(nb):
    return [(c.cell_type, c.source, json.dumps(c.metadata, sort_keys=True)) for c in nb.cells]


@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_release_notebook_is_not_stale(course_copy, assignment):
    fresh = generate_assignment(assignment_of(course_copy, assignment))
    committed = nbformat.read(COURSE.assignment(assignment).release_notebook, as_version=4)
    assert comparable(nbformat.read(fresh, as_version=4)) == comparable(committed), f"release {STALE}"


@pytest.fixture(scope="module", params=ASSIGNMENTS)
def release(request):
    """(assignment, text of its release notebook)"""
    return request.param, COURSE.assignment(request.param).release_notebook.read_text()


@pytest.fixture(scope="module")
def release_text():
    return COURSE.assignment(ASSIGNMENT).release_notebook.read_text()


def solution_lines(assignment):
    """Lines students must write themselves (between the solution markers) that
    given code elsewhere does not already show."""
    hidden, given = [], []
    for source in read_regions(COURSE.assignment(assignment).solutions).values():
        inside = False
        for line in source.splitlines():
            if "### BEGIN SOLUTION" in line:
                inside = True
            elif "### END SOLUTION" in line:
                inside = False
            elif len(line.strip()) > 12:
                (hidden if inside else given).append(line.strip())
    given_text = "\n".join(given)
    return [line for line in hidden if line not in given_text]


def test_release_holds_no_solution_code(release):
    assignment, text = release
    cells = nbformat.reads(text, as_version=4).cells
    sources = "\n".join(c.source for c in cells if c.cell_type == "code")  # prose may name an API
    leaked = [line for line in solution_lines(assignment) if line in sources]
    assert not leaked, f"solution lines in the release: {leaked[:3]}"
    assert len(solution_lines(assignment)) > 20  # the check above looked at real code


def test_release_holds_no_hidden_tests(release):
    for marker in ("BEGIN HIDDEN TESTS", "grade_here", "autograder", "BEGIN SOLUTION", "END SOLUTION"):
        assert marker not in release[1]


def test_release_stubs_explain_themselves_and_keep_given_code(release_text):
    cells = {c.metadata["nbgrader"]["grade_id"]: c.source
             for c in nbformat.reads(release_text, as_version=4).cells if "nbgrader" in c.metadata}
    assert 'raise NotImplementedError("Not answered yet' in cells["ex1_answer"]
    # the given __init__ of Exercise 6 and the layers of Exercise 3 stay
    assert "self.projection = nn.Linear(d_out, d_out)" in cells["ex6_answer"]
    assert "self.W_query = nn.Linear(d_in, d_out, bias=qkv_bias)" in cells["ex3_answer"]
    assert cells["q1"] == "YOUR ANSWER HERE"


@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_every_graded_cell_has_points_and_checks(assignment):
    nb = build_notebook(COURSE.assignment(assignment))
    graded = {c.metadata["nbgrader"]["grade_id"]: c.metadata["nbgrader"]["points"]
              for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade")}
    checks = {p.stem.removeprefix("test_") for p in COURSE.assignment(assignment).checks.glob("test_*.py")}
    autograded = {g for g in graded if not g.startswith("q")}
    assert autograded == checks
    assert all(points > 0 for points in graded.values())
    assert sum(graded.values()) == TOTAL_POINTS[assignment]


@pytest.mark.parametrize("text, problem", [
    ("```python answer=nope\n```\n", "no region 'nope'"),
    ("```python graded=ex1\n```\n", "needs points"),
    ("```python answer=ex1_answer\n```\n```python answer=ex1_answer\n```\n", "used twice"),
    ("```python given answer=ex1_answer\n```\n", "one role"),
])
def test_malformed_exercise_files_are_reported(text, problem):
    with pytest.raises(ExerciseError, match=re.escape(problem)):
        build_cells(COURSE.assignment(ASSIGNMENT), text, read_regions(COURSE.assignment(ASSIGNMENT).solutions))


def cells_of(text):
    return build_cells(COURSE.assignment(ASSIGNMENT), text, read_regions(COURSE.assignment(ASSIGNMENT).solutions))


@pytest.mark.parametrize("fence, said", [
    ("```python checks", "```python checks is not a cell: 'checks' is not a role (did you mean 'check'?)"),
    ("```python Check", "'Check' is not a role (did you mean 'check'?)"),
    ("```python grade=ex1 points=2", "'grade' is not a role (did you mean 'graded'?)"),
    ("```python awnser=ex1_answer", "'awnser' is not a role (did you mean 'answer'?)"),
    ("```python tests", "'tests' is not a role. A cell's role is one of given, answer, check,"),
    ("```python points=2", "points=P needs a role: graded=ID or question=ID"),
    ("```python graded=ex1 point=2", "a graded cell takes no 'point' (did you mean 'points'?)"),
    ("```python check extra", "a check cell takes no 'extra': write ```python check"),
    ("```check", "names the role 'check' where the language goes: write ```python check"),
    ('```python title="a.py', "cannot read"),
])
def test_a_fence_that_tries_a_role_and_names_none_is_refused_at_its_line(fence, said):
    """A misspelled role would otherwise turn a visible check into prose, silently."""
    with pytest.raises(CourseError) as refused:
        cells_of(f"# Title\n\nSome prose.\n\n{fence}\nx = 1\n```\n")
    assert str(refused.value).startswith(f"exercises/{ASSIGNMENT}/notebook.md:5: ")
    assert said in str(refused.value)


def test_fences_with_only_a_language_or_options_no_role_resembles_stay_in_the_prose():
    text = ("Run:\n\n```bash\nautograder release\n```\n\n```python\nx = 1\n```\n\n```text\nhello\n```\n\n"
            "```\nplain\n```\n\n```python title=\"a.py\" linenums=1\ny = 2\n```\n\n```python {.small}\nz = 3\n```")
    assert [(cell.cell_type, cell.source) for cell in cells_of(text)] == [("markdown", text)]


def test_build_refuses_a_misspelled_role_in_one_line_and_writes_nothing(tmp_path, capsys):
    course = init_course(tmp_path / "course")
    assignment = new_assignment(course, "warmup")
    text = assignment.notebook_text.read_text()
    assignment.notebook_text.write_text(text.replace("```python check\n", "```python checks\n"))
    line = text.splitlines().index("```python check") + 1
    assert main(["build", "warmup", "--course", str(course.root)]) == 2
    said = capsys.readouterr().out
    assert f"autograder build: exercises/warmup/notebook.md:{line}: ```python checks is not a cell:" in said
    assert "(did you mean 'check'?)" in said and "Traceback" not in said
    assert not assignment.source_notebook.exists()



# Line 1 names the markers outside any region (the docstring), as the bundled solutions do.
SOLVED = ('"""Between ### BEGIN SOLUTION and ### END SOLUTION: what students write."""\n# %% setup\nimport torch\n\n'
          "# %% ex1_answer\ndef f(x):\n    ### BEGIN SOLUTION\n    return x\n    ### END SOLUTION\n")


@pytest.mark.parametrize("old, new, said", [
    ("    ### END SOLUTION\n", "", "sol.py:7: region 'ex1_answer': ### BEGIN SOLUTION has no ### END SOLUTION:"
                                   " add one where the solution ends"),
    ("    ### BEGIN SOLUTION\n", "", "sol.py:8: region 'ex1_answer': ### END SOLUTION with no ### BEGIN SOLUTION"
                                     " before it: add one where the solution begins"),
    ("    return x\n", "    return x\n    ### BEGIN SOLUTION\n",
     "sol.py:9: region 'ex1_answer': a second ### BEGIN SOLUTION while the one on line 7 is still open"),
])
def test_solution_markers_that_do_not_pair_up_name_the_file_line_and_region(old, new, said):
    """nbgrader would stop on them with 40 lines of traceback and no region name (or, for an END
    with no BEGIN, pass over it and give the solution above it to students)."""
    assert split_regions(SOLVED, "sol.py")["ex1_answer"].count("SOLUTION") == 2
    with pytest.raises(CourseError) as refused:
        split_regions(SOLVED.replace(old, new), "sol.py")
    assert str(refused.value).startswith(said)


@pytest.fixture
def warmup(tmp_path):
    """A fresh course's one assignment, as `autograder new` makes it."""
    return new_assignment(init_course(tmp_path / "course"), "warmup")


def edit(path, old, new):
    text = path.read_text()
    assert old in text
    path.write_text(text.replace(old, new, 1))


def test_release_stops_on_a_missing_end_solution_in_one_line_before_nbgrader_runs(warmup, capsys):
    edit(warmup.solutions, "    ### END SOLUTION\n", "")
    line = warmup.solutions.read_text().splitlines().index("    ### BEGIN SOLUTION") + 1
    assert main(["release", "warmup", "--course", str(warmup.course.root)]) == 2
    said = capsys.readouterr().out
    assert said.startswith(f"autograder release: solutions/warmup.py:{line}: region 'ex1_answer': ### BEGIN SOLUTION"
                           " has no ### END SOLUTION")
    assert "Traceback" not in said and "nbgrader" not in said
    assert not warmup.source_notebook.exists() and not warmup.release_notebook.exists()


@pytest.mark.parametrize("old, new, said", [
    # a written question's model answer whose END is missing: nbgrader would stop on it
    ("```python graded=ex1 points=1\n```\n", "```python graded=ex1 points=1\n```\n\n```markdown question=q1 points=1\n"
     "### BEGIN SOLUTION\nBecause.\n```\n", ":23: question 'q1': ### BEGIN SOLUTION has no ### END SOLUTION"),
    # an answer block's own text (here a BEGIN with no END) is never used: the region is
    ("```python answer=ex1_answer\n```", "```python answer=ex1_answer\n### BEGIN SOLUTION\nx = 1\n```",
     ":10: the code of an answer cell comes from region 'ex1_answer' of solutions/warmup.py, so the 2 lines"),
    ("```python graded=ex1 points=1\n```", "```python graded=ex1 points=1\ngrade_here()\n```",
     ":19: the code of a graded cell comes from the build itself, so the 1 line in this block"),
    # markers outside an answer: nbgrader would stop on a solution in a cell that is not one
    ("assert torch.equal", "### BEGIN SOLUTION\nassert torch.equal", ":13: a check cell holds a solution marker"),
])
def test_notebook_md_blocks_whose_text_would_break_the_release_or_vanish_are_refused(warmup, old, new, said):
    edit(warmup.notebook_text, old, new)
    with pytest.raises(CourseError) as refused:
        build_notebook(warmup)
    assert str(refused.value).startswith(f"exercises/warmup/notebook.md{said}")


def test_given_code_from_a_region_with_solution_markers_is_refused(warmup):
    edit(warmup.notebook_text, "```python answer=ex1_answer", "```python given=ex1_answer")
    with pytest.raises(CourseError, match=re.escape("region 'ex1_answer' of solutions/warmup.py holds a solution marker"
                                                    " (### BEGIN SOLUTION), but given code is not an answer")):
        build_notebook(warmup)
