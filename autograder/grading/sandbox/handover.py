"""A sandbox launched by one process and used by another.

The grader's main process launches every local worker's first sandbox at once, so they start
while the workers are still being made; each worker adopts its slot's (`Sandbox.adopt`)."""
import contextlib
import os
import signal
import socket
import subprocess
import time
from dataclasses import dataclass


UNREAPED = []  # abandoned sandboxes' processes (see Sandbox.abandon)


@dataclass
class Handover:
    """A launched sandbox, as the process adopting it receives it.

    The grader's main process launches every local worker's first sandbox at once, so
    they start while the workers themselves are still being made; each worker adopts
    its slot's. The control socket crosses to the worker as a duplicated descriptor
    (multiprocessing pickles sockets so when it starts a process); the rest is plain data.
    """
    slot: int
    pid: int
    control: socket.socket
    stderr_path: str
    scratch: str | None
    agent: str


class AdoptedProcess:
    """The part of `subprocess.Popen` a `Sandbox` uses, for a process that is not our child.

    Its launcher reaps it only after the batch, so until then its pid (and process group,
    the same number: a new session) cannot be anyone else's, and /proc tells whether it
    has ended: a zombie has. How it ended is the launcher's to know."""

    def __init__(self, pid, stderr):
        self.pid, self.stderr, self.returncode = pid, stderr, None

    def poll(self):
        if self.returncode is None and not _running(self.pid):
            self.returncode = -signal.SIGKILL
        return self.returncode

    def wait(self, timeout=None):
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.poll() is None:
            if deadline is not None and time.monotonic() >= deadline:
                raise subprocess.TimeoutExpired("sandbox", timeout)
            time.sleep(0.005)
        return self.returncode

    def kill(self):
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.pid, signal.SIGKILL)


def _running(pid):
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            state = stat.read().rsplit(b")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state not in (b"Z", b"X", b"x")
