"""For instructors: do the hidden checks pass the solutions and fail the stubs?"""
import contextlib
import io

import nbformat

from .nbgrader_steps import release_path
from .reference import solved_namespace
from .runner import run_checks
from .student import NamespaceStudent


def release_namespace(assignment, course=None):
    """Run the release notebook's code cells in order, past errors: an untouched submission."""
    nb = nbformat.read(release_path(assignment, *(c for c in [course] if c)), as_version=4)
    namespace = {"__name__": "__main__"}
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        for cell in nb.cells:
            if cell.cell_type == "code":
                try:
                    exec(compile(cell.source, f"<{cell.get('id', 'cell')}>", "exec"), namespace)
                except Exception:
                    pass
    return namespace


def validate(assignment, seed=0):
    """[(grade id, checks, passed on solutions, failed on stubs)] for every grade cell."""
    with contextlib.redirect_stdout(io.StringIO()):
        solved = solved_namespace(assignment)
    on_solutions = run_checks(assignment, NamespaceStudent(solved), seed=seed)
    on_stubs = run_checks(assignment, NamespaceStudent(release_namespace(assignment)), seed=seed)
    rows = []
    for grade_id, solved in on_solutions.items():
        stub = on_stubs[grade_id]
        rows.append({
            "grade_id": grade_id,
            "checks": len(solved.checks),
            "solutions_pass": sum(c.passed for c in solved.checks),
            "stubs_fail": sum(not c.passed for c in stub.checks),
            "failures": [f"{c.name}: {c.message}" for c in solved.checks if not c.passed]
                        + [f"{c.name} passes on the stub" for c in stub.checks if c.passed],
        })
    return rows


def is_clean(rows):
    return all(r["solutions_pass"] == r["checks"] == r["stubs_fail"] and r["checks"] for r in rows)
