"""The reference solutions as a namespace, for the trusted side of every check."""
import functools
import types
from pathlib import Path

from autograder.course.regions import is_script, split_regions, strip_solution_markers


class EditError(ValueError):
    """An edit of the reference (an error model's mutant) does not apply to the solutions."""


def load(solutions, edits=()):
    """The solution definitions of a solutions file (not its script regions), in a fresh module.

    `edits` are (region, old, new) text replacements made first, each `old` found exactly
    once in its region: the error model's mutants are the reference with such an edit."""
    return _load(str(Path(solutions).resolve()), tuple(tuple(edit) for edit in edits))


@functools.lru_cache(maxsize=None)
def _load(path, edits=()):
    return _execute(path, include_scripts=False, edits=edits)


def edited_regions(path, edits):
    """{region: source} of the solutions file with `edits` made (see `load`)."""
    path = Path(path)
    regions = dict(_regions(str(path.resolve()), path.read_text()))
    for region, old, new in edits:
        if region not in regions:
            raise EditError(f"{path} has no region {region!r}")
        found = regions[region].count(old)
        if found != 1:
            raise EditError(f"region {region!r} of {path} contains {old!r} {found} times, not once")
        regions[region] = regions[region].replace(old, new)
    return regions


@functools.lru_cache(maxsize=16)
def _regions(path, text):
    """The regions of the file with this text, split once per text (the error model builds
    hundreds of edited references from one file; keyed by the text, not the file's time,
    which a quick rewrite of the same size can leave as it was)."""
    return split_regions(text, path)


@functools.lru_cache(maxsize=4096)
def _compiled(path, name, source):
    """A region's code, compiled once per text: the edited references of an error model share
    every region but the one a mutant edits (compiling was two thirds of building them)."""
    return compile(strip_solution_markers(source), f"{path}:{name}", "exec")


def solved_namespace(solutions):
    """What a student who solved everything has after running the notebook."""
    return dict(vars(_execute(solutions, include_scripts=True)))


def _execute(path, include_scripts, edits=()):
    path = Path(path)
    module = types.ModuleType(f"reference_{path.stem}")
    module.__file__ = str(path)
    for name, source in edited_regions(path, edits).items():
        if include_scripts or not is_script(name):
            exec(_compiled(str(path), name, source), module.__dict__)
    return module
