"""Build, release and grade the attention-mechanisms course unit.

Modules, in the order data flows through them:
    regions    split a solutions file into named code regions
    build      exercises/ + solutions/ -> source/<assignment>/<assignment>.ipynb
    release    nbgrader generate_assignment -> release/
    student    the probe API hidden checks use to talk to a submission
    plugin     pytest plugin: `student`, `reference`, `rng` fixtures, clean diagnostics
    runner     run one grade cell's checks, return a score and messages
    kernel     the entry point nbgrader's hidden test cells call
    validate   instructors: checks vs solutions (all pass) and stubs (all fail)
"""
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
ASSIGNMENTS = ("causal_attention",)
