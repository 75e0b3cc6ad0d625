"""Split a solutions file into the named regions that become notebook cells."""
import re
from pathlib import Path

from autograder.course.errors import CourseError

REGION_LINE = re.compile(r"^# %% (?P<name>[A-Za-z0-9_]+)\s*$")
SOLUTION_BEGIN = "### BEGIN SOLUTION"
SOLUTION_END = "### END SOLUTION"


def read_regions(path, shown=None):
    """Return {region name: source}, in file order, without trailing blank lines.

    Text before the first `# %%` line (the module docstring) belongs to no region. A
    region whose solution markers do not pair up is a CourseError naming the file
    (as `shown`, default `path`), the line and the region (see `marker_problem`).
    """
    return split_regions(Path(path).read_text(), shown or path)


def split_regions(text, path):
    """`read_regions` of a file whose text is `text` (`path` names it in errors)."""
    regions, name, lines, first = {}, None, [], 0
    for number, line in enumerate(text.splitlines(), start=1):
        match = REGION_LINE.match(line)
        if match:
            if name is not None:
                regions[name] = _region(path, name, lines, first)
            name, lines, first = match["name"], [], number + 1
            if name in regions:
                raise CourseError(f"{path}:{number}: region {name!r} appears twice")
        elif name is not None:
            lines.append(line)
    if name is not None:
        regions[name] = _region(path, name, lines, first)
    return regions


def _region(path, name, lines, first):
    problem = marker_problem(lines, first)
    if problem:
        line, why = problem
        raise CourseError(f"{path}:{line}: region {name!r}: {why}")
    return "\n".join(lines).strip("\n")


def marker_problem(lines, first=1):
    """Where the solution markers in `lines` (numbered from `first`) do not pair up, as
    (line number, what is wrong), or None. The rule is nbgrader's: a line that contains
    BEGIN SOLUTION begins a solution, one that contains END SOLUTION ends it. nbgrader's
    generate_assignment stops, with a long traceback, on a BEGIN that never ends or a
    second BEGIN before the END; an END with no BEGIN it passes over, and the solution
    lines above it would be given to students."""
    begun = None
    for number, line in enumerate(lines, start=first):
        if "BEGIN SOLUTION" in line:
            if begun is not None:
                return number, (f"a second {SOLUTION_BEGIN} while the one on line {begun} is still open:"
                                f" close that one with {SOLUTION_END} first")
            begun = number
        elif "END SOLUTION" in line:
            if begun is None:
                return number, (f"{SOLUTION_END} with no {SOLUTION_BEGIN} before it: add one where the"
                                " solution begins")
            begun = None
    if begun is not None:
        return begun, f"{SOLUTION_BEGIN} has no {SOLUTION_END}: add one where the solution ends"
    return None


def has_markers(source):
    """Whether `source` holds a solution marker (nbgrader's rule, as in `marker_problem`)."""
    return "BEGIN SOLUTION" in source or "END SOLUTION" in source


def strip_solution_markers(source):
    """The code as a student who solved the exercise would have it."""
    return "\n".join(
        line for line in source.splitlines()
        if line.strip() not in (SOLUTION_BEGIN, SOLUTION_END)
    )


def is_script(name):
    """Script regions compute notebook variables; the reference does not run them."""
    return name.endswith("_script")
