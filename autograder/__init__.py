"""Build, release and grade the attention-mechanisms course unit.

Modules, in the order data flows through them:
    regions    split a solutions file into named code regions
    build      exercises/ + solutions/ -> source/<assignment>/<assignment>.ipynb
    release    nbgrader generate_assignment -> release/
    student    the probe API hidden checks use to talk to a submission
    plugin     pytest plugin: `student`, `reference`, `rng` fixtures, clean diagnostics
    runner     run the hidden checks (once, or from a pytest session reused per worker)
    kernel     the entry point nbgrader's hidden test cells call
    corpus     realistic mistakes and alternative styles, as submissions with expected outcomes
    validate   instructors: grade solutions, stubs and the corpus; what each check catches
    submissions find, read and sanitize submitted notebooks (restore locked cells)
    wire       frames between grader and sandbox; only plain data comes back
    agent      runs inside the sandbox: a warm interpreter forking one child per submission
    sandbox    the grader's side: bubblewrap command, Sandbox, the SandboxStudent proxy
    grading    grade one submission on a worker; Gradescope-style result dicts
    scheduler  the one interface between a batch and its workers (local processes today)
    outputs    results/<student>.json, grades.csv, nbgrader gradebook
    batch      `autograder grade`: resumable batches
    feedback   one HTML page per student, from their result
    report     the class report for TAs (histogram, exercises, common mistakes)
    gradescope the Gradescope autograder zip, and grading inside it
"""
import sys
from pathlib import Path

# jsonschema (nbformat's validator, and nbgrader's Jupyter dependencies) imports
# rfc3987_syntax whenever it is installed, and that module compiles a grammar at
# import: 1.3 s in every grading process, only to check "iri" string formats,
# which no schema we validate uses. Without it jsonschema simply skips them.
if "jsonschema" not in sys.modules:
    sys.modules.setdefault("rfc3987_syntax", None)

ROOT = Path(__file__).resolve().parent.parent
ASSIGNMENTS = ("self_attention", "causal_attention")  # in course order
