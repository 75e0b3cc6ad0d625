"""Grade identical answers once.

Many students hand in the same thing: the untouched release, a resubmission that
changed nothing graded, a regrade of a class. A submission's *answers key* is a
hash of everything that can change its result:

* what runs: the sanitized cells, in order, and what sanitizing restored;
* what judges it: the course bundle (the assignment's checks, settings, sandbox
  code and hints, the solutions, the source and release notebooks) and the
  grader's own code. Not the late policy (`[late]` in assignment.toml, see
  grading/bundle.py): results are kept as graded, before any penalty, and the
  penalty is applied from the current policy whenever a result is recorded;
* how: the batch's seed, the limits and the isolation.

Within a batch only the first submission of each key is run; the others get a
copy of its result, marked `reused`. Across batches in the same output folder,
`.answers/<key>.json` keeps each key's result, so a rerun, a resubmission or a
late student with the same answers is not run again. Only a result that says why it
can be trusted (`Result.reusable`: its process ran every cell and answered every probe,
in a sandbox found clean afterwards) is kept: one whose process died, was killed or
timed out may have ended for reasons outside the student's code (a sandbox fault, a
machine under load), so the next batch runs those answers again. Changing a check, the
solutions, the seed or the grader changes every key, so nothing stale is reused.

The same key tells a rerun whether a student's earlier result of the same file is still
current (`current`): one made with other checks, settings or grader is graded again; one
whose late policy alone changed is kept, and its penalty recomputed (runs/late.py).
`.answers/<key>.made` holds what each key was made with but the answers and the seed (the
bundle, limits and isolation), so a rerun that changed nothing reads no notebook again.
"""
import hashlib
import json

from autograder.course import write_atomically
from autograder.grading.bundle import bundle_hash
from autograder.grading.notebook import InvalidNotebook, read_notebook_and_sha, sanitize
from autograder.record import GRADED, INVALID, read_result, write_result


class IdenticalAnswers:
    """Splits a batch into submissions to run and results to copy (see the module's doc)."""

    def __init__(self, assignment, spec, folder, source, release, use_cache=True):
        self.spec, self.source, self.release = spec, source, release
        self.cache = folder.answers  # a GradedFolder's .answers/
        self.use_cache = use_cache
        self.bundle = bundle_hash(assignment)
        self.made_with = _hash({"bundle": self.bundle, "limits": spec.limits, "isolation": spec.isolation})
        self.leaders = {}  # key -> the student id being run for it
        self.followers = {}  # key -> [(submission, sanitized notebook, sha)] waiting for the leader
        self.ready = []  # (result, sanitized notebook) reused from the cache
        self.keys = {}  # student id -> key, for the submissions that are run
        self.done = {}  # key -> the leader's result, once it is in

    def key(self, submission, seed=None):
        """(answers key, Sanitized, the file's SHA-256), or (None, None, None) for a file that
        cannot be read: such a file is graded (as invalid) on its own. `seed`: another seed
        than the batch's (that of an earlier result, see `current`)."""
        try:
            clean, sha = self.read(submission.path)
        except (InvalidNotebook, OSError):
            return None, None, None
        return self.key_of(clean, submission, seed), clean, sha

    def read(self, path):
        """(the notebook at `path` sanitized, the SHA-256 of the bytes read); InvalidNotebook
        (saying why) or OSError for a file that cannot be graded."""
        notebook, sha = read_notebook_and_sha(path, self.spec.max_notebook_bytes)
        return sanitize(notebook, self.source, self.release), sha

    def key_of(self, clean, submission, seed=None):
        """The answers key of `submission` read as `clean` (see `read`)."""
        seed = self.spec.seed if seed is None else seed
        what = {"bundle": self.bundle, "seed": seed, "limits": self.spec.limits,
                "isolation": self.spec.isolation, "cells": clean.cells, "tampering": clean.tampering,
                "ignored": list(submission.ignored)}
        return _hash(what)

    def current(self, submission, result):
        """Whether `result`, an earlier run's for this very file, is what this batch would make of
        it: made with these checks, settings, solutions, grader, limits and isolation. Its seed
        may differ: the seed is the graded folder's, chosen by the TA (--seed), and results of
        an earlier one stay until --force. An invalid result stands while the file still cannot
        be read (a raised --max-notebook-mb may make it readable: then it is graded)."""
        made_with = self._made_with(result.answers_key)
        if made_with is not None:  # the same file, so the same answers: what judged them decides
            return made_with == self.made_with
        key = self.key(submission, seed=result.seed)[0]
        if key is None:
            return result.status == INVALID
        return key == result.answers_key

    def _made_with(self, key):
        if not (len(key) == 64 and all(c in "0123456789abcdef" for c in key)):
            return None
        try:
            return (self.cache / f"{key}.made").read_text()
        except (OSError, UnicodeDecodeError):
            return None

    def to_run(self, submissions):
        """The submissions that must run, lazily; the others wait in `followers` or `ready`."""
        for submission in submissions:
            key, clean, sha = self.key(submission)  # the hash of the bytes that were read and are graded
            if key is None:
                yield submission
                continue
            notebook = clean.notebook
            if key in self.done:  # the leader's result is already in
                self.ready.append((self.done[key].copy_for(submission.student_id, submission.path, sha), notebook))
                continue
            if key in self.leaders:
                self.followers.setdefault(key, []).append((submission, notebook, sha))
                continue
            cached = self.cached(key)
            if cached is not None:
                self.ready.append((cached.copy_for(submission.student_id, submission.path, sha), notebook))
                continue
            self.leaders[key] = submission.student_id
            self.keys[submission.student_id] = key
            submission.sha256, submission.clean = sha, clean  # what was hashed is what gets graded
            yield submission

    def cached(self, key):
        """The result an earlier batch kept for `key`, when it may be given again; else None."""
        if not self.use_cache:
            return None
        cached = read_result(None, None, self.cache / f"{key}.json")
        return cached if cached is not None and cached.status == GRADED and cached.reusable else None

    def keep(self, key, result):
        """Keep `result`, graded from answers of `key`, for later batches (when it may be given again)."""
        result.answers_key = key
        if not (self.cache / f"{key}.made").exists():
            try:
                write_atomically(self.cache / f"{key}.made", self.made_with)
            except OSError:  # the next run reads the notebook again to know
                pass
        if result.status == GRADED and result.reusable:
            write_result(None, result, self.cache / f"{key}.json")

    def take_ready(self):
        ready, self.ready = self.ready, []
        return ready

    def copies_of(self, result):
        """[(result, sanitized notebook)] for the submissions that share `result`'s answers;
        the result itself is kept for later batches."""
        key = self.keys.get(result.student_id)
        if key is None:
            return []
        self.done[key] = result
        self.keep(key, result)
        # An ERROR (the grader's fault) is copied too: like it, the copies are retried next run.
        return [(result.copy_for(submission.student_id, submission.path, sha), notebook)
                for submission, notebook, sha in self.followers.pop(key, [])]

    def unanswered(self, spec):
        """Followers whose leader never came back (a scheduler that lost it): graded next run."""
        from autograder.grading.scheduler import worker_failure

        left = [(submission, notebook) for waiting in self.followers.values() for submission, notebook, _ in waiting]
        self.followers = {}
        return [(worker_failure(spec, submission, RuntimeError("its identical twin was not graded")), notebook)
                for submission, notebook in left]


def _hash(what):
    return hashlib.sha256(json.dumps(what, sort_keys=True, default=str).encode()).hexdigest()
