"""One sandbox's life: `Sandbox` launches its warm interpreter, forks a fresh child per
submission, carries the probes to it (and to forks of it), and ends, wipes and reaps what the
submission started."""
import contextlib
import os
import select
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from dataclasses import asdict
from pathlib import Path

from autograder import wire
from autograder.grading import cgroups
from autograder.grading.sandbox.agent_files import agent_dir, hold_agent_dir, remove_if_unheld
from autograder.grading.sandbox.commands import bwrap_command, plain_command
from autograder.grading.sandbox.handover import UNREAPED, AdoptedProcess, Handover
from autograder.grading.sandbox.isolation import NoSandbox, require_sandbox
from autograder.grading.sandbox.limits import Limits, in_words


# An id a caller may give one run of the grader (the tests do): bubblewrap's own process carries
# it, so a run's sandboxes can be told from those of another grader on the machine.
RUN_ID = "AUTOGRADER_RUN_ID"
START_TIMEOUT = 120  # seconds for a cold sandbox to import torch
# The child stops a cell at the time limit itself and reports which cells ran. The grader
# waits this much longer before it gives up on the child, so that report (not a race
# between the two clocks) decides what the student reads: the same on every machine.
REPORT_GRACE = 1.5
KEEP_INBOX = 32 * 2**20  # bytes of reply buffer kept between replies
_ENDED = object()  # in Sandbox.forks, a fork that is gone


class SandboxBroken(RuntimeError):
    """The sandbox stopped answering or broke the protocol; it will be restarted."""


class Sandbox:
    """One warm sandboxed interpreter that grades submissions one after another.

    Two channels: a control socket to the warm worker (start, end, quit) and,
    per submission, a fresh socket straight to that submission's child process
    (cell report, probes). The grader keeps the submission's deadline.
    """

    def __init__(self, slot=0, limits=None, unsafe_no_sandbox=False, conceal=(), extra_files=None):
        """`unsafe_no_sandbox`: without bubblewrap, run the agent as a plain process (as
        another user when we are root) instead of refusing; `conceal`: folders (the
        course) hidden from it then, where a private mount namespace allows;
        `extra_files`: the assignment's sandbox code and settings (see agent.py)."""
        self.slot = slot
        self.extra_files = dict(extra_files or {})
        self.limits = limits or Limits()
        self.unsafe_no_sandbox = unsafe_no_sandbox
        self.conceal = [str(c) for c in conceal]
        self.process = None
        self.control = None
        self.channel = None
        self.deadline = None
        self.agent = None
        self.agent_lock = None  # a shared lock on the agent folder while this sandbox may use it
        self.scratch = None
        self.stderr_path = None  # launched for another process: where its error output goes
        self.last_cpu = None
        self.last_peak = None  # bytes the last submission's cgroup held at most, where it had one
        self.last_clean = False  # whether the last submission ended with its sandbox found clean
        self.last_memory = None  # the student's words when the last submission reached its memory bound
        self.cgroup = None  # the running submission's (see cgroups.py)
        self.forks = []  # the open forks' sockets, innermost last (`open_fork`); _ENDED for one gone
        self.inbox = bytearray()  # replies are read into this one buffer, reused

    # life cycle
    def start(self):
        self.launch()
        return self.await_hello()

    def launch(self, for_another=False):
        """Start the sandbox process; it imports torch while the caller does other work.

        `for_another`: it will be handed over (see `handover`), so its error output goes
        to a file that the process adopting it can open, not to a pipe of ours."""
        self.close()
        self.prepare()
        ours, theirs = _socket_pair()
        try:
            if require_sandbox(self.unsafe_no_sandbox) == "bubblewrap":
                command = bwrap_command(self.slot, self.agent, theirs.fileno(), self.limits)
                # bubblewrap itself (outside the sandbox: --clearenv empties the student's) keeps
                # a run id its caller set, so the sandboxes of one run can be told from another's
                env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin")}
                if os.environ.get(RUN_ID):
                    env[RUN_ID] = os.environ[RUN_ID]
            else:
                command, self.scratch, env = plain_command(self.slot, theirs.fileno(), self.agent,
                                                            self.limits, self.conceal)
        except BaseException:
            ours.close()
            theirs.close()
            raise
        cwd = self.scratch or "/"
        errors = subprocess.PIPE
        if for_another:
            errors, self.stderr_path = tempfile.mkstemp(prefix="autograder-sandbox-", suffix=".err")
        try:
            self.process = subprocess.Popen(
                command, pass_fds=(theirs.fileno(),), env=env, cwd=cwd,
                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=errors,
                start_new_session=True,
            )
        except BaseException:
            ours.close()
            self.close()  # its scratch folder and error file
            raise
        finally:
            theirs.close()
            if for_another:
                os.close(errors)
        self.control = ours

    def handover(self):
        """What another process needs to adopt this launched sandbox (see `Handover`)."""
        return Handover(self.slot, self.process.pid, self.control, self.stderr_path, self.scratch, str(self.agent))

    def adopt(self, handover):
        """Use a sandbox that another process launched (and will reap, after the batch)."""
        self.close()
        self.agent, self.scratch, self.control = Path(handover.agent), handover.scratch, handover.control
        self._release_agent()
        self.agent_lock = hold_agent_dir(self.agent)
        errors = open(handover.stderr_path, "rb")
        os.unlink(handover.stderr_path)  # ours alone now; gone once closed
        self.process = AdoptedProcess(handover.pid, errors)

    def prepare(self):
        """Everything before the process: the sandbox's own code folder (shared and reused)."""
        for _ in range(3):  # another grader may be sweeping it away just now: then make it again
            if self.agent is None:
                self.agent = agent_dir(self.extra_files)
            if self.agent_lock is None:
                self.agent_lock = hold_agent_dir(self.agent)
            if self.agent_lock is not None and os.fstat(self.agent_lock).st_nlink > 0:
                return
            self._release_agent()
            self.agent = None

    def _release_agent(self, remove=False):
        """Let go of the agent folder; with `remove`, delete it too unless another sandbox holds it
        (the last sandbox of a run leaves nothing in the temporary folder)."""
        if self.agent_lock is not None:
            os.close(self.agent_lock)
            self.agent_lock = None
        if remove and self.agent is not None:
            remove_if_unheld(self.agent)
            self.agent = None

    def await_hello(self):
        try:
            hello = self._receive(self.control, START_TIMEOUT)
        except (SandboxBroken, TimeoutError) as error:
            detail = self._stderr_tail()
            self.close()
            raise SandboxBroken(f"the sandbox did not start: {error}; {detail}") from None
        if hello[0] != "hello":
            self.close()
            raise SandboxBroken(f"the sandbox said {hello[0]!r} instead of hello")
        world = hello[1].get("fresh_world", "ok") if type(hello[1]) is dict else "ok"
        if world not in ("ok", "not used"):
            self.close()
            raise NoSandbox(
                f"Refusing to run student code: bubblewrap works here, but a submission cannot get a world"
                f" of its own inside it ({world}), so one student's code could reach the next. The kernel"
                " must allow unprivileged user namespaces inside the sandbox (on Ubuntu 24.04 and later,"
                " AppArmor restricts them: sysctl kernel.apparmor_restrict_unprivileged_userns=0).")
        return hello[1]

    def ensure_started(self):
        if self.process is None or self.process.poll() is not None:
            self.start()

    def close(self, graceful=True):
        self._drop_channel()
        if self.process is None:
            self._remove_files()
            self._release_agent(remove=True)
            return
        if graceful:
            try:
                wire.write_frame(self.control.fileno(), wire.dump_request(("quit",)))
            except wire.WireError:
                pass
        self.control.close()
        try:
            self.process.wait(timeout=5 if graceful else 0)
        except subprocess.TimeoutExpired:
            pass
        if self.process.poll() is None:
            try:
                os.killpg(self.process.pid, 9)
            except (ProcessLookupError, PermissionError):
                self.process.kill()
            self.process.wait()
        if self.process.stderr is not None:
            self.process.stderr.close()
        self.process = None
        self._remove_files()
        self._release_agent(remove=True)  # its process is gone: the agent's code is needed no more
        cgroup, self.cgroup = self.cgroup, None
        if cgroup is not None:  # every process of the sandbox is gone now
            cgroup.remove()

    def _remove_files(self):
        if self.scratch:
            shutil.rmtree(self.scratch, ignore_errors=True)
            self.scratch = None
        if self.stderr_path:
            with contextlib.suppress(OSError):
                os.unlink(self.stderr_path)  # not adopted after all
            self.stderr_path = None

    def abandon(self):
        """Kill a launched sandbox that another process may still be using, without reaping
        it: as a zombie its pid (and process group) stays its own, so that process's own
        kill cannot reach anyone else. Kept here until this process ends."""
        if self.process is None:
            return
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.process.pid, signal.SIGKILL)
        self.control.close()
        UNREAPED.append(self.process)  # never collected, so never reaped by subprocess's clean-up
        self.process = None
        self._remove_files()
        self._release_agent(remove=True)  # kept while the process that adopted it still holds it

    def _drop_channel(self):
        for fork in self.forks:
            if fork is not _ENDED:
                fork.close()
        self.forks = []
        if self.channel is not None:
            self.channel.close()
            self.channel = None

    # talking
    def _stderr_tail(self):
        if self.process and self.process.poll() is not None and self.process.stderr is not None:
            return self.process.stderr.read().decode(errors="replace").strip()[-500:] or "no message"
        return "no answer"

    def _receive(self, sock, timeout):
        if timeout <= 0 or not select.select([sock], [], [], timeout)[0]:
            raise TimeoutError()
        try:
            return wire.load_reply(wire.read_reply_frame(sock.fileno(), deadline=time.monotonic() + timeout,
                                                         buffer=self.inbox))
        except wire.WireError as error:
            if "timed out" in str(error):
                raise TimeoutError() from None
            raise SandboxBroken(str(error)) from None
        finally:
            if len(self.inbox) > KEEP_INBOX:  # a rare huge reply: don't hold on to its memory
                self.inbox = bytearray()

    def _control(self, message, timeout=30):
        """A request to the warm worker itself; a broken worker is never reused."""
        try:
            wire.write_frame(self.control.fileno(), wire.dump_request(message))
            return self._receive(self.control, timeout)
        except (wire.WireError, SandboxBroken, TimeoutError) as error:
            self.close()
            raise SandboxBroken(str(error) or "no answer") from None

    def run(self, cells, seed):
        """Fork a fresh child that runs `cells` [(name, source)]; its cell report.

        Returns ("ran", report), ("timeout", seconds) or ("died", None). Raises
        SandboxBroken (the sandbox is closed then) when the submission's process ended
        before it could run a cell: that is never the student's doing.
        """
        self.ensure_started()
        spec = {"seed": seed, **asdict(self.limits)}
        ours, theirs = _socket_pair()
        handed = self._cgroup_files()
        try:
            wire.write_frame(self.control.fileno(), wire.dump_request(("start", spec)))
            socket.send_fds(self.control, [b"c"], [theirs.fileno(), *handed])
        except (wire.WireError, OSError) as error:
            self.close()
            raise SandboxBroken(str(error)) from None
        finally:
            theirs.close()
            for fd in handed:
                os.close(fd)
        self.channel = ours
        self.deadline = time.monotonic() + self.limits.timeout + REPORT_GRACE
        try:
            # The code goes straight to the child, never through the warm worker: what the
            # worker once held would stay in its heap, which every later child inherits.
            wire.write_frame(ours.fileno(), wire.dump_request(cells), deadline=self.deadline)
        except wire.WireError:
            pass  # the child is gone or stuck: reading its answer says which
        first = self._from_child()
        if first and first[0] == "started":  # its world is made: from here on, it is the student's code
            return self._from_child()
        why = first[1] if first[0] == "setup_failed" and type(first[1]) is str else first[0]
        ending = self.finish()
        self.close(graceful=False)
        raise SandboxBroken(f"the submission's process ended before running its first cell ({why}; {ending})")

    def _cgroup_files(self):
        """Open `cgroup.procs` files of a new cgroup for this submission ([] where none)."""
        # The cores this grader's worker may use (one, where the local pool pins it): the submission
        # is held to them and to one core's time, whatever affinity it gives itself.
        self.cgroup = cgroups.for_submission(self.limits.memory_bytes, self.limits.max_processes + 8,
                                             f"slot{self.slot}", cores=os.sched_getaffinity(0))
        if self.cgroup is None:
            return []
        try:
            return self.cgroup.descriptors()
        except OSError:
            self.cgroup.remove()
            self.cgroup = None
            return []

    def probe(self, method, args, kwargs):
        """Ask the submission (or the innermost fork of it that is open: `open_fork`) one probe."""
        sock = self._top()
        if sock is None or sock is _ENDED:
            return ("gone", None)
        try:
            wire.write_frame(sock.fileno(), wire.dump_request((method, args, kwargs)), deadline=self.deadline)
        except wire.WireError as error:
            if "timed out" in str(error):  # it stopped reading: same as running out of time
                self._drop(sock)
                return ("timeout", self.limits.timeout)
            # otherwise the child is gone; reading says how
        return self._from(sock)

    def _top(self):
        """The socket probes go to: the innermost open fork's, else the submission's own."""
        return self.forks[-1] if self.forks else self.channel

    def _from_child(self):
        return self._from(self.channel)

    def _from(self, sock):
        try:
            return self._receive(sock, self.deadline - time.monotonic())
        except TimeoutError:
            self._drop(sock)
            return ("timeout", self.limits.timeout)
        except SandboxBroken as error:  # died, or sent something that is not plain data
            self._drop(sock)
            return ("died", None) if "closed" in str(error) else ("unreadable", str(error))

    def _drop(self, sock):
        if sock in self.forks:
            sock.close()
            self.forks[self.forks.index(sock)] = _ENDED  # its probes meet its end, never another's channel
        else:
            self._drop_channel()

    # forks of the submission (inside/agent.py `_fork`)
    def open_fork(self, sealed=False):
        """Ask the process probes go to now (the submission, or the innermost open fork) to fork:
        probes go to the new fork from now on, until `close_fork`. A `sealed` fork (inside/world.py
        `seal`) answers what-if runs and can pass nothing back. Returns "" when the fork answers,
        else why not (nothing is open then: probes go where they went)."""
        parent = self._top()
        if parent is None or parent is _ENDED:
            return "the submission's process had already ended"
        ours, theirs = _socket_pair()
        try:
            wire.write_frame(parent.fileno(), wire.dump_request(("fork", [sealed], {})), deadline=self.deadline)
            socket.send_fds(parent, [b"f"], [theirs.fileno()])
        except (wire.WireError, OSError) as error:
            ours.close()
            self._drop(parent)
            return f"the submission's process could not be asked ({error})"
        finally:
            theirs.close()
        self.forks.append(ours)
        hello = self._from(ours)
        if hello and hello[0] == "forked":
            return ""
        why = self.close_fork()
        return str(why[1]) if len(why) > 1 and type(why[1]) is str else f"it did not fork ({why[0]})"

    def seal(self):
        """Have the process probes go to seal itself for its last questions (what-ifs only from now
        on): "" when it did, else why not."""
        reply = self.probe("seal", (), {})
        if reply and reply[0] == "sealed":
            return ""
        return str(reply[1]) if len(reply) > 1 and type(reply[1]) is str else f"it did not seal ({reply[0]})"

    def close_fork(self):
        """End the innermost open fork: its parent's word on how it ended, ("joined", "ok" or how it
        ended) or ("refused", why), or how the parent itself was lost meanwhile."""
        fork = self.forks.pop()
        if fork is not _ENDED:
            fork.close()  # the fork reads the end, and ends
        parent = self._top()
        if parent is None or parent is _ENDED:
            return ("gone", None)
        reply = self._from(parent)
        return tuple(reply) if type(reply) in (list, tuple) and reply else ("unreadable", None)

    def finish(self):
        """Kill everything the submission started and wipe its files; how the child ended.

        `last_cpu` is then the CPU seconds the submission's process used (or None).
        """
        self._drop_channel()
        self.last_cpu = self.last_peak = self.last_memory = None
        self.last_clean = False
        if self.process is None:
            self._end_cgroup()
            return None
        try:
            reply = self._control(("end",))
        except SandboxBroken:
            self._end_cgroup()
            return None  # the worker was killed (closed now; the next run starts a new one)
        if reply[0] != "ready":  # "dirty": something survived the clean-up; start afresh
            self.close()
        if len(reply) > 2 and type(reply[2]) is float:
            self.last_cpu = reply[2]
        ending = reply[1] if len(reply) > 1 and type(reply[1]) is str else None
        self.last_memory = self._end_cgroup()
        self.last_clean = reply[0] == "ready" and self.last_memory is None and self.process is not None
        return ending

    def _end_cgroup(self):
        """Read and remove the submission's cgroup; the student's words if it reached its memory bound."""
        cgroup, self.cgroup = self.cgroup, None
        if cgroup is None:
            return None
        self.last_peak = cgroup.peak_bytes()
        note = self._memory_note(cgroup)
        if not cgroup.remove():  # something of the submission is still running: start afresh
            self.close(graceful=False)
            cgroup.remove()
        return note

    def memory_note(self):
        """The student's words if the running submission has reached its memory bound so far."""
        return None if self.cgroup is None else self._memory_note(self.cgroup)

    def _memory_note(self, cgroup):
        killed, reached = cgroup.memory_exceeded(), cgroup.memory_reached()
        bound = (f"your code reached the {in_words(self.limits.memory_bytes)} of memory a submission may use"
                 " (files in /tmp, memory files and shared memory count too)")
        if killed:
            return bound + ", so the system stopped it."
        if reached:
            return bound + ", so what it asked for beyond that was refused."
        return None


def _socket_pair():
    """A local socket pair with big buffers: fewer wake-ups for megabyte tensors."""
    pair = socket.socketpair()
    for sock in pair:
        for option in (socket.SO_SNDBUF, socket.SO_RCVBUF):
            sock.setsockopt(socket.SOL_SOCKET, option, 4 * 2**20)
    return pair
