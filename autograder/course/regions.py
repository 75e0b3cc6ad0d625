"""Split a solutions file into the named regions that become notebook cells."""
import re
from pathlib import Path

REGION_LINE = re.compile(r"^# %% (?P<name>[A-Za-z0-9_]+)\s*$")
SOLUTION_BEGIN = "### BEGIN SOLUTION"
SOLUTION_END = "### END SOLUTION"


def read_regions(path):
    """Return {region name: source}, in file order, without trailing blank lines.

    Text before the first `# %%` line (the module docstring) belongs to no region.
    """
    return split_regions(Path(path).read_text(), path)


def split_regions(text, path):
    """`read_regions` of a file whose text is `text` (`path` names it in errors)."""
    regions, name, lines = {}, None, []
    for line in text.splitlines():
        match = REGION_LINE.match(line)
        if match:
            if name is not None:
                regions[name] = "\n".join(lines).strip("\n")
            name, lines = match["name"], []
            if name in regions:
                raise ValueError(f"{path}: region {name!r} appears twice")
        elif name is not None:
            lines.append(line)
    if name is not None:
        regions[name] = "\n".join(lines).strip("\n")
    return regions


def strip_solution_markers(source):
    """The code as a student who solved the exercise would have it."""
    return "\n".join(
        line for line in source.splitlines()
        if line.strip() not in (SOLUTION_BEGIN, SOLUTION_END)
    )


def is_script(name):
    """Script regions compute notebook variables; the reference does not run them."""
    return name.endswith("_script")
