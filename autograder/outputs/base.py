"""The one interface every output implements: what a graded result becomes.

A batch is handed a list of outputs. It calls `add(result)` on each, in order, the moment a
result is graded (never for a grader fault, which is retried next run), and `finish(results)`
once at the end with every result in the graded folder (earlier runs' too). To add an output
format, write one class here in outputs/ and put it in the list (see `standard_outputs`).

The grading service (service/counting.py) calls `add` as results come and `finish` whenever its
queue is quiet, from another thread, many times a term: `finish` must be safe to call again,
and an output whose `finish` changes what its `add` uses guards both with a lock of its own.
"""
import threading

# Outputs that warm up in a thread (the gradebook opens nbgrader's database, the report loads
# its plotting library) import one at a time: two threads importing modules they share
# (nbgrader's and matplotlib's share dateutil) can leave one of them half-imported.
IMPORTS = threading.Lock()


class Output:
    """Base class with nothing to do; an output overrides what it needs."""

    #: Its part of a sentence about one student, "<what> could not be written".
    what = "an output"
    #: Whether the results after it depend on it: when `add` fails, the later outputs are
    #: skipped for that result (only the result file: nothing else may show a grade it lacks).
    required = False
    #: Whether it needs the sanitized notebook a result was graded from (`result.graded_notebook`).
    needs_notebook = False

    def add(self, result):
        """One result, as it is graded. Raising costs only this output for this student."""

    def finish(self, results):
        """Every result in the folder, once grading ends. Returns [(student id or "", what the
        TA should know)] for what could not be written; raising says none of it was."""
        return []


def brief(error):
    """An exception in one bounded line."""
    text = " ".join(str(error).split())
    return f"{type(error).__name__}: {text[:300]}" if text else type(error).__name__
