"""Where submissions are graded: the one interface a cluster backend must implement.

A scheduler takes a `BatchSpec` and an iterable of submissions and yields one
`record.Result` per submission as soon as it is ready, in any order, after
`require_sandbox` has said how student code will run. Each worker holds one warm
`GradingWorker` (its checks collected, one warm sandbox). `LocalScheduler` uses
processes on this machine; `cluster/client.py`'s `DaskScheduler` uses Dask workers.
"""
import multiprocessing
import os
import socket
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from typing import Iterable, Iterator, Protocol, Sized

from autograder.grading.submission import BatchSpec, grade_job, worker_setup
from autograder.grading.sandbox.isolation import NoSandbox, require_sandbox
from autograder.grading.selfcheck import PoisonedInterpreter
from autograder.record import ERROR, Result

REFUSALS = (NoSandbox, PoisonedInterpreter)  # a worker that must not grade stops the batch


class Scheduler(Protocol):
    def require_sandbox(self, unsafe_no_sandbox: bool) -> str:
        """The isolation student code will run with; raises NoSandbox before anything runs."""

    def grade(self, spec: BatchSpec, submissions: Iterable) -> Iterator[Result]:
        """Yield one result per submission, in completion order."""

    # Optional: `start(spec, count)`, called just before `grade`, begins what takes long
    # (LocalScheduler launches its workers' sandboxes); `grade` ends it.


WORKER_PRELOAD = ["autograder.checks.runner"]  # torch and pytest: about 1 s of CPU to import


class LocalScheduler:
    """`jobs` worker processes, each with its own warm sandbox.

    Workers come from multiprocessing's fork server, which imports torch and pytest
    once (`WORKER_PRELOAD`) and forks every worker from there: each worker used to
    import them itself. `start()` launches the server and the workers' first sandboxes
    early, so that all of them warm up together while this process reads the
    submissions. This process itself never imports torch. Where there is no fork
    server, workers are forked from this process and start their own sandboxes.
    """

    def __init__(self, jobs):
        self.jobs = max(1, int(jobs))
        self.context = _worker_context()
        self.forks_caller = self.context.get_start_method() == "fork"  # no fork server here
        self.launched = []  # sandboxes started by start(), one per worker slot

    def start(self, spec, count):
        """Start what takes long before `grade`: the fork server (it imports torch) and the
        first sandbox of each of the workers `count` submissions need; returns at once.

        The sandboxes start here, not in the workers, because a worker exists only once the
        fork server has imported: started here they warm up meanwhile, and every core has
        work from the first second. Each worker adopts its slot's (see `sandbox.Handover`)."""
        if self.forks_caller:
            return
        from multiprocessing import forkserver

        forkserver.ensure_running()
        try:
            self.launched = _launch_sandboxes(spec, min(self.jobs, count))
        except Exception:  # each worker starts its own and reports what goes wrong, as before
            self._close_launched()

    def require_sandbox(self, unsafe_no_sandbox=False):
        return require_sandbox(unsafe_no_sandbox)

    def grade(self, spec, submissions):
        if not isinstance(submissions, Sized):
            submissions = list(submissions)
        if not len(submissions):  # an upper bound: the pool is started before the items are known
            self._close_launched()
            return
        context = self.context
        slots = context.Queue()
        workers = min(self.jobs, len(submissions))
        for slot in range(workers):
            slots.put(slot)
        pin = workers <= len(_usable_cores())  # one core per worker and its sandbox
        handovers = [sandbox.handover() for sandbox in self.launched if sandbox.slot < workers]
        held, lifeline = socket.socketpair()  # see submission._die_with_grader
        pool = ProcessPoolExecutor(workers, mp_context=context, initializer=worker_setup,
                                   initargs=(spec, slots, pin, handovers, lifeline))
        finished = submitted = False
        try:
            if not self.forks_caller:
                # Every worker now, as a forked pool does: from a fork server the pool would
                # start them one per submission, and a run of identical answers could leave a
                # slot (and its launched sandbox) unused.
                start_workers(pool)
                for sandbox in self.launched:
                    # Each worker holds its own copy now: a worker that crashes closes the
                    # last one, and its sandbox ends instead of living on to the batch's end.
                    sandbox.control.close()
            pending = {pool.submit(grade_job, s): s for s in submissions}  # may be worked out lazily
            submitted = bool(pending)
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
            # tear-down. Stopped early: don't wait for busy workers; closing the lifeline
            # ends them, and their sandboxes are disposable. The pool waits for its workers
            # only once something was submitted to them.
            pool.shutdown(wait=finished, cancel_futures=not finished)
            held.close()
            lifeline.close()
            self._close_launched(reap=finished and submitted)

    def _close_launched(self, reap=True):
        """Finished: the workers have closed their sandboxes, and here they are reaped.
        Otherwise a worker may still be closing its own: killed, but not reaped."""
        launched, self.launched = self.launched, []
        for sandbox in launched:
            if reap:
                sandbox.close(graceful=False)
            else:
                sandbox.abandon()


def start_workers(pool):
    """Start every worker of the ProcessPoolExecutor `pool` now, and the thread that manages them.

    The executor starts that thread only with its first task, and shutdown() stops only workers
    it manages: workers started without it (a service idle until it stops, a batch whose every
    answer was given again) would live on until the grader's lifeline ended them, killed
    before they close their sandboxes, so each left its agent folder in /tmp."""
    if hasattr(pool, "_launch_processes"):
        pool._launch_processes()
    if hasattr(pool, "_start_executor_manager_thread"):
        pool._start_executor_manager_thread()


def _launch_sandboxes(spec, count):
    """`count` sandboxes for the workers' slots, each started on its slot's core."""
    from pathlib import Path

    from autograder.course import Course
    from autograder.grading.submission import core_of, slot_sandbox

    assignment = Course(Path(spec.course)).assignment(spec.assignment)
    mask = _usable_cores()
    pin = count <= len(mask) and hasattr(os, "sched_setaffinity")
    launched = []
    try:
        for slot in range(count):
            sandbox = slot_sandbox(spec, assignment, slot)
            launched.append(sandbox)
            if pin:
                os.sched_setaffinity(0, {core_of(slot, mask)})  # this thread only; the sandbox inherits it
            sandbox.launch(for_another=True)
    except BaseException:
        for sandbox in launched:
            sandbox.close(graceful=False)
        raise
    finally:
        if pin:
            os.sched_setaffinity(0, mask)
    return launched


def _worker_context():
    try:
        context = multiprocessing.get_context("forkserver")
    except ValueError:  # no fork server on this platform
        return multiprocessing.get_context("fork")
    context.set_forkserver_preload(WORKER_PRELOAD)  # only these: never the caller's __main__
    return context


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


class WarmPool:
    """`jobs` warm workers that stay up between submissions, for a service that grades them as
    they arrive (`autograder serve`): the workers and their sandboxes start once, and each
    submission costs only its own grading.

    `submit(submission)` returns a Future of its `Result`. A worker that dies is the grader's
    fault: the pool is made again for the next submission and the Future says so (as a
    worker_failure ERROR result, which the caller may grade again)."""

    def __init__(self, spec, jobs):
        self.spec, self.jobs = spec, max(1, int(jobs))
        self.context = _worker_context()
        self.pool = None
        self.held = self.lifeline = None

    def start(self):
        """Start the workers (and their sandboxes) now, not at the first submission."""
        if self.pool is not None:
            return self
        slots = self.context.Queue()
        for slot in range(self.jobs):
            slots.put(slot)
        self.held, self.lifeline = socket.socketpair()  # see submission._die_with_grader
        pin = self.jobs <= len(_usable_cores())
        self.pool = ProcessPoolExecutor(self.jobs, mp_context=self.context, initializer=worker_setup,
                                        initargs=(self.spec, slots, pin, (), self.lifeline))
        start_workers(self.pool)
        return self

    def submit(self, submission):
        from concurrent.futures import Future
        from concurrent.futures.process import BrokenProcessPool

        self.start()
        outer = Future()

        def done(inner):
            try:
                outer.set_result(inner.result())
            except REFUSALS as refusal:
                outer.set_exception(refusal)
            except BrokenProcessPool as error:
                self._broken()
                outer.set_result(worker_failure(self.spec, submission, error))
            except Exception as error:  # noqa: BLE001 (a worker's fault, never the student's)
                outer.set_result(worker_failure(self.spec, submission, error))

        try:
            self.pool.submit(grade_job, submission).add_done_callback(done)
        except BrokenProcessPool as error:
            self._broken()
            outer.set_result(worker_failure(self.spec, submission, error))
        return outer

    def _broken(self):
        """A worker died (killed, out of memory): the next submission gets a fresh pool."""
        pool, self.pool = self.pool, None
        if pool is not None:
            pool.shutdown(wait=False, cancel_futures=False)
        self._close_lifeline()

    def _close_lifeline(self):
        for end in (self.held, self.lifeline):
            if end is not None:
                end.close()
        self.held = self.lifeline = None

    def close(self):
        """Stop the workers: those grading are waited for."""
        pool, self.pool = self.pool, None
        if pool is not None:
            pool.shutdown(wait=True, cancel_futures=True)
        self._close_lifeline()
