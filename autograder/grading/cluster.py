"""Grade on a Dask cluster: `autograder grade ... --cluster tcp://host:8786` (or `local:N`).

The same scheduler interface as the local pool (see scheduler.py), on Dask
distributed, which brings the scheduler, the workers, the retries, the dashboard
and the deployments (dask-jobqueue on Slurm, dask-kubernetes, the Helm chart).

* The course travels with the batch. A `GradingPlugin` carries the course bundle
  (bundle.py) and the batch's settings to every worker, joining ones included; the
  worker unpacks it into a private folder named by its hash, checks that it may run
  student code (the same refusal as locally, naming the worker) and starts one warm
  sandbox in a grading thread of its own. Each task forks a fresh child there, as
  locally.
* A task is keyed by the batch (bundle hash, seed, limits) and the submission (student,
  notebook hash): Dask's retry of a lost worker's task is the same task, so nothing is
  graded twice, and a resubmitted batch joins tasks that are still running.
* A submission that kills its worker is tried at most twice. Each attempt logs an
  event on the scheduler under the task's key; a third attempt does not run the
  student's code and the client records that student's error instead (so does
  Dask's own KilledWorker, if the scheduler gives up first).
* The client writes each result as it arrives (batch.py), so after a kill -9 of the
  client, a worker or the scheduler, running the same command again grades only
  what is missing.
"""
import fcntl
import os
import queue
import stat
import uuid
import tempfile
import threading
import time
from dataclasses import replace
from pathlib import Path

from autograder.grading import cgroups
from autograder.grading.sandbox.isolation import NoSandbox
from autograder.grading.selfcheck import PoisonedInterpreter


MAX_ATTEMPTS = 2  # a submission whose grading kills a worker is tried once more, then recorded
ATTEMPTS_TOPIC = "autograder-attempt-"
PLUGIN_PREFIX = "autograder-"
CONNECT_TIMEOUT = 10  # seconds to reach the scheduler
WORKERS_TIMEOUT = 120  # seconds to wait for a first worker
SLOTS = range(64, 128)  # sandbox user slots of cluster workers (the local pool uses 0, 1, ...)
STOP_TIMEOUT = 300  # seconds a stopping plugin waits for the submission it is grading


class ClusterError(RuntimeError):
    """The cluster cannot be used (unreachable, refused, no workers, lost); the message says why."""


def parse_cluster(text):
    """('local', N) for 'local:N', else ('address', text)."""
    if text.startswith("local:"):
        count = text.removeprefix("local:")
        if not count.isdigit() or int(count) < 1:
            raise ClusterError(f"--cluster {text}: write local:N with N a number of workers, such as local:2")
        return "local", int(count)
    if "://" not in text:
        text = f"tcp://{text}"
    return "address", text


def batch_key(bundle_hash, spec):
    """What names this batch on the cluster: the course bundle and every setting that changes a grade."""
    import hashlib
    import json

    settings = json.dumps({"seed": spec.seed, "limits": spec.limits, "isolation": spec.isolation,
                           "assignment": spec.assignment}, sort_keys=True)
    return hashlib.sha256(f"{bundle_hash}\0{settings}".encode()).hexdigest()[:20]


class DaskScheduler:
    """Grades a batch on a Dask cluster: a running scheduler's address, or `local:N`."""

    def __init__(self, cluster, security=None, say=None, unsafe_no_sandbox=False):
        self.kind, self.target = parse_cluster(cluster)
        self.security = security
        self.say = say or (lambda text: None)
        self.unsafe_no_sandbox = unsafe_no_sandbox
        self.client = self.local_cluster = None
        self.address = None
        self.memory_notes = []  # workers that can give no submission a memory cgroup, and why

    # -- connecting ------------------------------------------------------------
    def connect(self):
        try:
            import distributed
        except ImportError:
            raise ClusterError("grading on a cluster needs Dask distributed: pip install"
                               " 'attention-autograder[cluster]' (or pip install distributed)") from None
        _quiet_dask_logs()
        if self.client is not None:
            return self.client
        try:
            if self.kind == "local":
                self.local_cluster = distributed.LocalCluster(
                    n_workers=self.target, threads_per_worker=1, processes=True, memory_limit=0,
                    dashboard_address="127.0.0.1:0", host="127.0.0.1")
                self.client = distributed.Client(self.local_cluster)
            else:
                self.client = distributed.Client(self.target, security=self.security, timeout=CONNECT_TIMEOUT)
        except Exception as error:
            self.close()
            where = f"the Dask scheduler at {self.target}" if self.kind == "address" else "a local Dask cluster"
            raise ClusterError(f"cannot reach {where}: {_one_line(error)}") from None
        self.address = self.client.scheduler.address
        if self.address.startswith("tcp://") and not _loopback(self.address):
            self.say("Note: tcp:// is not encrypted: the hidden checks and solutions travel in the clear to"
                     " the workers. Off a private network, use tls:// (docs/cluster.md).")
        link = self._dashboard_link()
        self.say(f"Dask scheduler {self.address}" + (f"; dashboard: {link}" if link else ""))
        try:
            self.client.wait_for_workers(1, timeout=WORKERS_TIMEOUT)
        except Exception:
            self.close()
            raise ClusterError(f"the Dask scheduler at {self.address} has no workers (waited {WORKERS_TIMEOUT} s):"
                               " start some with `dask worker ADDRESS --nthreads 1`") from None
        return self.client

    def _dashboard_link(self):
        """Dask's dashboard, if it answers (without bokeh, Dask names one that does not)."""
        import urllib.request

        try:
            link = self.client.dashboard_link
            with urllib.request.urlopen(link, timeout=2) as page:
                return link if page.status == 200 else None
        except Exception:
            return None

    def close(self):
        for thing in (self.client, self.local_cluster):
            if thing is not None:
                try:
                    thing.close()
                except Exception:
                    pass
        self.client = self.local_cluster = None

    def require_sandbox(self, unsafe_no_sandbox=False):
        """Ask every worker now, before anything is written, whether it may run student code.

        Returns the isolation ('bubblewrap', or 'none' when some worker grades without a
        sandbox under the explicit opt-out); raises NoSandbox naming the first worker that refuses.
        """
        self.unsafe_no_sandbox = unsafe_no_sandbox
        client = self.connect()
        try:
            answers = client.run(worker_isolation, unsafe_no_sandbox)
        except Exception as error:
            raise ClusterError(f"could not ask the Dask workers about their sandbox: {_one_line(error)}") from None
        modes = set()
        for address, (mode, refusal) in sorted(answers.items()):
            if refusal:
                raise NoSandbox(f"the Dask worker {address} {refusal}")
            modes.add(mode)
        try:  # where a worker can make no cgroup per submission, the TA is told what goes uncounted
            bounds = client.run(worker_memory_bound)
        except Exception:
            bounds = {}
        self.memory_notes = [f"the Dask worker {address}: {why}" for address, why in sorted(bounds.items()) if why]
        for note in self.memory_notes:
            self.say(f"Note: {note}; each of its submissions' {cgroups.MEMORY_UNBOUNDED}.")
        return "none" if "none" in modes else "bubblewrap"

    # -- grading -----------------------------------------------------------------
    def grade(self, spec, submissions):
        from distributed import as_completed
        from distributed.scheduler import KilledWorker

        from autograder.course import Course
        from autograder.grading.bundle import make_bundle
        from autograder.grading.bundle import engine_hash

        client = self.connect()
        assignment = Course(Path(spec.course)).assignment(spec.assignment)
        bundle_hash, bundle = make_bundle(assignment)
        key = batch_key(bundle_hash, spec)
        plugin = GradingPlugin(key, bundle_hash, bundle, replace(spec, course="", keep_notebook=False),
                               engine_hash(), self.unsafe_no_sandbox)
        run = uuid.uuid4().hex[:12]  # attempts are counted per run: a rerun starts afresh
        pending, futures = {}, as_completed(with_results=False)
        try:
            try:
                client.register_plugin(plugin, name=PLUGIN_PREFIX + key)
            except (NoSandbox, PoisonedInterpreter, ClusterError):
                raise
            except Exception as error:
                raise ClusterError(f"the Dask workers could not take the course bundle: {_one_line(error)}") from None
            window = max(8, 4 * sum(client.nthreads().values()))  # notebooks in flight, not the whole class
            queue_ = iter(submissions)
            for finished in self._flow(client, key, run, queue_, pending, futures, window, spec, assignment):
                yield finished
            for future in futures:
                submission = pending.pop(future.key)
                yield self._outcome(spec, assignment, submission, future, KilledWorker)
                future.release()
                for finished in self._flow(client, key, run, queue_, pending, futures, window, spec, assignment):
                    yield finished
        finally:
            self._release_plugin(key)
            self.close()

    def _flow(self, client, key, run, submissions, pending, futures, window, spec, assignment):
        """Submit until `window` tasks are in flight; yields the results of unreadable files."""
        while len(pending) < window:
            submission = next(submissions, None)
            if submission is None:
                return
            future = self._submit(client, key, run, submission)
            if future is None:
                yield _unreadable(spec, assignment, submission)
            elif future.key in pending:  # the same student and notebook twice: graded once
                continue
            else:
                pending[future.key] = submission
                futures.add(future)

    def _release_plugin(self, key):
        """Stop this batch's sandboxes on the workers, unless another client is still using them
        (the same batch run twice at once: the last one out stops them)."""
        if self.client is None:
            return
        prefix = PLUGIN_PREFIX + key
        try:
            busy = any(str(task).startswith(prefix) for tasks in self.client.processing().values() for task in tasks)
            if not busy:
                self.client.unregister_worker_plugin(prefix)
        except Exception:
            pass

    def _submit(self, client, key, run, submission):
        from autograder.grading.notebook import sha256

        try:
            data = Path(submission.path).read_bytes()
        except OSError:
            return None
        digest = submission.sha256 or sha256(submission.path)
        task = f"{PLUGIN_PREFIX}{key}-{submission.student_id}-{digest[:16]}"
        return client.submit(grade_task, key, run, submission.student_id, Path(submission.path).name, data,
                             list(submission.ignored), key=task, pure=False)

    def _outcome(self, spec, assignment, submission, future, killed_worker):
        try:
            reply = future.result()
        except (NoSandbox, PoisonedInterpreter):
            raise
        except killed_worker as error:  # Dask gave up first (a scheduler allowing fewer failures than we do)
            from autograder.grading.scheduler import worker_failure

            return worker_failure(spec, submission, error)  # not proven the student's: retried next run
        except Exception as error:
            if future.status == "cancelled" or self.client is None or self.client.status != "running":
                raise ClusterError(f"lost the Dask scheduler at {self.address} during the batch; every result"
                                   " received so far is saved: run the same command again to grade the rest") from None
            from autograder.grading.scheduler import worker_failure

            return worker_failure(spec, submission, error)
        if reply == KILLED_TWICE:
            return worker_killer(spec, assignment, submission)
        result, notebook = reply
        result.path = str(submission.path)
        if spec.keep_notebook:
            result.graded_notebook = notebook
        return result


KILLED_TWICE = "killed-twice"


def worker_killer(spec, assignment, submission):
    """The student's own error: grading this notebook made a grading worker die, twice."""
    return _zero(spec, assignment, submission,
                 "running this notebook made the grading machine's worker process die, twice (for example by"
                 " using far more memory than the machine has, or by crashing Python itself), so it could not be"
                 " graded; look for code that allocates huge tensors or loops without end, run it yourself, and"
                 " hand it in again")


def _unreadable(spec, assignment, submission):
    return _zero(spec, assignment, submission, "the file could not be read")


def _zero(spec, assignment, submission, message):
    """An INVALID result (0 points, `message`) made on the client, as the worker would make it."""
    import nbformat

    from autograder.grading.submission import invalid_result
    from autograder.grading.notebook import grade_cells, sha256

    base = {"student_id": submission.student_id, "path": str(submission.path)}
    try:
        base["notebook_sha256"] = submission.sha256 or sha256(submission.path)
    except OSError:
        pass
    points = grade_cells(nbformat.read(assignment.source_notebook, as_version=4))
    return invalid_result(spec, points, base, message, time.perf_counter())


# -- on the workers ------------------------------------------------------------------
def worker_memory_bound(dask_worker=None):
    """None where this worker gives each submission a memory cgroup, else why not."""
    ok, why = cgroups.available()
    return None if ok else f"{why} (host {os.uname().nodename})"


def worker_isolation(unsafe_no_sandbox, dask_worker=None):
    """(isolation, refusal or None) on this worker (run through client.run)."""
    from autograder.grading.sandbox.isolation import require_sandbox
    from autograder.grading.selfcheck import verify

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
    from distributed import get_client, get_worker

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
        import asyncio

        try:  # off the worker's event loop: unpacking and the sandbox probe take a moment
            await asyncio.get_running_loop().run_in_executor(None, self._setup, worker.address,
                                                             worker.local_directory)
        except Exception as error:  # kept: a worker that joins later and fails here refuses every task
            self.setup_error = error
            raise

    def _setup(self, address, local_directory):
        from autograder.grading.bundle import unpack_bundle
        from autograder.grading.bundle import engine_hash

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
        from autograder.grading.notebook import Submission

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
        import asyncio

        await asyncio.get_running_loop().run_in_executor(None, self._teardown)

    def _teardown(self):
        import shutil

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
            from autograder.grading.submission import GradingWorker

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


# -- small things ----------------------------------------------------------------------
def _quiet_dask_logs():
    """Dask logs its retries, restarts and lost connections (with tracebacks); the TA reads our one line."""
    import logging

    for name in ("distributed", "distributed.client", "distributed.scheduler", "distributed.worker",
                 "distributed.nanny", "distributed.core", "distributed.comm"):
        logging.getLogger(name).setLevel(logging.CRITICAL)


def _loopback(address):
    host = address.split("://", 1)[-1].rsplit(":", 1)[0].strip("[]")
    return host in ("localhost", "::1") or host.startswith("127.")


def _one_line(error):
    text = str(error).strip().splitlines()
    return f"{type(error).__name__}: {text[0]}" if text else type(error).__name__


class DaskPool:
    """WarmPool's interface (grading/scheduler.py) on a Dask cluster, for a service that grades
    submissions as they arrive: the course bundle's plugin is registered once, so each worker
    keeps its sandbox warm, and each submission is one task. `submit` returns a Future of its
    Result; a worker killed under it is retried by Dask, then said as the grader's fault."""

    def __init__(self, scheduler, spec):
        self.scheduler, self.spec = scheduler, replace(spec, keep_notebook=False)  # the service reads it again
        self.key = self.run = self.assignment = None
        self.jobs = 1

    def start(self):
        from autograder.course import Course
        from autograder.grading.bundle import engine_hash, make_bundle

        if self.key is not None:
            return self
        client = self.scheduler.connect()
        self.assignment = Course(Path(self.spec.course)).assignment(self.spec.assignment)
        bundle_hash, bundle = make_bundle(self.assignment)
        self.key = batch_key(bundle_hash, self.spec)
        plugin = GradingPlugin(self.key, bundle_hash, bundle, replace(self.spec, course=""), engine_hash(),
                               self.scheduler.unsafe_no_sandbox)
        try:
            client.register_plugin(plugin, name=PLUGIN_PREFIX + self.key)
        except (NoSandbox, PoisonedInterpreter, ClusterError):
            raise
        except Exception as error:
            raise ClusterError(f"the Dask workers could not take the course bundle: {_one_line(error)}") from None
        self.run = uuid.uuid4().hex[:12]
        self.jobs = max(1, 2 * sum(client.nthreads().values()))  # a little queue on each worker, not the class
        return self

    def submit(self, submission):
        from concurrent.futures import Future

        from distributed.scheduler import KilledWorker

        from autograder.grading.scheduler import worker_failure

        self.start()
        outer = Future()
        try:
            future = self.scheduler._submit(self.scheduler.client, self.key, self.run, submission)
        except Exception as error:  # noqa: BLE001 (the cluster is gone: the grader's fault, tried again)
            outer.set_result(worker_failure(self.spec, submission, error))
            return outer
        if future is None:
            outer.set_result(_unreadable(self.spec, self.assignment, submission))
            return outer

        def done(finished):
            try:
                outer.set_result(self.scheduler._outcome(self.spec, self.assignment, submission, finished, KilledWorker))
            except (NoSandbox, PoisonedInterpreter) as refusal:
                outer.set_exception(refusal)
            except Exception as error:  # noqa: BLE001 (the scheduler lost: said, tried again)
                outer.set_result(worker_failure(self.spec, submission, error))

        future.add_done_callback(done)
        return outer

    def close(self):
        if self.key is not None:
            self.scheduler._release_plugin(self.key)
        self.scheduler.close()
