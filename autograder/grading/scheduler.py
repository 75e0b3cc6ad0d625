"""Where submissions are graded: the one interface a cluster backend must implement.

A scheduler takes a `BatchSpec` and an iterable of submissions and yields one
`record.Result` per submission as soon as it is ready, in any order, after
`require_sandbox` has said how student code will run. Each worker holds one warm
`GradingWorker` (its checks collected, one warm sandbox). `LocalScheduler` uses
processes on this machine; `cluster.DaskScheduler` uses Dask workers.
"""
import multiprocessing
import os
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from typing import Iterable, Iterator, Protocol, Sized

from autograder.grading.submission import BatchSpec, grade_job, worker_setup
from autograder.grading.sandbox import NoSandbox
from autograder.grading.selfcheck import PoisonedInterpreter
from autograder.record import ERROR, Result

REFUSALS = (NoSandbox, PoisonedInterpreter)  # a worker that must not grade stops the batch


class Scheduler(Protocol):
    def require_sandbox(self, unsafe_no_sandbox: bool) -> str:
        """The isolation student code will run with; raises NoSandbox before anything runs."""

    def grade(self, spec: BatchSpec, submissions: Iterable) -> Iterator[Result]:
        """Yield one result per submission, in completion order."""


class LocalScheduler:
    """`jobs` worker processes, each with its own warm sandbox.

    Workers are forked at once, before this process imports torch: each starts
    its sandbox first and gets ready while the sandbox starts, so every core has
    work from the first second (warming up here first left cores idle).
    """

    def __init__(self, jobs):
        self.jobs = max(1, int(jobs))

    def require_sandbox(self, unsafe_no_sandbox=False):
        from autograder.grading.sandbox import require_sandbox

        return require_sandbox(unsafe_no_sandbox)

    def grade(self, spec, submissions):
        if not isinstance(submissions, Sized):
            submissions = list(submissions)
        if not len(submissions):  # an upper bound: the pool is started before the items are known
            return
        context = multiprocessing.get_context("fork")
        slots = context.Queue()
        workers = min(self.jobs, len(submissions))
        for slot in range(workers):
            slots.put(slot)
        pin = workers <= len(_usable_cores())  # one core per worker and its sandbox
        pool = ProcessPoolExecutor(workers, mp_context=context, initializer=worker_setup,
                                   initargs=(spec, slots, pin))
        finished = False
        try:
            pending = {pool.submit(grade_job, s): s for s in submissions}  # may be worked out lazily
            while pending:
                done, _ = wait(pending, return_when=FIRST_COMPLETED)
                for future in done:
                    submission = pending.pop(future)
                    try:
                        yield future.result()
                    except REFUSALS:
                        raise
                    except Exception as error:  # a worker died: report, go on
                        yield worker_failure(spec, submission, error)
            finished = True
        finally:
            # Every result in: the idle workers close their sandboxes (and, without bubblewrap,
            # remove their scratch folders) before the grader may leave without Python's
            # tear-down. Stopped early: don't wait for busy workers; their sandboxes are
            # disposable and die with them, and the workers die with us (PR_SET_PDEATHSIG).
            pool.shutdown(wait=finished, cancel_futures=not finished)


def _usable_cores():
    try:
        return os.sched_getaffinity(0)
    except (AttributeError, OSError):
        return {0}


def worker_failure(spec, submission, error):
    """The grader's fault, not the student's: recorded as ERROR, never written, retried next run."""
    return Result(student_id=submission.student_id, path=str(submission.path), assignment=spec.assignment,
                  status=ERROR, seed=spec.seed, notes=[f"grader error: {type(error).__name__}: {error}"],
                  output="The grader failed on this submission; it will be graded again on the next run.")
