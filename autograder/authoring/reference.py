"""The reference solutions as a namespace, for the trusted side of every check."""
import functools
import types
from pathlib import Path

from autograder.authoring.regions import is_script, read_regions, strip_solution_markers


def load(solutions):
    """The solution definitions of a solutions file (not its script regions), in a fresh module."""
    return _load(str(Path(solutions).resolve()))


@functools.lru_cache(maxsize=None)
def _load(path):
    return _execute(path, include_scripts=False)


def solved_namespace(solutions):
    """What a student who solved everything has after running the notebook."""
    return dict(vars(_execute(solutions, include_scripts=True)))


def _execute(path, include_scripts):
    path = Path(path)
    module = types.ModuleType(f"reference_{path.stem}")
    module.__file__ = str(path)
    for name, source in read_regions(path).items():
        if include_scripts or not is_script(name):
            code = compile(strip_solution_markers(source), f"{path}:{name}", "exec")
            exec(code, module.__dict__)
    return module
