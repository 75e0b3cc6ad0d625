"""The reference solutions as a namespace, for the trusted side of every check."""
import functools
import types

from .regions import is_script, read_regions, solutions_path, strip_solution_markers


@functools.lru_cache(maxsize=None)
def load(assignment):
    """The solution definitions (not the script regions), in a fresh module."""
    return _execute(assignment, include_scripts=False)


def solved_namespace(assignment):
    """What a student who solved everything has after running the notebook."""
    return dict(vars(_execute(assignment, include_scripts=True)))


def _execute(assignment, include_scripts):
    path = solutions_path(assignment)
    module = types.ModuleType(f"reference_{assignment}")
    module.__file__ = str(path)
    for name, source in read_regions(path).items():
        if include_scripts or not is_script(name):
            code = compile(strip_solution_markers(source), f"{path}:{name}", "exec")
            exec(code, module.__dict__)
    return module
