"""Nothing one submission does reaches the next: each gets a world of its own.

Hostile submissions run in the real sandbox, one after another on the same warm
worker; after each, an ordinary submission must find everything as it was. These
are security tests: they never skip under CI (see conftest's `sandbox_required`).
"""
import ctypes
import errno
import os
import threading
import time

import pytest

from autograder.grading import cgroups
from autograder.grading.sandbox.limits import Limits
from autograder.grading.sandbox.process import Sandbox, SandboxBroken
from autograder.grading.sandbox.proxy import SandboxStudent
from autograder.inside import world
from autograder.wire import StudentError

from attacks import ACL, INODES, KEYS, LIBC, MEMFD, NESTED_TMPFS, NUMBERS, PTRACE, SCHEDULE, SYSV
from helpers import settled_sandbox_processes

pytestmark = pytest.mark.usefixtures("sandbox_required")
BOUND = 256 * 2**20  # the memory bound of this module's sandbox
WARM = 2  # processes of a warm sandbox seen from outside: bubblewrap and its worker


@pytest.fixture(scope="module")
def box():
    if os.environ.get("CI") or os.geteuid() == 0:
        ok, why = cgroups.available()
        assert ok, f"no cgroup for submissions on this machine: {why}"
    sandbox = Sandbox(0, Limits(timeout=20, memory_bytes=BOUND))
    sandbox.start()
    yield sandbox
    sandbox.close()


def run(box, *sources):
    reply = box.run([(f"cell {i}", source) for i, source in enumerate(sources)], seed=0)
    return reply, SandboxStudent(box)


NORMAL = """
import os, resource, torch
policy = os.sched_getscheduler(0)
nice = os.getpriority(os.PRIO_PROCESS, 0)
files = list(resource.getrlimit(resource.RLIMIT_NOFILE))
tmp = sorted(os.listdir('/tmp'))
attributes = os.listxattr('/tmp')
pids = sorted(int(p) for p in os.listdir('/proc') if p.isdigit())
ok = torch.softmax(torch.zeros(2), dim=0).tolist()
"""


def expect_a_normal_world(box):
    """The next submission on the same worker starts as the first one did."""
    reply, student = run(box, NORMAL)
    assert reply[0] == "ran" and not reply[1][0]["error"], reply
    assert student.value("policy") == os.SCHED_OTHER and student.value("nice") == 0
    assert student.value("files") == [256, 256]
    assert student.value("tmp") == ["home", "output.txt", "work"]
    assert student.value("attributes") == []
    assert student.value("pids") == [1]
    assert student.value("ok") == [0.5, 0.5]
    box.finish()
    assert box.last_clean


@pytest.mark.parametrize("attack", [ACL, PTRACE, KEYS, SCHEDULE], ids=["acl", "ptrace", "keys", "schedule"])
def test_what_one_submission_does_does_not_reach_the_next_on_the_same_worker(box, attack):
    reply, student = run(box, attack)
    assert reply[0] == "ran", reply
    if attack is PTRACE:
        assert student.value("reached") == []
    if attack is KEYS:
        assert student.value("planted") == [] and student.value("found") == -1
    box.finish()
    assert box.process is not None  # nothing had to be replaced: the world was the submission's own
    expect_a_normal_world(box)


def test_the_graders_keyring_is_out_of_reach(box):
    """A key in the grader's own session keyring (a TA's credentials) is not found inside."""
    libc = ctypes.CDLL(None, use_errno=True)
    key = libc.syscall(NUMBERS["add_key"], b"user", b"grader-secret", b"do not read", 11, -3)  # session keyring
    assert key > 0, os.strerror(ctypes.get_errno())
    try:
        reply, student = run(box, LIBC + f"found = libc.syscall({NUMBERS['request_key']}, b'user', b'grader-secret',"
                                           f" None, 0)\nread = libc.syscall({NUMBERS['keyctl']}, 11, {key}, 0, 0)")
        assert student.value("found") == -1 and student.value("read") == -1
        box.finish()
    finally:
        libc.syscall(NUMBERS["keyctl"], 3, key)  # KEYCTL_REVOKE


# Each call would succeed (or fail with another error) without the filter.
SYSCALLS = LIBC + """
import socket
uid = os.getuid()
number = {"x86_64": %(x86)r, "aarch64": %(arm)r}[os.uname().machine]
def call(name, *args):
    result = libc.syscall(number[name], *args)
    return "ok" if result >= 0 else errno_name(ctypes.get_errno())
def errno_name(code):
    import errno
    return errno.errorcode.get(code, str(code))
me = os.getpid()
buffer = ctypes.create_string_buffer(16)
local = (ctypes.c_void_p * 2)(ctypes.addressof(buffer), 16)
remote = (ctypes.c_void_p * 2)(ctypes.addressof(buffer), 16)
pidfd = os.pidfd_open(me)
user_ns = os.open("/proc/self/ns/user", os.O_RDONLY)
results = {
    "ptrace": call("ptrace", 0, 0, 0, 0),  # PTRACE_TRACEME
    "process_vm_readv": call("process_vm_readv", me, local, 1, remote, 1, 0),
    "process_vm_writev": call("process_vm_writev", me, local, 1, remote, 1, 0),
    "pidfd_getfd": call("pidfd_getfd", pidfd, 0, 0),
    "kcmp": call("kcmp", me, me, 0, 0, 0),  # KCMP_FILE, fd 0 with itself
    "keyctl": call("keyctl", 0, -3, 0),  # KEYCTL_GET_KEYRING_ID of the session keyring
    "add_key": call("add_key", b"user", b"k", b"v", 1, -2),
    "request_key": call("request_key", b"user", b"absent", None, 0),
    "unshare": call("unshare", 0x10000000),  # CLONE_NEWUSER
    "setns": call("setns", user_ns, 0),
    "clone": call("clone", 0x10000000 | 0x10000, 0, 0, 0, 0),  # CLONE_NEWUSER|CLONE_THREAD: EINVAL unfiltered
    "clone3": call("clone3", 0, 0),
    "mount": call("mount", b"none", b"/tmp", b"tmpfs", 0, None),
}
# What students' code does need still works: fork, threads, subprocesses.
import subprocess, threading
child = os.fork()
if child == 0:
    os._exit(7)
forked = os.waitstatus_to_exitcode(os.waitpid(child, 0)[1])
thread = threading.Thread(target=lambda: None)
thread.start(); thread.join()
echoed = subprocess.run(["echo", "hi"], capture_output=True, text=True).stdout
parent = os.getppid()
""" % {"x86": world._SYSCALLS["x86_64"], "arm": world._SYSCALLS["aarch64"]}


def test_the_syscall_filter_refuses_tracing_keyrings_mounts_and_new_namespaces(box):
    reply, student = run(box, SYSCALLS)
    assert reply[0] == "ran" and not reply[1][0]["error"], reply
    results = student.value("results")
    expected = {name: "EPERM" for name in results}
    expected["clone3"] = "ENOSYS"  # so that the C library falls back to clone, which is filtered
    assert results == expected
    assert student.value("forked") == 7 and student.value("echoed") == "hi\n"
    assert student.value("parent") == 0  # its parent is outside its PID namespace: not even named
    box.finish()
    expect_a_normal_world(box)


def test_a_filter_program_exists_for_each_architecture_the_grader_runs_on():
    for machine in ("x86_64", "aarch64"):
        for program in (world.filter_program(machine), world.sealed_program(1234, machine)):
            assert program and len(program) < 4096  # the kernel's limit
            assert all(0 <= jt < 256 and 0 <= jf < 256 for _, jt, jf, _ in program)
            assert len(program) - 1 + max(jt for _, jt, _, _ in program) >= 0
    assert world.filter_program("sparc") is None and world.sealed_program(1, "sparc") is None


def host_available():
    with open("/proc/meminfo") as info:
        for line in info:
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024


class LowestAvailable:
    """The host's lowest MemAvailable while the block runs (sampled every 10 ms)."""

    def __enter__(self):
        self.before = host_available()
        self.lowest, self.done = self.before, threading.Event()
        self.thread = threading.Thread(target=self._watch, daemon=True)
        self.thread.start()
        return self

    def _watch(self):
        while not self.done.wait(0.01):
            self.lowest = min(self.lowest, host_available())

    def __exit__(self, *exc):
        self.done.set()
        self.thread.join()

    @property
    def drop(self):
        return self.before - self.lowest


@pytest.mark.parametrize("attack", [MEMFD, SYSV, NESTED_TMPFS, INODES], ids=["memfd", "sysv", "nested-tmpfs", "inodes"])
def test_memory_that_no_process_maps_is_counted_against_the_submissions_bound(box, attack):
    margin = 512 * 2**20  # the child's own page tables and copies, and the rest of this machine
    with LowestAvailable() as watch:
        reply, student = run(box, attack)
        if attack is INODES:
            assert student.value("n") <= Limits().max_files and "No space left" in student.value("stopped")
        if attack is NESTED_TMPFS:
            assert student.value("made") == -1 and student.value("error") == errno.EPERM
        box.finish()
        memory = box.last_memory
    peak = box.last_peak
    assert peak is not None and peak <= BOUND + 2**20, peak
    assert watch.drop <= BOUND + margin, f"the host lost {watch.drop / 2**20:.0f} MiB"
    if attack in (MEMFD, SYSV):  # stopped by the kernel at the bound, and told so
        assert reply[0] == "died" or reply[1][0]["error"], reply
        assert memory and "reached the 256 MiB of memory" in memory, memory
    time.sleep(0.2)
    assert host_available() >= watch.before - margin  # nothing of it is left
    assert not [p for p in os.listdir(cgroups._probe[0].memory) if p.startswith(f"{cgroups.PREFIX}{os.getpid()}-")]
    expect_a_normal_world(box)


def test_a_submission_whose_world_cannot_be_made_is_the_sandboxs_fault_not_the_students():
    """The submission's process ends before its first cell: the grader hears why and gives
    up on that sandbox (the caller retries on a fresh one), never blaming the student."""
    sandbox = Sandbox(3, Limits(timeout=10, max_files=-5))  # a scratch no tmpfs accepts
    try:
        sandbox.start()
        with pytest.raises(SandboxBroken, match="before running its first cell.*mounting the scratch"):
            sandbox.run([("cell", "x = 1")], seed=0)
        assert sandbox.process is None
    finally:
        sandbox.close()
    assert len(settled_sandbox_processes(WARM)) <= WARM


def test_no_process_of_a_submission_outlives_it(box):
    reply, student = run(box, "import subprocess, os\nsubprocess.Popen(['sleep', '300'], start_new_session=True)\n"
                              "if os.fork() == 0:\n    os.setsid()\n    import time\n    time.sleep(300)")
    assert reply[0] == "ran"
    box.finish()
    assert len(settled_sandbox_processes(WARM)) == WARM
    with pytest.raises(StudentError):  # the channel of a finished submission is closed
        student.value("x")
    expect_a_normal_world(box)


@pytest.mark.slow
def test_a_right_answer_after_every_attack_on_the_same_worker_scores_full_marks(tmp_path):
    """One worker grades the attacks one after another, then a right answer; the answers
    cache keeps only results that ran to the end in a clean sandbox, and says why."""
    import json

    from autograder.runs.batch import grade_batch
    from autograder.outputs.folder import GradedFolder
    from helpers import append_to_first_answer, assignment_of, example, new_course, write

    course = new_course(tmp_path)
    inbox = tmp_path / "inbox"
    inbox.mkdir()
    attacks = {"a_acl": ACL, "b_ptrace": PTRACE, "c_keys": KEYS, "d_schedule": SCHEDULE, "e_memfd": MEMFD,
               "f_inodes": INODES}
    for student, code in attacks.items():
        write(inbox, student, append_to_first_answer(example("ada"), code))
    write(inbox, "z_ada", example("ada"))
    report = grade_batch(assignment_of(course), [inbox], jobs=1, seed=3,
                         limits={"timeout": 30, "memory_bytes": 512 * 2**20})
    results = {result.student_id: result for result in report.results}
    assert results["z_ada"].score == 26, results["z_ada"].output
    assert all(results[student].status == "graded" for student in attacks)
    memfd = results["e_memfd"]
    assert memfd.score < 26 and any("reached the 512 MiB of memory" in note for note in memfd.notes), memfd.notes
    cached = {json.loads(path.read_text())["extra_data"]["student_id"]: json.loads(path.read_text())
              for path in GradedFolder(report.out_dir).answers.glob("*.json")}
    assert "e_memfd" not in cached  # it was stopped: the next batch runs it again
    assert "ran every cell" in cached["z_ada"]["extra_data"]["reusable"]


def test_where_no_world_of_its_own_can_be_made_the_grader_refuses_to_grade(monkeypatch):
    """On a kernel that forbids user namespaces inside the sandbox (Ubuntu's AppArmor
    restriction), the warm worker's trial says so in its hello, and nothing is graded."""
    from autograder.grading.sandbox.isolation import NoSandbox

    sandbox = Sandbox(4)
    monkeypatch.setattr(sandbox, "_receive", lambda sock, timeout: (
        "hello", {"pid": 1, "fresh_world": "WorldError: [Errno 1] unshare: Operation not permitted"}))
    monkeypatch.setattr(sandbox, "close", lambda graceful=True: None)
    with pytest.raises(NoSandbox, match="cannot get a world of its own inside it.*unshare: Operation not permitted"):
        sandbox.await_hello()


def test_the_warm_worker_says_its_world_trial_worked(box):
    assert box.start()["fresh_world"] == "ok"  # (a restart: the module's box is started again)


class FlakySandbox:
    """A sandbox whose first `faults` runs end before the first cell (the sandbox's fault)."""

    def __init__(self, faults):
        self.faults, self.runs, self.closed = faults, 0, 0

    def run(self, cells, seed):
        self.runs += 1
        if self.runs <= self.faults:
            raise SandboxBroken("the submission's process ended before running its first cell (test)")
        return ("ran", [{"cell": name, "error": None, "seconds": 0.0} for name, _ in cells])

    def close(self, graceful=True):
        self.closed += 1


def test_a_run_that_ends_before_its_first_cell_is_retried_once_on_a_fresh_sandbox_then_is_the_graders_error():
    from autograder.grading.submission import _run_cells

    once = FlakySandbox(faults=1)
    assert _run_cells(once, [("cell", "x = 1")], seed=0)[0] == "ran"
    assert once.runs == 2 and once.closed == 1  # replaced, then graded as usual
    always = FlakySandbox(faults=2)
    with pytest.raises(RuntimeError, match="could not run this submission"):  # an ERROR result: graded next run
        _run_cells(always, [("cell", "x = 1")], seed=0)
    assert always.runs == 2


def test_where_no_cgroup_can_be_made_the_ta_is_told_what_goes_uncounted(monkeypatch):
    from autograder.cli.common import memory_bound_warning

    monkeypatch.setattr(cgroups, "_probe", (None, "the memory and pids controllers are not delegated"))
    assert cgroups.available() == (False, "the memory and pids controllers are not delegated")
    warning = memory_bound_warning()
    assert "not delegated" in warning and "System V shared memory are not counted" in warning
    monkeypatch.undo()
    if os.geteuid() == 0:  # here (and under CI) the grader is root: cgroups exist, no warning
        assert memory_bound_warning() is None


# What a sealed fork (inside/world.py `seal`: the what-if runs of localisation) tries, to pass what
# it holds (the reference's values) to the submission's own process. `escape()` runs in the fork.
SEALED = LIBC + """
import mmap, signal, socket, threading
shared = mmap.mmap(-1, 4096)  # shared with every fork of this process, unless unmapped
kept_open = open("/tmp/kept.txt", "w")  # a file the fork inherits open
heard = []
signal.signal(signal.SIGUSR1, lambda *args: heard.append("signal"))
number = {"x86_64": %(x86)r, "aarch64": %(arm)r}[os.uname().machine]
secret = "untouched"

def attempt(what, action):
    try:
        action()
        return f"{what}: done"
    except BaseException as error:
        return f"{what}: {type(error).__name__}"

def escape():
    global secret
    secret = "changed in the fork"
    me, parent = os.getpid(), 1
    tried = [
        attempt("write a new file", lambda: open("/tmp/leak.txt", "w").write("x")),
        attempt("read a file", lambda: open("/etc/hostname").read()),
        attempt("write an inherited file", lambda: (kept_open.write("leak"), kept_open.flush())),
        attempt("signal the parent", lambda: os.kill(parent, signal.SIGUSR1)),
        attempt("signal the group", lambda: os.kill(0, signal.SIGUSR1)),
        attempt("System V message queue", lambda: (_ for _ in ()).throw(OSError()) if libc.syscall(number["msgget"], 0, 0o1600) < 0 else None),
        attempt("abstract socket", lambda: socket.socket(socket.AF_UNIX).connect("\\0autograder-leak")),
        attempt("fork", os.fork),
        attempt("run a program", lambda: os.execv("/bin/true", ["true"])),
        attempt("rename a folder", lambda: os.mkdir("/tmp/made")),
        attempt("priority of the parent", lambda: os.setpriority(os.PRIO_PROCESS, parent, 5)),
        attempt("a thread", lambda: threading.Thread(target=lambda: None).start()),
    ]
    return tried

def touch_shared():
    shared.write(b"leak")  # unmapped in a sealed fork: it ends there and then

def state():
    kept_open.flush()
    return {"leak": os.path.exists("/tmp/leak.txt") or os.path.exists("/tmp/made"),
            "kept": open("/tmp/kept.txt").read(), "shared": bytes(shared[:4]).decode(errors="replace"),
            "queues": open("/proc/sysvipc/msg").read().count("\\n")}
""" % {"x86": {**world._SYSCALLS["x86_64"], "msgget": 68}, "arm": {**world._SYSCALLS["aarch64"], "msgget": 186}}


def test_a_sealed_fork_can_pass_nothing_back_to_the_submission(box):
    """What-if runs hand the reference's values to the student's code: they run in a fork that ends
    afterwards and cannot write a file, shared memory or an inherited descriptor, signal anyone but
    itself, use System V IPC or sockets, fork or run a program (its shared memory is unmapped: a
    touch ends it). The submission finds everything as it left it; threads still work in the fork,
    as torch may need them."""
    reply, student = run(box, SEALED)
    assert reply[0] == "ran" and not reply[1][0]["error"], reply
    assert box.probe("trace", ("escape", []), {"trials": [{0: None}]})[0] == "student_error"  # never outside a seal
    assert box.open_fork(sealed=True) == ""
    reply = box.probe("call", ("escape",), {})
    assert box.close_fork() == ("joined", "ok")
    assert reply[0] == "ok", reply
    tried = dict(line.split(": ", 1) for line in reply[1])
    assert tried.pop("a thread") == "done"
    closed = {"write an inherited file", "System V message queue"}  # EBADF: closed; EPERM from libc's syscall()
    assert tried == {what: "OSError" if what in closed else "PermissionError" for what in tried}, tried
    assert box.open_fork(sealed=True) == ""
    assert box.probe("call", ("touch_shared",), {})[0] == "died"
    assert box.close_fork() == ("joined", "your code's process was killed by SIGSEGV (a crash)")
    assert student.value("secret") == "untouched" and student.value("heard") == []
    assert student.call("state") == {"leak": False, "kept": "", "shared": "\0\0\0\0", "queues": 1}
    box.finish()
    expect_a_normal_world(box)


def test_a_repair_runs_only_sealed_and_the_submission_finds_everything_as_it_left_it(box):
    """Issue 44: a repair run (grading/repairs.py) runs the student's cells again with a named
    mistake fixed, or the reference's answer in place of theirs, and the checks are asked again
    there. It runs in a sealed fork alone: never in the submission itself or an ordinary fork, and
    what it ran (the reference's code) is gone afterwards; it cannot write a file either."""
    reply, student = run(box, "def f(x):\n    return x * 2\n", "value = f(3)",
                         "import os\ndef leaked():\n    return os.path.exists('/tmp/leak.txt')")
    assert reply[0] == "ran" and not any(entry["error"] for entry in reply[1]), reply
    repair = [["cell 0", "def f(x):\n    return x + 100\n"], ["cell 1", "value = f(3)"]]
    assert box.probe("repair", [repair], {}) == ["refused", "repairs are run in a sealed fork only"]
    assert box.open_fork(sealed=False) == ""
    assert box.probe("repair", [repair], {})[0] == "refused"
    assert box.close_fork() == ("joined", "ok")
    with student.repairing([tuple(cell) for cell in repair]) as raised:
        assert raised == ["", ""]
        assert student.value("value") == 103 and student.call("f", 1) == 101  # every probe, there
    with student.repairing([("cell 0", "print('to nowhere'); open('/tmp/leak.txt', 'w').write('x')")]) as raised:
        assert raised == ["PermissionError"]  # a sealed process opens no file
    assert student.value("value") == 6 and student.call("f", 1) == 2
    assert student.call("f", 5) == 10 and student.lost is None and student.call("leaked") is False
    assert box.probe("call", ("f", 1), {})[1] == 2
    started = time.monotonic()
    with student.repairing([("cell 0", "while True:\n    pass")]) as raised:
        assert raised == ["TimeoutError"]  # stopped within its share of the time left: a third, 5 s at most
    assert time.monotonic() - started < 7 and student.call("f", 3) == 6
    with student.repairing([("cell 0", "import os\nos._exit(3)")]) as raised:
        assert raised is None  # the fork ended under it: nothing to tell, and it costs the student nothing
    assert student.lost is None and student.call("f", 2) == 4
    box.finish()
    expect_a_normal_world(box)


def test_no_sealed_fork_while_the_submission_left_a_thread_running(box):
    """A thread of the student's left running could watch a sealed fork (its memory, its time): the
    what-ifs are then not run at all, and the submission goes on as before."""
    reply, student = run(box, "import threading, time\nthreading.Thread(target=time.sleep, args=(60,), daemon=True).start()")
    assert reply[0] == "ran"
    assert box.open_fork(sealed=True) == "your code left 1 thread(s) running"
    assert student.kind("time") == "other"  # the submission still answers
    box.finish()


SOCKET_BUFFERS = """
import socket
held = []
try:
    for _ in range(4000):
        a, b = socket.socketpair()
        a.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4 * 2**20)
        a.setblocking(False)
        try:
            while True:
                a.send(b"x" * 65536)
        except BlockingIOError:
            pass
        held.append((a, b))
except OSError as error:
    stopped = repr(error)
"""


def test_memory_held_in_socket_buffers_reaches_the_bound_and_is_said_so(box):
    """Socket buffers are kernel memory, counted in the submission's cgroup; refused at the bound
    they move no failure counter of cgroup v1, yet the student reads the memory note, not that
    their code ended the process."""
    reply, _ = run(box, SOCKET_BUFFERS)
    box.finish()
    assert box.last_memory is not None and "reached the 256 MiB of memory" in box.last_memory, (reply, box.last_memory)
    expect_a_normal_world(box)


@pytest.mark.parametrize("files, reached", [
    ({"memory.failcnt": "0", "memory.kmem.failcnt": "0", "memory.limit_in_bytes": "268435456",
      "memory.max_usage_in_bytes": "268435456"}, True),  # kernel memory refused at the bound: no counter moved
    ({"memory.failcnt": "0", "memory.limit_in_bytes": "268435456", "memory.max_usage_in_bytes": "150000000"}, False),
    ({"memory.failcnt": "3", "memory.limit_in_bytes": "268435456", "memory.max_usage_in_bytes": "1"}, True),
    ({"memory.failcnt": "0", "memory.kmem.failcnt": "2", "memory.limit_in_bytes": "9", "memory.max_usage_in_bytes": "1"},
     True),
])
def test_a_bound_reached_is_read_from_every_counter_cgroup_v1_has(tmp_path, files, reached):
    for name, text in files.items():
        (tmp_path / name).write_text(text + "\n")
    cgroup = cgroups.SubmissionCgroup(cgroups.Hierarchy(tmp_path, tmp_path, v2=False), [tmp_path, tmp_path])
    assert cgroup.memory_reached() is reached


def test_a_bound_reached_in_cgroup_v2_is_its_max_or_oom_events(tmp_path):
    cgroup = cgroups.SubmissionCgroup(cgroups.Hierarchy(tmp_path, tmp_path, v2=True), [tmp_path])
    (tmp_path / "memory.events").write_text("low 0\nhigh 0\nmax 0\noom 0\noom_kill 0\n")
    assert not cgroup.memory_reached()
    (tmp_path / "memory.events").write_text("low 0\nhigh 0\nmax 0\noom 1\noom_kill 0\n")
    assert cgroup.memory_reached() and not cgroup.memory_exceeded()
