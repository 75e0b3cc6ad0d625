"""Real Dask clusters for the tests and benchmarks: `dask scheduler` and `dask worker`
processes on 127.0.0.1, as a TA would start them on several hosts."""
import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

DASK = [sys.executable, "-m", "distributed.cli.dask_scheduler"]
DASK_WORKER = [sys.executable, "-m", "distributed.cli.dask_worker"]


class Cluster:
    def __init__(self, folder, tls=None):
        self.folder, self.tls = Path(folder), tls
        self.processes = []
        self.address = None

    def security(self):
        if not self.tls:
            return None
        from distributed.security import Security

        return Security(tls_ca_file=self.tls["ca"], tls_client_cert=self.tls["cert"],
                        tls_client_key=self.tls["key"], require_encryption=True)

    def client(self):
        from distributed import Client

        return Client(self.address, security=self.security(), timeout=30)

    def worker_pids(self):
        """{worker address: pid of the worker process (not its nanny)}."""
        with self.client() as client:
            return client.run(os.getpid)

    def wait_for_workers(self, count, timeout=90):
        with self.client() as client:
            client.wait_for_workers(count, timeout=timeout)


def _tls_options(tls):
    return ["--tls-ca-file", tls["ca"], "--tls-cert", tls["cert"], "--tls-key", tls["key"]] if tls else []


def _start(command, log, env):
    return subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)


@contextlib.contextmanager
def dask_cluster(folder, workers=2, worker_env=None, tls=None, wait=True):
    """A scheduler and `workers` workers (one thread each, with a nanny that restarts a
    killed worker) on 127.0.0.1; yields a Cluster."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    cluster = Cluster(folder, tls)
    scheduler_file = folder / "scheduler.json"
    log = open(folder / "cluster.log", "ab")
    env = dict(os.environ)
    protocol = "tls://" if tls else "tcp://"
    try:
        cluster.processes.append(_start(
            [*DASK, "--host", "127.0.0.1", "--port", "0", "--no-dashboard", "--scheduler-file", str(scheduler_file),
             "--protocol", protocol.rstrip(":/"), *_tls_options(tls)], log, env))
        deadline = time.monotonic() + 60
        while not scheduler_file.is_file() or not scheduler_file.read_text().strip():
            if time.monotonic() > deadline or cluster.processes[0].poll() is not None:
                raise RuntimeError(f"the test scheduler did not start: {(folder / 'cluster.log').read_text()[-2000:]}")
            time.sleep(0.1)
        cluster.address = json.loads(scheduler_file.read_text())["address"]
        for index in range(workers):
            cluster.processes.append(_start(
                [*DASK_WORKER, cluster.address, "--nthreads", "1", "--host", "127.0.0.1", "--no-dashboard",
                 "--memory-limit", "0", "--name", f"w{index}", "--local-directory", str(folder / f"w{index}"),
                 *_tls_options(tls)], log, {**env, **(worker_env or {})}))
        if wait and workers:
            cluster.wait_for_workers(workers)
        yield cluster
    finally:
        for process in reversed(cluster.processes):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            process.wait()
        log.close()


def make_certificates(folder):
    """A certificate authority and one certificate it signed (for every node), with openssl:
    the same commands docs/cluster.md gives. Returns {"ca", "cert", "key"} file names."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)

    def run(*args):
        subprocess.run(["openssl", *args], cwd=folder, check=True, capture_output=True)

    run("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key", "-out", "ca.pem",
        "-days", "30", "-subj", "/CN=autograder test CA")
    run("req", "-newkey", "rsa:2048", "-nodes", "-keyout", "node.key", "-out", "node.csr", "-subj", "/CN=node")
    run("x509", "-req", "-in", "node.csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial",
        "-out", "node.pem", "-days", "30")
    return {"ca": str(folder / "ca.pem"), "cert": str(folder / "node.pem"), "key": str(folder / "node.key")}
