"""The client's side of grading on Dask: `DaskScheduler` grades a batch (`autograder grade
--cluster`), `DaskPool` grades a service's submissions as they arrive. Both register the
batch's `GradingPlugin` (workers.py) and submit one `grade_task` per submission."""
import logging
import time
import urllib.request
import uuid
from concurrent.futures import Future
from dataclasses import replace
from pathlib import Path

import nbformat

from autograder.course import Course
from autograder.grading import cgroups
from autograder.grading.bundle import engine_hash, make_bundle
from autograder.grading.cluster.protocol import KILLED_TWICE, PLUGIN_PREFIX, ClusterError, batch_key
from autograder.grading.cluster.workers import GradingPlugin, grade_task, worker_isolation, worker_memory_bound
from autograder.grading.notebook import grade_cells, sha256
from autograder.grading.sandbox.isolation import NoSandbox
from autograder.grading.selfcheck import PoisonedInterpreter


CONNECT_TIMEOUT = 10  # seconds to reach the scheduler
WORKERS_TIMEOUT = 120  # seconds to wait for a first worker


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
            import distributed  # Dask is an optional extra: the [cluster] one
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
        from distributed import as_completed  # (optional, as in connect)
        from distributed.scheduler import KilledWorker  # (optional, as in connect)

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
            from autograder.grading.scheduler import worker_failure  # the local pool's module loads torch (1.5 s)

            return worker_failure(spec, submission, error)  # not proven the student's: retried next run
        except Exception as error:
            if future.status == "cancelled" or self.client is None or self.client.status != "running":
                raise ClusterError(f"lost the Dask scheduler at {self.address} during the batch; every result"
                                   " received so far is saved: run the same command again to grade the rest") from None
            from autograder.grading.scheduler import worker_failure  # the local pool's module loads torch (1.5 s)

            return worker_failure(spec, submission, error)
        if reply == KILLED_TWICE:
            return worker_killer(spec, assignment, submission)
        result, notebook = reply
        result.path = str(submission.path)
        if spec.keep_notebook:
            result.graded_notebook = notebook
        return result


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
    from autograder.grading.submission import invalid_result  # torch (1.9 s), for a rare result alone
    base = {"student_id": submission.student_id, "path": str(submission.path)}
    try:
        base["notebook_sha256"] = submission.sha256 or sha256(submission.path)
    except OSError:
        pass
    points = grade_cells(nbformat.read(assignment.source_notebook, as_version=4))
    return invalid_result(spec, points, base, message, time.perf_counter())


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
        from distributed.scheduler import KilledWorker  # (optional, as in connect)

        from autograder.grading.scheduler import worker_failure  # the local pool's module loads torch (1.5 s)

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


def _quiet_dask_logs():
    """Dask logs its retries, restarts and lost connections (with tracebacks); the TA reads our one line."""
    for name in ("distributed", "distributed.client", "distributed.scheduler", "distributed.worker",
                 "distributed.nanny", "distributed.core", "distributed.comm"):
        logging.getLogger(name).setLevel(logging.CRITICAL)


def _loopback(address):
    host = address.split("://", 1)[-1].rsplit(":", 1)[0].strip("[]")
    return host in ("localhost", "::1") or host.startswith("127.")


def _one_line(error):
    text = str(error).strip().splitlines()
    return f"{type(error).__name__}: {text[0]}" if text else type(error).__name__
