"""The grader's side of a sandbox: start one, talk to it, and the `student` proxy.

A `Sandbox` is one warm, isolated interpreter (see `agent.py`). With
bubblewrap it runs as an unprivileged user in its own user, mount, PID,
network, IPC and UTS namespaces; it sees read-only system and Python files,
its own code and a small writable tmpfs, and nothing of the course. Without
bubblewrap nothing runs (`NoSandbox`), unless the TA passes --unsafe-no-sandbox:
then it is a plain subprocess with limits, never as root (`_plain_command`),
and `unsafe_warning()` says what is missing.

`SandboxStudent` implements the probe API of `student.NamespaceStudent` by
sending each call to the sandbox and reading the answer back as plain data.
"""
import contextlib
import hashlib
import os
import select
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from autograder import wire
from autograder.grading import cgroups

# The sandbox's own code, in the package: the wire format and every module of inside/ (the code
# that runs next to student code, which imports nothing else of ours: an import-linter contract).
AGENT_FILES = ("wire.py", *sorted(f"inside/{path.name}" for path in (Path(__file__).resolve().parent.parent
                                                                      / "inside").glob("*.py")))
SANDBOX_UID_BASE = 61000  # one unprivileged uid per worker slot when the grader is root
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


@dataclass
class Limits:
    timeout: float = 120.0  # wall-clock seconds for one submission, cells and probes together
    # Memory the submission may add to the warm interpreter's: its address space, and (where
    # cgroups can be made, see cgroups.py) everything it holds, shared memory, tmpfs pages
    # and kernel memory included.
    memory_bytes: int = 4 * 2**30
    max_processes: int = 64  # processes and threads at once
    max_file_bytes: int = 16 * 2**20  # any one file, student output included
    scratch_bytes: int = 512 * 2**20  # the whole writable tmpfs
    max_files: int = 20000  # files and folders in it (each costs kernel memory)


class SandboxBroken(RuntimeError):
    """The sandbox stopped answering or broke the protocol; it will be restarted."""


# -- how much isolation this machine allows --------------------------------------
UNSAFE_FLAG = "--unsafe-no-sandbox"
_isolation = None


class NoSandbox(RuntimeError):
    """Student code must not run here: no working sandbox, and no explicit opt-out."""


def isolation():
    """('bwrap' | 'none', explanation). Probed once per process."""
    global _isolation
    if _isolation is None:
        _isolation = _probe_isolation()
    return _isolation


def _probe_isolation():
    if not shutil.which("bwrap"):
        return "none", "bubblewrap is not installed"
    command = _as_sandbox_user(0, ["bwrap", "--unshare-all", "--ro-bind", "/", "/", "true"], [])
    try:
        result = subprocess.run(command, capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as error:
        return "none", f"bubblewrap could not start ({error})"
    if result.returncode != 0:
        return "none", f"bubblewrap could not create namespaces here: {result.stderr.strip()[:200]}"
    return "bwrap", "bubblewrap: separate namespaces, no network, unprivileged user"


def require_sandbox(unsafe_no_sandbox=False):
    """How student code will run: 'bubblewrap', or 'none' with the explicit opt-out.

    Raises NoSandbox, with a message for the TA, when there is no working
    sandbox and no opt-out, or when even the opt-out cannot keep student code
    away from the grader's own user. Nothing has run when this raises.
    """
    mode, why = isolation()
    if mode == "bwrap":
        return "bubblewrap"
    if not unsafe_no_sandbox:
        raise NoSandbox(
            f"Refusing to run student code: there is no working sandbox ({why}). Install bubblewrap"
            " (as root: apt-get install -y bubblewrap, or run ./setup.sh) and grade again. To run student"
            f" code without isolation anyway, pass {UNSAFE_FLAG}; results graded that way say so.")
    _plain_mode()  # raises NoSandbox when even a separate user is impossible
    return "none"


def unsafe_warning():
    """What is missing when grading with the opt-out (for the terminal and logs)."""
    mode, why = isolation()
    if mode == "bwrap":
        return None
    plain = _plain_mode()
    if plain == "namespace":
        kept = ("student code runs as a separate unprivileged user with its own private /tmp and"
                " /dev/shm, and the course folder hidden, but it shares this machine's network and"
                " can read every file that any user may read")
    elif plain == "user":
        kept = ("student code runs as a separate unprivileged user, but it shares this machine's"
                " network, /tmp and /dev/shm, and can read every file that any user may read, the"
                " course included if it is readable by others")
    else:
        kept = (f"student code runs as YOUR user ({_user_name()}): it can read and change everything"
                " you can, including the course, its solutions, the results, the gradebook and your"
                " Python installation, and it can use the network")
    return f"WARNING: grading WITHOUT a sandbox ({why}; {UNSAFE_FLAG} given): {kept}."


def _user_name():
    import pwd

    try:
        return pwd.getpwuid(os.geteuid()).pw_name
    except KeyError:
        return f"uid {os.geteuid()}"


_plain = None


def _plain_mode():
    """How far isolation goes without bubblewrap: 'namespace' (root, and a private mount
    namespace works: separate user, private /tmp, course hidden), 'user' (root: separate
    user only) or 'self' (not root: nothing). Raises NoSandbox where root cannot hand
    student code to another user."""
    global _plain
    if _plain is None:
        if os.geteuid() != 0:
            _plain = "self"
        elif _mount_namespace_works():
            _plain = "namespace"
        elif all(_reachable(p) for p in _python_roots()):
            _plain = "user"
        else:
            unreachable = ", ".join(str(p) for p in _python_roots() if not _reachable(p))
            raise NoSandbox(
                f"Refusing to run student code as root: without bubblewrap it must run as another user,"
                f" but Python is installed where other users cannot read it ({unreachable}) and this"
                " machine does not allow a private mount namespace. Install bubblewrap, or install"
                " Python and this package where other users can read them (for example in /opt).")
    return _plain


def _mount_namespace_works():
    try:
        done = subprocess.run(["unshare", "--mount", "--propagation", "private", "true"],
                              capture_output=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return done.returncode == 0


# -- building the command ---------------------------------------------------------
def _agent_dir(extra=None):
    """A world-readable copy of the sandbox's own code: no checks, no solutions.

    `extra` ({file name: bytes}) is the assignment's sandbox code and settings, put
    next to the `autograder` folder.

    Named after a hash of its contents and reused, so runs (even killed ones)
    leave at most one per version behind. It is trusted only if we own it and
    nobody else can write to it; otherwise a fresh private copy is made.
    """
    package = Path(__file__).resolve().parent.parent
    sources = {f"autograder/{name}": (package / name).read_bytes() for name in AGENT_FILES}
    sources.update(extra or {})
    digest = hashlib.sha256(b"".join(name.encode() + b"\0" + sources[name] for name in sorted(sources))).hexdigest()[:16]
    folder = shared_temp_dir() / f"autograder-agent-{os.geteuid()}-{digest}"
    _sweep_agent_dirs(keep=folder)
    if _trusted_copy(folder, sources):
        return folder
    staging = _private_copy(sources)
    try:
        os.rename(staging, folder)  # atomic; fails if another worker got there first
    except OSError:
        shutil.rmtree(staging, ignore_errors=True)
    return folder if _trusted_copy(folder, sources) else _private_copy(sources)


AGENT_DIR_GRACE = 600  # seconds: a folder younger than this may be about to be used


def hold_agent_dir(folder):
    """A shared lock on `folder` for as long as a sandbox may use it (the descriptor is kept
    by the Sandbox); `_sweep_agent_dirs` removes only folders nobody holds."""
    import fcntl

    try:
        fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError:
        return None
    fcntl.flock(fd, fcntl.LOCK_SH)
    return fd


def _sweep_agent_dirs(keep):
    """Remove this user's agent folders that no sandbox holds and that are older than the grace
    (older versions of the code, other assignments' settings, runs that were killed): each
    version used to stay in the temporary folder for good. A sandbox that closes removes its
    own folder (see `Sandbox.close`); this finds what a killed run could not."""
    for folder in keep.parent.glob(f"autograder-agent-{os.geteuid()}-*"):
        try:
            if folder == keep or time.time() - folder.lstat().st_mtime < AGENT_DIR_GRACE:
                continue
        except OSError:
            continue
        remove_if_unheld(folder)


def remove_if_unheld(folder):
    """Remove the agent folder `folder` if it is ours and no sandbox holds it (a sandbox that
    finds its folder gone under it makes it again: see `Sandbox.prepare`)."""
    import fcntl

    try:
        if Path(folder).lstat().st_uid != os.geteuid():
            return
        fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # nobody holds it: nobody runs on it
        shutil.rmtree(folder, ignore_errors=True)
    except OSError:
        pass
    finally:
        os.close(fd)


def _trusted_copy(folder, sources):
    """Is `folder` exactly `sources` ({relative path: bytes}), ours and writable by nobody else?"""
    try:
        files = [folder / "autograder" / "__init__.py", *(folder / name for name in sources)]
        folders = {folder, *(parent for path in files for parent in path.parents if folder in parent.parents)}
        for path in [*folders, *files]:
            info = path.lstat()
            if info.st_uid != os.geteuid() or info.st_mode & 0o022 or path.is_symlink():
                return False
        return all((folder / name).read_bytes() == content for name, content in sources.items())
    except OSError:
        return False


def shared_temp_dir():
    """Where to put what the sandbox's user must reach (the agent's code, a plain sandbox's
    scratch): the temporary folder, unless the grader is root (student code then runs as
    another uid) and that folder is private, as a TMPDIR of mode 0700 is; then /tmp.
    In a private TMPDIR every sandbox failed to start ("Permission denied")."""
    here = Path(tempfile.gettempdir())
    if os.geteuid() != 0 or _reachable(here):
        return here
    return Path("/tmp")


def _private_copy(sources):
    folder = Path(tempfile.mkdtemp(prefix=f"autograder-agent-{os.geteuid()}-", dir=shared_temp_dir()))
    (folder / "autograder").mkdir()
    (folder / "autograder" / "__init__.py").write_text("")
    for name, content in sources.items():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_bytes(content)
    for path in [folder, *folder.rglob("*")]:
        path.chmod(0o755 if path.is_dir() else 0o644)
    return folder


def _reachable(path):
    """Can a stranger (an unprivileged uid) open this directory?"""
    return _first_unreachable(path) is None


def _python_roots():
    roots = {Path(sys.base_prefix).resolve(), Path(sys.prefix).resolve(),
             Path(sys.executable).resolve().parent.parent}
    roots = {r for r in roots if not any(r != o and o in r.parents for o in roots)}
    system = Path("/usr")
    return sorted(r for r in roots if r != system and system not in r.parents)


def _in_scratch(path):
    """Is `path` where the sandbox has its scratch (/tmp), so it must appear elsewhere there?"""
    return any(path == top or top in path.parents for top in (Path("/tmp"), Path("/dev")))


def _sandbox_python(places):
    """The interpreter's path inside the sandbox, given {root: where the sandbox shows it}."""
    executable = Path(sys.executable)
    folder = executable.parent.resolve()
    for root, place in places.items():
        if folder == root or root in folder.parents:
            return str(place / folder.relative_to(root) / executable.name)
    return str(executable)


def _as_sandbox_user(slot, command, hidden):
    """Wrap `command` so it starts as an unprivileged user when we are root.

    `hidden` are directories that user cannot reach (e.g. Python under a 0700
    /root): in a private mount namespace they are bind-mounted under /mnt/<i>,
    where the sandbox picks them up. Nothing changes outside that namespace.
    """
    if os.geteuid() != 0:
        return command
    uid = str(SANDBOX_UID_BASE + slot)
    drop = ["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups", "--inh-caps=-all"]
    if not hidden:
        return [*drop, *command]
    script = ('set -e; mount -t tmpfs -o size=1m,mode=0755 autograder /mnt; i=0; '
              'while [ "$1" != "--" ]; do mkdir /mnt/$i; mount --bind "$1" /mnt/$i; i=$((i+1)); shift; done; '
              'shift; exec "$@"')
    return ["unshare", "--mount", "--propagation", "private", "--", "sh", "-c", script, "sh",
            *map(str, hidden), "--", *drop, *command]


SHM_DIR = ".shm"  # /dev/shm is this folder of the scratch tmpfs: inside its size limit, wiped with it


def _plain_command(slot, control, agent, limits, conceal):
    """(command, scratch folder, environment) for the agent without bubblewrap.

    Never as root: root hands the agent to the slot's unprivileged uid. Where a
    private mount namespace works, that user also gets a private /tmp (the
    size-limited scratch, with /dev/shm inside it), read-only Python folders and
    no view of `conceal` (the course). Without root, nothing can be kept apart:
    `unsafe_warning` says so.
    """
    mode = _plain_mode()
    env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8", "OMP_NUM_THREADS": "1",
           "MPLBACKEND": "Agg"}
    if mode == "namespace":
        env.update(HOME="/tmp/home", TMPDIR="/tmp")
        return _private_namespace(slot, control, agent, limits, conceal), None, env
    scratch = tempfile.mkdtemp(prefix="autograder-scratch-", dir=shared_temp_dir())  # 0700: nobody else reads it
    env.update(HOME=os.path.join(scratch, "home"), TMPDIR=scratch)
    command = _agent_call(control, "plain", scratch, agent)
    if mode == "user":
        uid = SANDBOX_UID_BASE + slot
        os.chown(scratch, uid, uid)
        command = _as_sandbox_user(slot, command, hidden=[])
    return command, scratch, env


def _private_namespace(slot, control, agent, limits, conceal):
    """As root, in a private mount namespace: hide /tmp, /var/tmp, the course and private
    folders behind empty tmpfs mounts, put Python back read-only, then drop to the slot's uid."""
    roots = _python_roots()
    tops = sorted({_first_unreachable(r) for r in roots} - {None})
    # A Python under /tmp (a throw-away venv) stays at /mnt/<i>: /tmp is the scratch, wiped every time.
    places = {root: Path(f"/mnt/{index}") if _in_scratch(root) else root for index, root in enumerate(roots)}
    q = shlex.quote
    small = "mount -t tmpfs -o size=1m,mode=0755 autograder"
    lines = ["set -e", f"{small} /mnt", "mkdir /mnt/agent", f"mount --bind {q(str(agent))} /mnt/agent"]
    for index, root in enumerate(roots):
        lines += [f"mkdir /mnt/{index}", f"mount --bind {q(str(root))} /mnt/{index}"]
    lines.append(f"mount -t tmpfs -o size={limits.scratch_bytes},mode=1777 autograder /tmp")
    lines.append(f"if [ -d /var/tmp ]; then {small} /var/tmp; fi")
    for folder in [*tops, *conceal]:
        lines.append(f"if [ -d {q(str(folder))} ]; then {small} {q(str(folder))}; fi")
    for index, root in enumerate(roots):
        if places[root] == root:
            lines += [f"mkdir -p {q(str(root))}", f"mount --bind /mnt/{index} {q(str(root))}"]
        lines.append(f"mount -o remount,bind,ro {q(str(places[root]))}")
    lines += [f"mkdir /tmp/{SHM_DIR}", f"chmod 1777 /tmp/{SHM_DIR}",
              f"if [ -d /dev/shm ]; then mount --bind /tmp/{SHM_DIR} /dev/shm; fi", 'exec "$@"']
    uid = str(SANDBOX_UID_BASE + slot)
    drop = ["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups", "--inh-caps=-all"]
    return ["unshare", "--mount", "--propagation", "private", "--", "sh", "-c", "\n".join(lines), "sh",
            *drop, *_agent_call(control, "plain", "/tmp", "/mnt/agent", _sandbox_python(places))]


def _first_unreachable(path):
    """The outermost folder on the way to `path` that a stranger cannot enter, or None."""
    for part in [*reversed(Path(path).resolve().parents), Path(path).resolve()]:
        if not part.stat().st_mode & 0o001:
            return part
    return None


def _socket_pair():
    """A local socket pair with big buffers: fewer wake-ups for megabyte tensors."""
    pair = socket.socketpair()
    for sock in pair:
        for option in (socket.SO_SNDBUF, socket.SO_RCVBUF):
            sock.setsockopt(socket.SOL_SOCKET, option, 4 * 2**20)
    return pair


def _agent_call(control, mode, scratch, agent, python=sys.executable):
    code = ("import sys; sys.path.insert(0, sys.argv[1]); from autograder.inside.agent import main; "
            "main(int(sys.argv[2]), sys.argv[3] == 'pidns', sys.argv[4])")
    return [python, "-I", "-c", code, str(agent), str(control), mode, str(scratch)]


def _bwrap_command(slot, agent, control, limits):
    roots = _python_roots()
    hidden = [r for r in roots if os.geteuid() == 0 and not _reachable(r)]
    # A Python under /tmp (a throw-away venv) is shown at /python/<i>: the sandbox's /tmp is its scratch.
    places = {root: Path(f"/python/{index}") if _in_scratch(root) else root for index, root in enumerate(roots)}
    binds = []
    for index, root in enumerate(hidden):
        binds += ["--ro-bind", f"/mnt/{index}", str(places[root])]
    for root in roots:
        if root not in hidden:
            binds += ["--ro-bind", str(root), str(places[root])]
    system = []
    for name in ("bin", "sbin", "lib", "lib32", "lib64", "libx32"):
        path = Path("/") / name
        if path.is_symlink():
            system += ["--symlink", os.readlink(path), str(path)]
        elif path.is_dir():
            system += ["--ro-bind", str(path), str(path)]
    bwrap = [
        # --as-pid-1: no bubblewrap init inside (it was dumpable: student code could ptrace it);
        # the warm worker is the namespace's first process, and each submission gets a PID
        # namespace of its own below it (see inside/world.py).
        "bwrap", "--unshare-all", "--as-pid-1", "--die-with-parent", "--new-session",
        "--ro-bind", "/usr", "/usr", *system,
        "--ro-bind-try", "/etc/ld.so.cache", "/etc/ld.so.cache",
        "--ro-bind-try", "/etc/alternatives", "/etc/alternatives",
        "--proc", "/proc",
        # One writable place, the size-limited scratch tmpfs: mounted on /dev/shm, with /tmp a
        # link to it, so both count against one limit and are wiped together after every
        # submission. The rest of /dev is bubblewrap's few device nodes, read-only.
        "--dev", "/dev", "--size", str(limits.scratch_bytes), "--tmpfs", "/dev/shm",
        "--remount-ro", "/dev", "--symlink", "/dev/shm", "/tmp",
        *binds,
        "--ro-bind", str(agent), "/agent",
        "--remount-ro", "/",  # bubblewrap's own root (where the folders above were made) is read-only too
        "--chdir", "/agent", "--hostname", "localhost",
        "--clearenv", "--setenv", "PATH", "/usr/local/bin:/usr/bin:/bin", "--setenv", "HOME", "/tmp/home",
        "--setenv", "LANG", "C.UTF-8", "--setenv", "OMP_NUM_THREADS", "1", "--setenv", "MPLBACKEND", "Agg",
        # transparent huge pages for big tensors: a fresh child pays far fewer page faults
        "--setenv", "GLIBC_TUNABLES", "glibc.malloc.hugetlb=1",
        "--uid", "1000", "--gid", "1000",
        *_agent_call(control, "pidns", "/tmp", "/agent", _sandbox_python(places)),
    ]
    return _as_sandbox_user(slot, bwrap, hidden)


# -- one sandbox --------------------------------------------------------------------
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
                command = _bwrap_command(self.slot, self.agent, theirs.fileno(), self.limits)
                # bubblewrap itself (outside the sandbox: --clearenv empties the student's) keeps
                # a run id its caller set, so the sandboxes of one run can be told from another's
                env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin")}
                if os.environ.get(RUN_ID):
                    env[RUN_ID] = os.environ[RUN_ID]
            else:
                command, self.scratch, env = _plain_command(self.slot, theirs.fileno(), self.agent,
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
                self.agent = _agent_dir(self.extra_files)
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
        _UNREAPED.append(self.process)  # never collected, so never reaped by subprocess's clean-up
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
        bound = (f"your code reached the {_size(self.limits.memory_bytes)} of memory a submission may use"
                 " (files in /tmp, memory files and shared memory count too)")
        if killed:
            return bound + ", so the system stopped it."
        if reached:
            return bound + ", so what it asked for beyond that was refused."
        return None


def _size(count):
    """1 GiB, 512 MiB: a memory size in words."""
    for unit, name in ((2**30, "GiB"), (2**20, "MiB"), (2**10, "KiB")):
        if count >= unit:
            return f"{count / unit:g} {name}"
    return f"{count} bytes"


# -- a sandbox launched by one process, used by another -----------------------------
_UNREAPED = []  # abandoned sandboxes' processes (see Sandbox.abandon)


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


# -- the student proxy -------------------------------------------------------------
PROBES = wire.PROBES  # the contract, in one place


MAX_ERROR_TEXT = 2000  # characters of an error text from the sandbox that the grader reads
REPAIR_MARGIN = 3.0  # seconds of the submission's time that must be left to start a repair run


class SandboxStudent:
    """The probe API, answered by the submission running in a sandbox."""

    def __init__(self, sandbox):
        self.sandbox = sandbox
        self.lost = None  # why later probes cannot reach the submission (student-facing)
        self.lost_kind = None
        self.fork_lost = None  # (kind, message, how it ended) when a fork of the hidden checks was lost
        self._sealed = self._unanswered = self._repairing = False
        self.repairs = None  # grading/repairs.Planner: the repair runs this submission's feedback can have

    def lose(self, kind, detail):
        self.lost_kind, self.lost = kind, lost_message(kind, detail)

    def state_now(self):
        """What a view made now says of the submission: whether it was lost, its memory bound."""
        return {"lost": self.lost, "lost_kind": self.lost_kind, "memory": self.sandbox.memory_note()}

    @contextlib.contextmanager
    def forked(self):
        """Probes inside go to a fork of the process they went to, whose state never comes back to it
        (the checks of a higher visibility level run there, after every check below it; see
        checks/plugin.py). Forks nest. Where it cannot fork (a process bound reached), they go where
        they went: nothing a lower level shows is asked afterwards."""
        if self.lost:
            yield
            return
        why = self.sandbox.open_fork(sealed=False)
        if why:
            yield
            return
        saved = self.lost, self.lost_kind
        try:
            yield
        finally:
            lost = self.lost_kind, self.lost
            ending = self.sandbox.close_fork()
            self.lost, self.lost_kind = saved
            if lost[1] and self.fork_lost is None:  # the innermost loss: where the checks stopped
                self.fork_lost = (lost[0], lost[1], ending[1] if len(ending) > 1 and type(ending[1]) is str else "")
            if ending[0] not in ("joined", "refused"):  # the process it was forked from is gone too
                self.lose(ending[0], ending[1] if len(ending) > 1 else None)

    @contextlib.contextmanager
    def what_ifs(self, last=False):
        """The what-if runs of localisation inside go to a sealed fork of the process probes go to,
        which can pass nothing back and ends afterwards: the reference's values they carry never
        reach a process that answers later. When they are the `last` questions that process will be
        asked, it seals itself instead (a fork would cost its time for nothing). Where neither can
        be done, they go unanswered."""
        if self.lost:
            yield
            return
        saved = self.lost, self.lost_kind
        why = self.sandbox.seal() if last else self.sandbox.open_fork(sealed=True)
        self._sealed, self._unanswered = True, bool(why)
        try:
            yield
        finally:
            self._sealed = self._unanswered = False
            ending = ("sealed" if last else "refused", why) if last or why else self.sandbox.close_fork()
            self.lost, self.lost_kind = saved  # a what-if that ended the process costs the student nothing
            if ending[0] not in ("joined", "refused", "sealed"):
                self.lose(ending[0], ending[1] if len(ending) > 1 else None)

    @contextlib.contextmanager
    def repairing(self, cells):
        """Inside, every probe goes to a sealed fork of the process probes go to, which has first run
        `cells` ([(name, source)]: a repair, grading/repairs.py). Yields what each cell raised (its
        exception's name, or ""), or None where it could not be done (then nothing inside is
        asked). Only whether checks pass there is used: what the fork says is never quoted, since it
        ran a named fix or the reference's code. A repair that ends the fork costs the student
        nothing."""
        deadline = self.sandbox.deadline
        left = deadline - time.monotonic() if deadline is not None else 0
        if self.lost or left < REPAIR_MARGIN:
            yield None  # (a repair never spends the time the submission's own checks may need)
            return
        saved = self.lost, self.lost_kind
        why = self.sandbox.open_fork(sealed=True)
        if why:
            yield None
            return
        # its cells get a third of what is left: the checks asked there, and those of any level after, the rest
        reply = self.sandbox.probe("repair", [list(map(list, cells)), round(left / 3, 2)], {})
        raised = reply[1] if (type(reply) in (list, tuple) and len(reply) > 1 and reply[0] == "repaired"
                              and type(reply[1]) is list and len(reply[1]) == len(cells)
                              and all(type(what) is str for what in reply[1])) else None
        self._repairing = raised is not None
        try:
            # (exception names, bounded, and compared with a list: never quoted)
            yield [what[:80] for what in raised] if raised is not None else None
        finally:
            self._repairing = False
            ending = self.sandbox.close_fork()
            self.lost, self.lost_kind = saved
            if ending[0] not in ("joined", "refused"):
                self.lose(ending[0], ending[1] if len(ending) > 1 else None)

    def _probe(self, method, args, kwargs):
        from autograder.wire import StudentError

        if self.lost:
            raise StudentError(self.lost)
        if self._repairing:
            pass  # a repair run: every question, whose answers only say whether a check passes
        elif self._sealed != (method == "trace" and bool(kwargs.get("trials"))) or self._unanswered:
            # what-if runs only in the sealed fork, and nothing else there: what a page quotes is
            # never what a process with the reference's values said
            raise StudentError("this question is not asked here")
        reply = self.sandbox.probe(method, args, kwargs)
        if type(reply) not in (list, tuple) or not reply:
            reply = ("unreadable", None)
        kind, detail = reply[0], reply[1] if len(reply) > 1 else None
        if kind == "ok":
            return detail
        if kind == "student_error" and type(detail) is str:
            from autograder.untrusted import without_controls

            # the student's code wrote it: bounded, and without a terminal's escapes, before use
            raise StudentError(without_controls(detail[:MAX_ERROR_TEXT]))
        self.lose(kind, detail)
        raise StudentError(self.lost)


def lost_message(kind, detail):
    """Why the submission's process cannot answer any more (student-facing)."""
    if kind == "timeout":
        limit = f"the {detail:g} s time limit" if type(detail) in (int, float) else "the time limit"
        return (f"your code did not finish within {limit} and was stopped."
                " Look for an endless loop or a much bigger computation than needed.")
    if kind == "died":
        return ("your code ended or crashed the Python process (for example with os._exit, or by"
                " running out of memory), so the checks after that point could not run.")
    if kind == "gone":
        return "your code had already been stopped, so this check could not run."
    return "your code sent back something that is not plain data (tensors, numbers, strings)."


def _origin(answer):
    """`origin`'s answer as the grader may believe it: the sandbox watches every module call, so
    "not watched" (what in-process grading says) is a claim of the student's code, and counts as
    "not found"; so does an answer that is not of origin's form."""
    found = answer if type(answer) is dict else {}
    if found.get("watched") is not True or found.get("found") is not True:
        return {"watched": True, "found": False}
    inputs = found.get("inputs")
    if (type(found.get("handle")) is not str or type(found.get("type")) is not str
            or type(found.get("is_class")) is not bool or type(inputs) is not list
            or not all(type(shape) is list and all(type(n) is int for n in shape) for shape in inputs)):
        return {"watched": True, "found": False}
    return {"watched": True, "found": True, "handle": found["handle"], "type": found["type"],
            "is_class": found["is_class"], "inputs": inputs, "training": found.get("training") is True,
            "changed": found.get("changed") is True}


CHECKED = {"origin": _origin}  # probes whose answer is a claim, checked before a check reads it


def _make_probe(method):
    check = CHECKED.get(method)

    def probe(self, *args, **kwargs):
        answer = self._probe(method, args, kwargs)
        return check(answer) if check is not None else answer

    probe.__name__ = method
    probe.__doc__ = f"`NamespaceStudent.{method}`, answered in the sandbox."
    return probe


for _method in PROBES:
    setattr(SandboxStudent, _method, _make_probe(_method))
