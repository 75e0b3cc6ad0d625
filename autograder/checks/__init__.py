"""How an answer is judged: the one import a hidden check needs.

    from autograder.checks import expect_close, fail, paired, randn, StudentError

Hidden checks are pytest tests in `exercises/<assignment>/checks/test_<cell>.py`. They get the
student's answer through the `student` fixture (a probe that calls into the sandbox and brings
plain data back), the reference solution through `reference`, and judge with the helpers below.
Every name here is described in docs/checks.md. The names load on first use, so importing this
package costs nothing until a check runs (the grader's own process never loads torch for it).
"""
import importlib

# name -> the module that defines it. Engine modules may move; a check's import does not.
_HOME = {
    # comparing and failing (verdict)
    **dict.fromkeys(["fail", "expect_tensor", "expect_close", "close", "all_finite", "max_difference",
                     "name_mistake", "no_known_mistake", "hint_for", "shape_text", "short", "listed", "brief",
                     "describe", "RTOL", "ATOL"], "autograder.checks.verdict"),
    # steps shared by every assignment's checks (checklib)
    **dict.fromkeys(["randn", "reference_module", "randomize", "paired", "student_forward",
                     "expect_reference_output", "diagnosis", "random_parameters", "observe_module",
                     "locate_module", "locate_function", "locate_any", "unused_results"],
                    "autograder.checks.checklib"),
    # what crosses from the sandbox: a student's exception, a resource handed to student code
    **dict.fromkeys(["StudentError", "Resource", "seeded"], "autograder.wire"),
    # the check markers, as data
    "MARKERS": "autograder.checks.plugin",
}
__all__ = sorted(_HOME)


def __getattr__(name):
    if name not in _HOME:
        raise AttributeError(f"module 'autograder.checks' has no attribute {name!r}")
    value = getattr(importlib.import_module(_HOME[name]), name)
    globals()[name] = value  # once: later lookups skip this function
    return value


def __dir__():
    return __all__
