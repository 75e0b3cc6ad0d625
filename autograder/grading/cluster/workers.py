"""What runs on the Dask workers: a `GradingPlugin` per batch unpacks the course bundle, refuses
where no sandbox works, and keeps one warm sandbox in a `GradingThread`; `grade_task` is one
submission's task."""
import asyncio
import fcntl
import os
import queue
import shutil
import stat
import tempfile
import threading
from dataclasses import replace
from pathlib import Path

from autograder.grading import cgroups
from autograder.grading.bundle import engine_hash, unpack_bundle
from autograder.grading.cluster.protocol import ATTEMPTS_TOPIC, KILLED_TWICE, MAX_ATTEMPTS, PLUGIN_PREFIX, ClusterError
from autograder.grading.notebook import Submission
from autograder.grading.sandbox.isolation import NoSandbox, require_sandbox
from autograder.grading.selfcheck import PoisonedInterpreter, verify

SLOTS = range(64, 128)  # sandbox user slots of cluster workers (the local pool uses 0, 1, ...)
STOP_TIMEOUT = 300  # seconds a stopping plugin waits for the submission it is grading


def worker_memory_bound(dask_worker=None):
    """None where this worker gives each submission a memory cgroup, else why not."""
    ok, why = cgroups.available()
    return None if ok else f"{why} (host {os.uname().nodename})"


def worker_isolation(unsafe_no_sandbox, dask_worker=None):
    """(isolation, refusal or None) on this worker (run through client.run)."""
    try:
        verify(comparisons=False)
        return require_sandbox(unsafe_no_sandbox), None
    except (NoSandbox, PoisonedInterpreter) as refusal:
        host = os.uname().nodename
        return None, f"(host {host}) refuses to grade: {refusal}"


def grade_task(batch, run, student_id, filename, data, ignored):
    """One submission, on whichever worker Dask chose: (Result, sanitized notebook) or KILLED_TWICE.

    Each attempt logs "start" and, once graded, "done" under the task's topic on the scheduler;
    starts that never got done are attempts whose worker died."""
    from distributed import get_client, get_worker  # Dask is an optional extra (the [cluster] one)

    worker = get_worker()
    plugin = worker.plugins.get(PLUGIN_PREFIX + batch)
    if plugin is None:
        raise RuntimeError(f"the Dask worker {worker.address} has no grading set-up for this batch")
    topic = f"{ATTEMPTS_TOPIC}{run}-{worker.get_current_task()}"
    client = get_client()
    events = [message for _, message in client.get_events(topic)]
    if events.count("start") - events.count("done") >= MAX_ATTEMPTS:  # its workers died, twice
        return KILLED_TWICE
    client.log_event(topic, "start")
    reply = plugin.grade(student_id, filename, data, ignored)
    client.log_event(topic, "done")
    return reply


try:
    from distributed import WorkerPlugin
except ImportError:  # DaskScheduler.connect says how to install it
    WorkerPlugin = object


class GradingPlugin(WorkerPlugin):
    """Carries one batch's course bundle and settings to each worker, and keeps its warm sandbox.

    Idempotent: its name is the batch key (bundle and settings), so registering the same
    batch again (a rerun after the client was killed, a second TA) keeps the workers'
    warm sandboxes and the tasks they are running instead of tearing them down.
    """

    idempotent = True

    def __init__(self, batch, bundle_hash, bundle, spec, engine, unsafe_no_sandbox):
        self.batch, self.bundle_hash, self.bundle = batch, bundle_hash, bundle
        self.spec, self.engine, self.unsafe_no_sandbox = spec, engine, unsafe_no_sandbox
        self.thread = self.setup_error = self.incoming = None

    async def setup(self, worker):
        try:  # off the worker's event loop: unpacking and the sandbox probe take a moment
            await asyncio.get_running_loop().run_in_executor(None, self._setup, worker.address,
                                                             worker.local_directory)
        except Exception as error:  # kept: a worker that joins later and fails here refuses every task
            self.setup_error = error
            raise

    def _setup(self, address, local_directory):
        if engine_hash() != self.engine:
            raise ClusterError(f"the Dask worker {address} runs another version of the grader than this"
                               " client: install the same version on both")
        isolation, refusal = worker_isolation(self.unsafe_no_sandbox)
        if refusal:
            raise NoSandbox(f"the Dask worker {address} {refusal}")
        home = Path(local_directory) / "autograder-bundles"
        folder = unpack_bundle(self.bundle, self.bundle_hash, home)
        self.bundle = None  # unpacked: no need to keep it in memory
        self.incoming = Path(tempfile.mkdtemp(prefix="incoming-", dir=home))
        spec = replace(self.spec, course=str(folder), isolation=isolation)
        self.thread = GradingThread(spec, address)
        self.thread.start()

    def grade(self, student_id, filename, data, ignored):
        if self.setup_error is not None:
            raise self.setup_error
        folder = Path(tempfile.mkdtemp(dir=self.incoming))
        path = folder / Path(filename).name
        try:
            path.write_bytes(data)
            return self.thread.grade(Submission(student_id, path, ignored))
        finally:
            path.unlink(missing_ok=True)
            folder.rmdir()

    async def teardown(self, worker):
        await asyncio.get_running_loop().run_in_executor(None, self._teardown)

    def _teardown(self):
        if self.thread is not None:
            self.thread.stop()
            self.thread.join(timeout=STOP_TIMEOUT)  # the submission being graded finishes first
        if self.incoming is not None:
            shutil.rmtree(self.incoming, ignore_errors=True)


class GradingThread(threading.Thread):
    """Owns one GradingWorker: the sandbox is started, used and stopped from this one
    thread, which lives as long as the plugin (bubblewrap's --die-with-parent follows the
    thread that started it), and grades one submission at a time. Every job put in its
    queue gets an answer, even when the thread could not start or is stopping."""

    def __init__(self, spec, address):
        super().__init__(name="autograder-grading", daemon=True)
        self.spec, self.address = spec, address
        self.jobs = queue.Queue()
        self.slot_lock = None
        self.closed = threading.Event()

    def run(self):
        worker, failure = None, None
        try:
            from autograder.grading.submission import GradingWorker  # torch (1.9 s): the client never needs it

            worker = GradingWorker(self.spec).setup(self._claim_slot())
            while (job := self.jobs.get()) is not None:
                submission, reply = job
                try:
                    result = worker.grade(submission)
                    reply.put((True, (result, worker.last_notebook)))
                except BaseException as error:  # noqa: BLE001 - handed to the waiting task
                    if isinstance(error, NoSandbox | PoisonedInterpreter):
                        error = type(error)(f"the Dask worker {self.address}: {error}")
                    reply.put((False, error))
        except BaseException as error:  # noqa: BLE001 - reported to every waiting task below
            failure = error if isinstance(error, NoSandbox | PoisonedInterpreter) else RuntimeError(
                f"the grading thread of Dask worker {self.address} stopped: {type(error).__name__}: {error}")
        finally:
            self.closed.set()
            if worker is not None:
                worker.close()
            if self.slot_lock is not None:  # the slot is free for the next batch's sandbox
                os.close(self.slot_lock)
            self._answer_the_rest(failure or RuntimeError("this batch's grading on the worker was stopped"))

    def _answer_the_rest(self, error):
        while True:
            try:
                job = self.jobs.get_nowait()
            except queue.Empty:
                return
            if job is not None:
                job[1].put((False, error))

    def grade(self, submission):
        if self.closed.is_set():
            raise RuntimeError("this batch's grading on the worker was stopped")
        reply = queue.Queue(maxsize=1)
        self.jobs.put((submission, reply))
        while True:
            try:
                ok, value = reply.get(timeout=1)
                break
            except queue.Empty:
                if self.closed.is_set() and reply.empty():
                    self._answer_the_rest(RuntimeError("this batch's grading on the worker was stopped"))
        if ok:
            return value
        raise value

    def stop(self):
        self.jobs.put(None)

    def _claim_slot(self):
        """A sandbox user slot no other worker on this host holds (a lock file per slot), in a
        folder that is ours alone (a folder or link planted by another user is refused)."""
        folder = Path(tempfile.gettempdir()) / f"autograder-slots-{os.geteuid()}"
        try:
            folder.mkdir(mode=0o700)
        except FileExistsError:
            pass
        info = os.lstat(folder)
        if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.geteuid() or info.st_mode & 0o077:
            raise RuntimeError(f"{folder} is not a private folder of this user: remove it")
        for slot in SLOTS:
            handle = os.open(folder / f"{slot}.lock", os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                os.close(handle)
                continue
            self.slot_lock = handle  # held while this thread's sandbox lives
            return slot
        raise RuntimeError(f"every sandbox slot on this host is taken ({len(SLOTS)} grading sandboxes at once)")
