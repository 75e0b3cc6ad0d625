"""The sandbox side: a warm interpreter that runs one submission at a time.

This file runs inside the sandbox with only the rest of `inside/` and `wire.py` next
to it (no checks, no solutions), and, where the assignment has one, its own
sandbox code as `assignment_sandbox.py` (RESOURCES for probes, a warm-up) and
`settings.json` (modules to pre-import). It imports torch and IPython once, then for each
submission forks a fresh child that

0. in bubblewrap, makes a world of its own: namespaces, scratch file system, keyring,
   cgroups, no capabilities and a syscall filter (see `world.py`),
1. gets its own empty home and working directories, limits and seeds,
2. runs the notebook's code cells in order with IPython (magics work; errors
   are recorded and execution goes on),
3. answers probes from the grader with plain data.

The parent (the "worker") hands the child a socket to the grader and, when the
submission is over, kills every process the child left behind and wipes the
scratch space. It never reads anything the child sends.
"""
import ctypes
import os
import resource
import shutil
import signal
import sys
import time
import traceback

SCRATCH = "/tmp"  # the only writable place: a size-limited tmpfs (set by main)
HAS_SHM = False  # whether /dev/shm is SCRATCH/.shm (set by main)
OWN_PID_NAMESPACE = True  # in bubblewrap: kill(-1) reaches only the sandbox, and each
# submission gets a fresh world of its own (world.py)
PR_SET_DUMPABLE, PR_SET_CHILD_SUBREAPER = 4, 36
CELL_ERROR_CHARS = 2000
NOT_RUN = "not run: the time limit was reached"
STOPPED = "TimeoutError: this cell was stopped because the time limit was reached"
REPAIR_SECONDS = 5.0  # a repair run's cells, together, at most (they ran within the limit once already)
MAX_REPAIR_CELLS = 200


class CellTimeout(BaseException):
    """Raised inside a cell that runs longer than its share of the time budget."""


def _prctl(option, value):
    try:
        ctypes.CDLL(None, use_errno=True).prctl(option, value, 0, 0, 0)
    except OSError:
        pass


# -- the child: one submission ------------------------------------------------
def _limit(kind, value):
    try:
        soft, hard = resource.getrlimit(kind)
        value = value if hard == resource.RLIM_INFINITY else min(value, hard)
        resource.setrlimit(kind, (value, value))
    except (ValueError, OSError):
        pass


def _apply_limits(spec):
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # too much output: a write error, not death
    with open("/proc/self/status") as status:
        vm = next(int(line.split()[1]) * 1024 for line in status if line.startswith("VmSize:"))
    _limit(resource.RLIMIT_AS, vm + spec["memory_bytes"])
    cpu = int(spec["timeout"]) + 2
    resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 1))
    _limit(resource.RLIMIT_NPROC, spec["max_processes"])
    _limit(resource.RLIMIT_FSIZE, spec["max_file_bytes"])
    _limit(resource.RLIMIT_NOFILE, 256)
    _limit(resource.RLIMIT_CORE, 0)
    # POSIX message queues live in the kernel, outside every folder we wipe, and
    # outlast the process: none at all.
    _limit(resource.RLIMIT_MSGQUEUE, 0)


def _fresh_dirs():
    home, work = os.path.join(SCRATCH, "home"), os.path.join(SCRATCH, "work")
    for path in (home, work):
        os.makedirs(path, exist_ok=True)
    os.environ["HOME"] = home
    os.chdir(work)
    return work


def _student_frames(error):
    """The traceback of a cell error, without IPython's own frames."""
    frames = [f for f in traceback.extract_tb(error.__traceback__)
              if "IPython" not in f.filename and "/agent/" not in f.filename]
    text = "".join(traceback.format_list(frames)) + "".join(traceback.format_exception_only(type(error), error))
    return text[-CELL_ERROR_CHARS:]


def _run_cells(shell, cells, deadline):
    report = []
    for name, source in cells:
        left = deadline - time.monotonic()
        entry = {"cell": name, "error": None, "seconds": 0.0}
        if left <= 0:
            entry["error"] = NOT_RUN
            report.append(entry)
            continue

        def on_alarm(signum, frame):
            raise CellTimeout()

        signal.signal(signal.SIGALRM, on_alarm)
        signal.setitimer(signal.ITIMER_REAL, left)
        started = time.monotonic()
        try:
            result = shell.run_cell(source, store_history=False, silent=False)
            error = result.error_in_exec or result.error_before_exec
        except CellTimeout as timeout:
            error = timeout
        except BaseException as other:  # SystemExit and friends raised outside the cell body
            error = other
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
        entry["seconds"] = round(time.monotonic() - started, 4)
        if isinstance(error, CellTimeout):
            entry["error"] = STOPPED
        elif error is not None:
            entry["error"] = _student_frames(error)
        report.append(entry)
    return report


def child_main(shell, spec, inbox, outbox, resources=None):
    from autograder import wire
    from autograder.inside.calls import ModuleCalls
    from autograder.inside.student import NamespaceStudent
    from autograder.wire import StudentError

    cells = wire.load_request(wire.read_frame(inbox))  # from the grader, never through the worker
    _enter_child(spec)
    # Everything up to here is ours: a death before this message is the sandbox's fault, and
    # the grader retries on a fresh sandbox instead of charging the student.
    wire.write_frame(outbox, wire.dump_reply(("started",)))
    _seed(spec["seed"])
    deadline = time.monotonic() + spec["timeout"]
    with ModuleCalls() as calls:  # which module call made which tensor (a variable's origin)
        report = _run_cells(shell, cells, deadline)
    wire.write_frame(outbox, wire.dump_reply(("ran", report)))
    student = NamespaceStudent(shell.user_ns, resources, calls=calls)

    def rerun(cells, seconds):  # a repair run's cells in a sealed fork (_answer_probes), noted as the first run was
        with calls:
            report = _run_cells(shell, cells, time.monotonic() + min(seconds, REPAIR_SECONDS))
        # what each raised, by its exception's name alone ("" for nothing): what the fork says is not quoted
        return [(entry["error"].strip().splitlines() or [""])[-1].split(":")[0][:80] if entry["error"] else ""
                for entry in report]

    _answer_probes(student, inbox, outbox, wire, StudentError, rerun=rerun)


def _enter_child(spec):
    """A session of its own, fresh folders, output to output.txt, the submission's limits, and
    first in line for the OOM killer."""
    os.setsid()
    _fresh_dirs()
    output = os.open(os.path.join(SCRATCH, "output.txt"), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.dup2(output, 1)
    os.dup2(output, 2)
    _apply_limits(spec)
    try:  # under memory pressure this process goes before the grader or the worker
        with open("/proc/self/oom_score_adj", "w") as adjust:
            adjust.write("1000")
    except OSError:
        pass


def _seed(seed):
    import random

    import numpy
    import torch

    random.seed(seed)
    numpy.random.seed(seed % 2**32)
    # the CPU generator is all there is here; torch.manual_seed would also queue a
    # seed call with a stack trace for every GPU backend (about 2 ms)
    torch.default_generator.manual_seed(seed)


def _answer_probes(student, inbox, outbox, wire, StudentError,  # noqa: N803 (the class, bound early)
                   sealed=False, rerun=None):
    """Answer the grader's probe calls on `student` until it closes the socket. `wire` and
    `StudentError` were imported before the student's code ran, which could have replaced
    what an import now would find.

    ("fork", [sealed]) comes with a socket of its own: a fork of this process answers the probes
    that come on it until the grader closes it, and this one then says how the fork ended
    ("joined"). What the fork did never comes back here: the grader asks the checks hidden until
    the due date there, and a sealed fork (world.seal) answers the what-if runs of localisation,
    which hand the reference's values to the student's code. ("seal",) seals this process itself,
    when the what-ifs are the last questions it will be asked. What-ifs are refused anywhere else.
    ("repair", [cells, seconds]) runs `cells` ([name, source] pairs: the student's own, with a mistake the
    feedback named undone, or the reference's answer to an exercise theirs builds on) with `rerun`,
    in a sealed fork alone, before the checks are asked again there: whether the feedback's "fails
    because of" holds (checks/plugin.py `run_repairs`). It answers ("repaired", [raised, ...]).
    (inbox and outbox are the same socket.)"""
    while True:
        try:
            request = wire.load_request(wire.read_frame(inbox))
        except wire.WireError:
            return  # the grader is done with this submission
        method, args, kwargs = request
        if method == "fork":
            reply = _fork(student, inbox, bool(args and args[0]), wire, StudentError, rerun) if not sealed \
                else ("refused", "a sealed process cannot fork")
            wire.write_frame(outbox, wire.dump_reply(reply))
            continue
        if method == "seal":  # the last questions are what-ifs: this process seals itself for them
            try:
                if not sealed:
                    from autograder.inside.world import seal

                    seal(outbox)
                sealed, reply = True, ("sealed",)
            except Exception as error:  # noqa: BLE001 (the grader then runs no what-ifs)
                reply = ("refused", f"{type(error).__name__}: {error}"[:300])
            wire.write_frame(outbox, wire.dump_reply(reply))
            continue
        if method == "repair":
            wire.write_frame(outbox, wire.dump_reply(_repair(rerun, args, sealed)))
            continue
        if method not in wire.PROBES:  # the contract's names alone: never another attribute of the object
            wire.write_frame(outbox, wire.dump_reply(("refused", f"no such question: {str(method)[:60]}")))
            continue
        try:
            if method == "trace" and kwargs.get("trials") and not sealed:
                raise StudentError("what-if runs are answered in a sealed fork only")
            reply = ("ok", getattr(student, method)(*args, **kwargs))
        except StudentError as error:
            reply = ("student_error", str(error))
        except BaseException as error:  # sys.exit / KeyboardInterrupt in forward
            reply = ("student_error", f"your code raised {type(error).__name__} ({error})")
        try:
            payload = wire.dump_reply(reply)
        except Exception as error:
            payload = wire.dump_reply(("student_error", f"the answer could not be sent back ({type(error).__name__})"))
        wire.write_frame(outbox, payload)


def _repair(rerun, args, sealed):
    """The reply to ("repair", [cells]): the cells run, or why not (see _answer_probes)."""
    cells = args[0] if args and type(args[0]) is list else None
    seconds = args[1] if len(args) > 1 and type(args[1]) in (int, float) and args[1] > 0 else REPAIR_SECONDS
    if not sealed or rerun is None:
        return ("refused", "repairs are run in a sealed fork only")
    if cells is None or len(cells) > MAX_REPAIR_CELLS or not all(
            type(cell) in (list, tuple) and len(cell) == 2 and all(type(part) is str for part in cell)
            for cell in cells):
        return ("refused", "a repair is a list of [name, source] cells")
    try:
        return ("repaired", rerun([tuple(cell) for cell in cells], seconds))
    except BaseException as error:  # noqa: BLE001 (the student's code under repair: say so, go on)
        return ("refused", f"the repair did not run ({type(error).__name__})")


def _fork(student, channel, sealed, wire, StudentError, rerun=None):  # noqa: N803
    """A fork of this process answering probes on the socket that came with the request; the
    reply for this channel once it has ended: ("joined", how it ended) or ("refused", why)."""
    import socket
    import signal

    carrier = socket.socket(fileno=os.dup(channel))
    try:
        _, fds, _, _ = socket.recv_fds(carrier, 1, 1)
    except OSError as error:
        return ("refused", f"no socket came with the request ({error})")
    finally:
        carrier.close()
    if not fds:
        return ("refused", "no socket came with the request")
    theirs = fds[0]
    others = _others() if sealed else ""
    if others:  # what runs beside the sealed fork could watch it: no what-ifs then
        os.close(theirs)
        return ("refused", others)
    # While a fork runs, nothing of the student's runs here: every signal waits (a handler of theirs
    # would run now), and this thread waits in waitpid. The fork has the signals as they were.
    blocked = signal.pthread_sigmask(signal.SIG_BLOCK, set(signal.valid_signals()))
    try:
        try:
            pid = os.fork()
        except OSError as error:  # the process bound, or memory
            os.close(theirs)
            return ("refused", f"it could not fork ({error.strerror})")
        if pid == 0:
            code = 0
            try:
                os.close(channel)  # the submission's own channel is this process's alone
                if sealed:
                    from autograder.inside.world import seal

                    seal(theirs)
                signal.pthread_sigmask(signal.SIG_SETMASK, blocked)
                wire.write_frame(theirs, wire.dump_reply(("forked",)))
                _answer_probes(student, theirs, theirs, wire, StudentError, sealed=sealed, rerun=rerun)
            except BaseException:
                code = 1
            os._exit(code)
        os.close(theirs)
        while True:
            try:
                _, status = os.waitpid(pid, 0)
                break
            except ChildProcessError:
                return ("joined", "it could not be waited for")
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, blocked)
    return ("joined", "ok" if os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0 else _describe_exit(status))


def _others():
    """Why this process is not alone in its world ("" when it is): a thread of its own, another
    process in its PID namespace, or a thread beside one of the forks it was forked from (each
    waits for its fork with every signal blocked) could watch a fork run."""
    try:
        if len(os.listdir("/proc/self/task")) > 1:
            return f"your code left {len(os.listdir('/proc/self/task')) - 1} thread(s) running"
        ancestors = _ancestors() if OWN_PID_NAMESPACE else set()
        others = [int(entry) for entry in os.listdir("/proc") if entry.isdigit() and int(entry) != os.getpid()] \
            if OWN_PID_NAMESPACE else sorted(_descendants())  # without a namespace of its own: what it started
        strangers = [pid for pid in others if pid not in ancestors]
        if strangers:
            return f"your code left {len(strangers)} process(es) running"
        busy = [pid for pid in ancestors if len(os.listdir(f"/proc/{pid}/task")) > 1]
        if busy:
            return "your code left threads running"
    except OSError as error:
        return f"its processes cannot be listed ({error.strerror})"
    return ""


def _ancestors():
    """The processes this one was forked from, in its PID namespace."""
    found, pid = set(), os.getpid()
    while pid > 1:
        with open(f"/proc/{pid}/stat") as stat:
            pid = int(stat.read().rsplit(")", 1)[1].split()[1])
        if pid > 0:
            found.add(pid)
    return found


# -- the worker: forks children and cleans up after them --------------------------
class Worker:
    """Talks to the grader over a control socket; never reads what a child sends.

    For each submission the grader passes in one end of a fresh socket pair: the
    child answers probes on it directly, and once the grader closes its end
    nothing the child left behind can reach the grader.
    """

    def __init__(self, control, resources=None):
        from autograder import wire

        self.wire = wire
        self.resources = resources
        self.control = control
        self.child = None
        self.child_cpu = None  # CPU seconds the last child used, once it is reaped
        self.state = _own_state()  # as it must be again after every submission
        self.shell = _make_shell()

    def reply(self, message):
        self.wire.write_frame(self.control.fileno(), self.wire.dump_reply(message))

    def serve(self):
        while True:
            message = self.wire.load_request(self.wire.read_frame(self.control.fileno()))
            if message[0] == "start":
                self.start(message[1])
            elif message[0] == "end":
                status = self.child_status()
                clean = self.end()
                # Anything left behind would reach the next student: then this sandbox
                # must be replaced, and the grader does so when it does not hear "ready".
                self.reply(("ready" if clean else "dirty", status, self.child_cpu))
            elif message[0] == "quit":
                self.end()
                return

    def start(self, spec):
        import socket

        self.end()
        _, fds, _, _ = socket.recv_fds(self.control, 1, 8)  # its channel, and up to 4 cgroups' files
        channel, cgroup_files = fds[0], fds[1:]
        pid = os.fork()
        if pid == 0:
            code = 0
            try:
                self.control.close()
                if OWN_PID_NAMESPACE:
                    _enter_fresh_world(spec, cgroup_files, channel)  # returns in the submission's process only
                else:
                    from autograder.inside.world import join_cgroups

                    join_cgroups(cgroup_files)
                child_main(self.shell, spec, channel, channel, self.resources)
            except BaseException:
                code = 1
            os._exit(code)
        os.close(channel)
        for fd in cgroup_files:
            os.close(fd)
        self.child, self.child_cpu = pid, None

    def child_status(self):
        """How the child ended, if it already has (None while it still runs)."""
        if self.child is None:
            return None
        try:
            pid, code, usage = os.wait4(self.child, os.WNOHANG)
        except ChildProcessError:
            return None
        if pid == 0:
            return None
        self.child_cpu = usage.ru_utime + usage.ru_stime
        return _describe_exit(code)

    def end(self):
        """Kill the child and everything it started, wipe the scratch space; True if clean."""
        if self.child is None:
            return True
        pid, self.child = self.child, None
        try:
            if self.child_cpu is None:  # not reaped yet, so `pid` is still our child's, never another's
                _await_exit(pid)
            cpu = _kill_everything(pid, OWN_PID_NAMESPACE)
            if self.child_cpu is None:
                self.child_cpu = cpu
            return (_wipe(SCRATCH) and (not OWN_PID_NAMESPACE or _clean_ipc())
                    and _own_state() == self.state)
        except Exception:
            return False


def _enter_fresh_world(spec, cgroup_files, channel):
    """In the forked child: make the submission's own world (world.py). This process stays
    outside as its keeper and never returns; the submission's process returns."""
    from autograder.inside import world

    def fail(error):
        from autograder import wire

        try:  # the grader says why in its message (no student code has run: this is ours)
            wire.write_frame(channel, wire.dump_reply(("setup_failed", f"{type(error).__name__}: {error}"[:500])))
        finally:
            os._exit(world.SETUP_FAILED)

    try:
        world.join_cgroups(cgroup_files)
        world.unshare_world(SCRATCH, spec.get("scratch_bytes", 512 * 2**20), spec.get("max_files", 20000))
        pid = os.fork()
    except BaseException as error:
        fail(error)
    if pid:
        os.close(channel)  # only the submission's process talks to the grader: its end is the end
        world.keep(pid)
    try:
        world.enter_world()
    except BaseException as error:
        fail(error)


def _world_trial():
    """Make a submission's world once, in a forked process, before any student is graded:
    "ok", or why it cannot be made on this machine (the grader then refuses to grade)."""
    from autograder import wire

    reader, writer = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(reader)
        try:
            _enter_fresh_world({"scratch_bytes": 2**20, "max_files": 64}, [], writer)  # a failure writes why
            wire.write_frame(writer, wire.dump_reply(("ok",)))  # the submission's process, in its world
        finally:
            os._exit(0)
    os.close(writer)
    try:
        answer = wire.load_reply(wire.read_frame(reader, deadline=time.monotonic() + 10))
    except Exception as error:
        answer = ("setup_failed", f"no answer ({error})")
    finally:
        os.close(reader)
        _kill_everything(pid, OWN_PID_NAMESPACE)
    if answer and answer[0] == "ok":
        return "ok"
    return str(answer[1]) if len(answer) > 1 else "no answer"


def _own_state():
    """What a child (same uid) could change in the worker or its scratch folder and so pass
    on to the next student: the worker's limits, priority, scheduling policy, I/O priority
    and cores, the scratch folder's mode and extended attributes (ACLs are kept in them).
    A change means a fresh sandbox."""
    from autograder.inside.world import io_priority

    limits = {name: resource.getrlimit(getattr(resource, name))
              for name in dir(resource) if name.startswith("RLIMIT_")}
    try:
        attributes = sorted(os.listxattr(SCRATCH))
    except OSError:
        attributes = None
    return (limits, os.getpriority(os.PRIO_PROCESS, 0), sorted(os.sched_getaffinity(0)),
            os.sched_getscheduler(0), os.sched_getparam(0).sched_priority, io_priority(),
            os.stat(SCRATCH).st_mode, attributes)


def _descendants():
    me, parents = os.getpid(), {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as stat:
                    parents[int(entry)] = int(stat.read().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
    found, frontier = set(), {me}
    while frontier:
        frontier = {pid for pid, parent in parents.items() if parent in frontier and pid not in found}
        found |= frontier
    return found


def _kill_everything(pid, own_pid_namespace):
    """SIGKILL the child and every descendant (orphans come back to us: subreaper).

    Returns the CPU seconds the child and what it left used, if the child was reaped here
    (its keeper's, with the submission's process, which the keeper reaps unless killed)."""
    cpu, others = None, 0.0
    for _ in range(1000):
        if own_pid_namespace:
            try:
                os.kill(-1, signal.SIGKILL)  # everything in the sandbox but us and its init
            except ProcessLookupError:
                pass
        victims = _descendants()
        for victim in victims:
            try:
                os.kill(victim, signal.SIGKILL)
            except ProcessLookupError:
                pass
        while True:  # reap
            try:
                reaped, _, usage = os.wait4(-1, os.WNOHANG)
            except ChildProcessError:
                break
            if reaped == 0:
                break
            if reaped == pid:
                cpu = usage.ru_utime + usage.ru_stime
            else:
                others += usage.ru_utime + usage.ru_stime
        if not victims:
            return None if cpu is None else cpu + others
        time.sleep(0.001)
    return None if cpu is None else cpu + others


def _await_exit(pid, timeout=1.0):
    """Kill the submission's own process (not yet reaped: the caller makes sure) and sleep
    until it has exited. Its memory is freed on its way out, which takes a while for a big
    process; polling /proc instead woke this process again and again while that exit
    needed the same core."""
    import select

    try:
        os.kill(pid, signal.SIGKILL)
        handle = os.pidfd_open(pid)
    except (ProcessLookupError, OSError, AttributeError):
        return
    try:
        waiting = select.poll()
        waiting.register(handle, select.POLLIN)
        waiting.poll(timeout * 1000)
    finally:
        os.close(handle)


def _describe_exit(code):
    if os.WIFSIGNALED(code):
        number = os.WTERMSIG(code)
        name = {signal.SIGKILL: "SIGKILL (usually: out of memory or time)",
                signal.SIGXCPU: "SIGXCPU (CPU time limit)",
                signal.SIGSEGV: "SIGSEGV (a crash)"}.get(number, signal.Signals(number).name)
        return f"your code's process was killed by {name}"
    return f"your code ended the Python process (exit code {os.WEXITSTATUS(code)})"


SHM_DIR = ".shm"  # the scratch folder that /dev/shm shows: emptied, never removed (it is mounted)


def _wipe(folder):
    """Empty `folder` (and its /dev/shm folder); True if it really is empty afterwards.

    A submission may leave directories without permissions; we own them (same
    uid), so we make every directory accessible first, then remove bottom-up.
    """
    shm = os.path.join(folder, SHM_DIR)
    if HAS_SHM and os.path.isdir(shm) and not os.path.islink(shm):  # (one a student made is wiped)
        return _wipe_all(shm) and _wipe_all(folder, keep=SHM_DIR)
    # A scratch that had /dev/shm's folder and lost it: the sandbox is replaced.
    return _wipe_all(folder) and not (folder == SCRATCH and HAS_SHM)


def _wipe_all(folder, keep=None):
    for _ in range(3):
        for root, dirs, _files in os.walk(folder):
            for name in dirs:
                if root == folder and name == keep:
                    continue
                try:
                    os.chmod(os.path.join(root, name), 0o700, follow_symlinks=False)
                except (OSError, NotImplementedError):
                    pass
        for entry in os.listdir(folder):
            if entry == keep:
                continue
            path = os.path.join(folder, entry)
            try:
                if os.path.isdir(path) and not os.path.islink(path):
                    shutil.rmtree(path, ignore_errors=True)
                else:
                    os.unlink(path)
            except OSError:
                pass
        if not [entry for entry in os.listdir(folder) if entry != keep]:
            return True
    return False


def _clean_ipc():
    """True if the submission left no System V IPC objects (they outlive processes)."""
    for kind in ("shm", "msg", "sem"):
        try:
            with open(f"/proc/sysvipc/{kind}") as table:
                if len(table.read().strip().splitlines()) > 1:
                    return False
        except OSError:
            pass
    return True


def _make_shell():
    from IPython.core.interactiveshell import InteractiveShell
    from traitlets.config import Config

    config = Config()
    config.HistoryManager.enabled = False  # no sqlite file a submission could tamper with
    shell = InteractiveShell.instance(config=config, colors="NoColor")
    # Nobody reads the cell output; IPython's rich tracebacks cost ~70 ms per failing
    # cell. Errors are still recorded (result.error_in_exec) and formatted by us.
    shell.showtraceback = lambda *args, **kwargs: None
    shell.showsyntaxerror = lambda *args, **kwargs: None
    return shell


def _agent_file(name):
    """A file the grader put next to this package in the agent folder (see grading/sandbox/agent_files.py)."""
    return os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), name)


def _read_json(name, default):
    import json

    try:
        with open(_agent_file(name)) as handle:
            return json.load(handle)
    except (OSError, ValueError):
        return default


def _assignment_code(settings):
    """The assignment's own sandbox code, if any: pre-imports, then RESOURCES and its warm-up."""
    import importlib

    for name in settings.get("preimport", []):
        try:
            importlib.import_module(name)
        except Exception:  # the assignment's choice; a submission that needs it will say so
            pass
    if not os.path.exists(_agent_file("assignment_sandbox.py")):
        return {}
    import assignment_sandbox

    if callable(getattr(assignment_sandbox, "warm_up", None)):
        try:
            assignment_sandbox.warm_up()
        except Exception:  # only a speed-up: the probes themselves will report a real problem
            pass
    return dict(getattr(assignment_sandbox, "RESOURCES", {}))


RELEASE_WARM_UP_SECONDS = 2.0  # an untouched release slower than this does real work: not worth it


def _warm_up_on_release(shell, settings):
    """Run the untouched release's code cells once here, so every child starts with the
    first-call costs of its given cells paid: the modules they import, what they build on
    first use (a failed vocabulary download cost each student about 45 ms). The release is
    public (every student has it), so nothing a child may read is added.

    It is first run in a forked trial. A release that ends its process, outruns its time,
    or leaves threads or processes behind (forking after that is unsafe) is not run here.
    Afterwards the namespace and the global state a cell may change are put back, so a child
    starts as it would without this. Returns what happened, for the hello message."""
    cells = _read_json("release_cells.json", [])
    if not cells:
        return "no release cells"
    seconds = float(settings.get("warm_up_seconds", RELEASE_WARM_UP_SECONDS))
    started = time.monotonic()
    trial = _trial_run(shell, cells, seconds)
    if trial != "ok":
        return trial
    tried = time.monotonic()
    saved = _global_state()
    try:
        _fresh_dirs()
        _run_cells(shell, cells, time.monotonic() + 2 * seconds)  # it ran in time just now
    finally:
        _restore_global_state(shell, saved)
    return f"ok: tried in {tried - started:.2f} s, ran in {time.monotonic() - tried:.2f} s"


def _trial_run(shell, cells, seconds):
    """Run `cells` in a forked child; "ok" if it ended cleanly, else why not."""
    pid = os.fork()
    if pid == 0:
        code = 3
        try:
            _fresh_dirs()
            report = _run_cells(shell, cells, time.monotonic() + seconds)
            alone = len(os.listdir("/proc/self/task")) == 1 and not _descendants()
            in_time = not any(cell["error"] in (NOT_RUN, STOPPED) for cell in report)
            code = 0 if alone and in_time else 4 if in_time else 5
        finally:
            os._exit(code)
    deadline = time.monotonic() + seconds + 2.0  # a cell stuck in C code ignores its alarm
    while (status := os.waitpid(pid, os.WNOHANG))[0] == 0 and time.monotonic() < deadline:
        time.sleep(0.005)
    _kill_everything(pid, OWN_PID_NAMESPACE)  # reaps it, and anything it left
    code = os.waitstatus_to_exitcode(status[1]) if status[0] else 5
    return {0: "ok", 4: "skipped: the release left threads or processes running",
            5: f"skipped: the release took more than {seconds:g} s"}.get(
        code, f"skipped: the release ended its process (exit status {code})")


def _global_state():
    import copy
    import warnings

    import numpy
    import torch

    return {"cwd": os.getcwd(), "environ": dict(os.environ), "path": list(sys.path),
            "modules_main": sys.modules.get("__main__"), "warnings": copy.copy(warnings.filters),
            "grad": torch.is_grad_enabled(), "dtype": torch.get_default_dtype(),
            "deterministic": torch.are_deterministic_algorithms_enabled(),
            "numpy_print": numpy.get_printoptions()}


def _restore_global_state(shell, saved):
    import gc
    import warnings

    import numpy
    import torch

    for name in [name for name in shell.user_ns if name not in shell.user_ns_hidden]:
        del shell.user_ns[name]
    os.chdir(saved["cwd"])
    os.environ.clear()
    os.environ.update(saved["environ"])
    sys.path[:] = saved["path"]
    if saved["modules_main"] is not None:
        sys.modules["__main__"] = saved["modules_main"]
    warnings.filters[:] = saved["warnings"]
    getattr(warnings, "_filters_mutated", lambda: None)()  # so warnings shown here show again in a child
    # Each only if the release changed it: setting the deterministic flag imports torch's
    # compiler (see warm.defer_dynamo).
    if torch.is_grad_enabled() != saved["grad"]:
        torch.set_grad_enabled(saved["grad"])
    if torch.get_default_dtype() != saved["dtype"]:
        torch.set_default_dtype(saved["dtype"])
    if torch.are_deterministic_algorithms_enabled() != saved["deterministic"]:
        torch.use_deterministic_algorithms(saved["deterministic"])
    if torch.get_num_threads() != 1:
        torch.set_num_threads(1)
    torch.set_printoptions(profile="default")
    numpy.set_printoptions(**saved["numpy_print"])
    if "matplotlib.pyplot" in sys.modules:
        sys.modules["matplotlib.pyplot"].close("all")
    gc.collect(1)  # the release's objects (young ones: a full collection costs 0.1 s) go now, not in a child


def main(control_fd, own_pid_namespace, scratch):
    import socket

    global SCRATCH, OWN_PID_NAMESPACE, HAS_SHM
    SCRATCH, OWN_PID_NAMESPACE = scratch, own_pid_namespace
    HAS_SHM = os.path.isdir(os.path.join(scratch, SHM_DIR))
    control = socket.socket(fileno=control_fd)
    if own_pid_namespace:
        from autograder.inside.world import new_session_keyring

        try:  # not the grader's session keyring (the TA's keys): one of our own, empty
            new_session_keyring()
        except OSError:
            pass
    devnull = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(devnull, fd)
    _prctl(PR_SET_DUMPABLE, 0)  # a child with our uid cannot read or write our memory
    _prctl(PR_SET_CHILD_SUBREAPER, 1)  # orphans of a submission become ours to kill
    import IPython  # noqa: F401  (warm: every child inherits these imports)
    import numpy  # noqa: F401
    import torch

    torch.set_num_threads(1)
    from autograder.wire import keep_freed_memory

    keep_freed_memory()
    from autograder.inside.warm import defer_dynamo, first_calls

    first_calls()
    settings = _read_json("settings.json", {})  # the assignment's (see course.py, sandbox_files)
    resources = _assignment_code(settings)
    release = _warm_up_on_release(_make_shell(), settings)
    defer_dynamo()  # kernels the assignment's own imports and its release defined
    _wipe(SCRATCH)
    fresh_world = _world_trial() if own_pid_namespace else "not used"
    worker = Worker(control, resources)
    import gc

    gc.freeze()  # children never scan (and so never copy) the warm interpreter's objects
    worker.reply(("hello", {"pid": os.getpid(), "python": sys.version.split()[0], "torch": str(torch.__version__),
                            "release_warm_up": release, "fresh_world": fresh_world}))
    try:
        worker.serve()
    except Exception:
        worker.end()


if __name__ == "__main__":
    main(int(sys.argv[1]), sys.argv[2] == "pidns", sys.argv[3])
