"""Build, release and grade notebook exercises, with student code in a sandbox.

The engine knows no assignment: a course is a folder (see `course/`), and
everything about one assignment lives in its `exercises/<assignment>/` folder.
Start at `cli/` (one module per group of commands); docs/architecture.md maps the wings
and their modules.
"""
import sys

# jsonschema (nbformat's validator, and nbgrader's Jupyter dependencies) imports
# rfc3987_syntax whenever it is installed, and that module compiles a grammar at
# import: 1.3 s in every grading process, only to check "iri" string formats,
# which no schema we validate uses. Without it jsonschema simply skips them.
if "jsonschema" not in sys.modules:
    sys.modules.setdefault("rfc3987_syntax", None)
