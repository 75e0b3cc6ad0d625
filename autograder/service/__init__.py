"""Grading when students submit: `autograder serve` (see service/app.py, and docs/service.md).

One more way in, the same outputs out: a submission handed in through the service is graded
in the same sandboxes by the same checks as `autograder grade`, and the attempt that counts
is recorded in graded/<assignment>/ and nbgrader's gradebook exactly as a batch records it.
"""
