"""What student code can see and do inside the sandbox, probed directly."""
import os
import socket
import subprocess
import sys
import threading
import time

import pytest
import torch

from autograder.grading.sandbox.limits import Limits
from autograder.grading.sandbox.process import Sandbox
from autograder.grading.sandbox.proxy import SandboxStudent
from autograder.wire import StudentError

from helpers import ROOT, sandbox_processes, settled_sandbox_processes

pytestmark = pytest.mark.usefixtures("sandbox_required")
WARM = 2  # processes of a warm sandbox seen from outside: bubblewrap and the worker (pid 1 inside)

SNOOP = f"""
import os, socket, sys
seen = "\\n".join([*(f"{{k}}={{v}}" for k, v in os.environ.items()), *sys.argv, os.getcwd(),
                   socket.gethostname(), *os.listdir("/tmp")])
paths = "\\n".join(sys.path)
readable = []
for path in [{str(ROOT)!r}, {str(ROOT / 'solutions')!r}, {str(ROOT / 'exercises')!r},
             {str(ROOT / "source")!r}, "/work", "/home"]:
    try:
        readable.append(path + ":" + ",".join(os.listdir(path)))
    except OSError:
        pass
written = []
for path in [{str(ROOT / 'gradebook.db')!r}, "/usr/lib/evil.py", sys.prefix + "/lib/sitecustomize.py"]:
    try:
        open(path, "a").write("x")
        written.append(path)
    except OSError:
        pass
"""


@pytest.fixture(scope="module")
def sandbox():
    box = Sandbox(0, Limits(timeout=15, memory_bytes=1 * 2**30))
    box.start()
    yield box
    box.close()


def pids(lines):
    """The process ids of `sandbox_processes()` lines."""
    return {line.split()[1] for line in lines}


def expect_stopped_in_time(box, student, within):
    """Calling `f` hits the time limit, and the grader gets its answer within `within` s."""
    started = time.perf_counter()
    with pytest.raises(StudentError, match="time limit"):
        student.call("f", torch.zeros(1))
    assert time.perf_counter() - started < within
    box.finish()


def expect_reusable(box):
    """The same sandbox grades the next submission normally."""
    reply, student = run(box, "v = 7")
    assert student.value("v") == 7
    box.finish()


def run(sandbox, *cells):
    reply = sandbox.run([(f"cell{i}", code) for i, code in enumerate(cells)], seed=0)
    return reply, SandboxStudent(sandbox)


def test_nothing_tells_the_code_it_is_graded_and_course_files_are_invisible(sandbox):
    reply, student = run(sandbox, SNOOP)
    assert reply[0] == "ran" and not reply[1][0]["error"], reply
    seen = student.value("seen").lower()
    for marker in ("grad", "pytest", "nbgrader", "course", "check", "solution", str(ROOT).lower()):
        assert marker not in seen, marker
    assert str(ROOT) not in student.value("paths")
    assert student.value("readable") == []
    assert student.value("written") == []
    sandbox.finish()


def test_no_network_even_to_the_hosts_loopback(sandbox):
    server = socket.create_server(("127.0.0.1", 0))
    port = server.getsockname()[1]
    server.settimeout(2)
    accepted = []
    listener = threading.Thread(target=lambda: accepted.append(_accept(server)), daemon=True)
    listener.start()
    code = (f"import socket\nresult = 'closed'\ntry:\n    socket.create_connection(('127.0.0.1', {port}), timeout=2)\n"
            "    result = 'open'\nexcept OSError as e:\n    result = type(e).__name__\n"
            "try:\n    socket.create_connection(('1.1.1.1', 80), timeout=2)\n    result += ' internet'\n"
            "except OSError:\n    pass\n")
    reply, student = run(sandbox, code)
    assert student.value("result") in ("ConnectionRefusedError", "OSError", "TimeoutError")
    sandbox.finish()
    listener.join(5)
    assert accepted == [None]  # nobody ever connected
    server.close()


def _accept(server):
    try:
        return server.accept()
    except OSError:
        return None


def test_files_and_processes_left_behind_do_not_reach_the_next_submission(sandbox):
    plant = """
import os, subprocess, sys, site
home = os.path.expanduser("~")
startup = os.path.join(home, ".ipython", "profile_default", "startup")
os.makedirs(startup, exist_ok=True)
open(os.path.join(startup, "00-evil.py"), "w").write("import torch; torch.softmax = None")
for folder in ["/tmp", home, os.getcwd(), *sys.path]:
    try:
        open(os.path.join(folder or ".", "sitecustomize.py"), "w").write("import torch; torch.softmax = None")
    except OSError:
        pass
subprocess.Popen(["sleep", "300"], start_new_session=True)
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        import time
        while True:
            time.sleep(0.01)
    os._exit(0)
"""
    reply, _ = run(sandbox, plant)
    assert not reply[1][0]["error"], reply
    sandbox.finish()
    reply, student = run(sandbox, "import os, torch\nhome = sorted(os.listdir(os.path.expanduser('~')))\n"
                                  "tmp = sorted(os.listdir('/tmp'))\n"
                                  "pids = sorted(int(p) for p in os.listdir('/proc') if p.isdigit())\n"
                                  "ok = torch.softmax(torch.zeros(2), dim=0).tolist()")
    assert student.value("home") == []
    assert student.value("tmp") == ["home", "output.txt", "work"]
    assert student.value("pids") == [1]  # a PID namespace of its own: it sees itself alone
    assert student.value("ok") == [0.5, 0.5]
    sandbox.finish()
    assert len(settled_sandbox_processes(WARM)) == WARM  # the sandbox itself, nothing a submission started


def test_limits_stop_memory_bombs_fork_bombs_and_floods_of_output(sandbox):
    started = time.perf_counter()
    reply, student = run(
        sandbox,
        "x = bytearray(8 * 2**30)",
        "import torch\ny = torch.empty(2**34)",
        "import os\nn = 0\ntry:\n    while True:\n        if os.fork() == 0:\n            import time\n"
        "            time.sleep(300)\n        n += 1\nexcept OSError:\n    pass",
        "for _ in range(200):\n    print('x' * 2**20)",
        "survived = True",
    )
    errors = [entry["error"] or "" for entry in reply[1]]
    assert "MemoryError" in errors[0]
    assert "RuntimeError" in errors[1] or "MemoryError" in errors[1]
    assert 0 < student.value("n") < 64
    assert "OSError" in errors[3] or "File too large" in errors[3]
    assert student.value("survived") is True
    sandbox.finish()
    assert len(settled_sandbox_processes(WARM)) == WARM
    assert time.perf_counter() - started < 15


@pytest.mark.slow
def test_an_endless_loop_is_stopped_and_the_sandbox_is_reused(sandbox):
    box = Sandbox(1, Limits(timeout=1))
    try:
        reply, student = run(box, "def f(x):\n    while True:\n        pass", "g = 1")
        assert reply[0] == "ran"
        expect_stopped_in_time(box, student, within=4)
        reply, student = run(box, "while True:\n    pass", "after = 1")
        # The child stops the cell at the limit and says which cells ran (the grader waits
        # REPORT_GRACE for that report), so the student reads the same on any machine.
        assert reply[0] == "ran", reply
        assert "time limit" in reply[1][0]["error"] and "not run" in reply[1][1]["error"]
        box.finish()
        expect_reusable(box)
        # Code that silences the child's own timer meets the grader's deadline instead.
        reply, student = run(box, "import signal\nsignal.signal(signal.SIGALRM, signal.SIG_IGN)\n"
                                  "while True:\n    pass", "after = 1")
        assert reply[0] in ("timeout", "died"), reply
        box.finish()
        expect_reusable(box)
    finally:
        box.close()


@pytest.mark.parametrize("ending", ["os._exit(0)", "sys.exit(0)", "raise KeyboardInterrupt",
                                    "raise SystemExit(3)", "os.kill(os.getppid(), 9)"])
def test_exits_and_interrupts_in_forward_only_end_that_submission(sandbox, ending):
    code = f"import os, sys\ndef f(x):\n    {ending}\n"
    reply, student = run(sandbox, code)
    try:
        answer = student.call("f", torch.zeros(1))
    except StudentError:
        answer = None
    assert answer is None  # nothing a check could take for a right answer
    sandbox.finish()
    sandbox.ensure_started()  # restarted if the worker itself was killed
    reply, student = run(sandbox, "w = 2")
    assert student.value("w") == 2
    sandbox.finish()
    assert len(settled_sandbox_processes(WARM)) == WARM


def test_answers_that_are_not_plain_data_never_reach_the_grader(sandbox):
    code = """
import torch
class Liar(torch.Tensor):
    def __eq__(self, other):
        return True
class AlwaysEqual:
    def __eq__(self, other):
        return True
def subclass(x):
    return x.as_subclass(Liar)
def odd(x):
    return AlwaysEqual()
"""
    reply, student = run(sandbox, code)
    value = student.call("subclass", torch.ones(2))
    assert type(value) is torch.Tensor
    with pytest.raises(StudentError, match="not a tensor"):
        student.call("odd", torch.ones(2))
    sandbox.finish()


def test_a_half_written_answer_cannot_hang_the_grader():
    """The submission writes the start of a frame on its socket, then stops."""
    code = """
import os, stat, struct, time
def f(x):
    for fd in range(3, 64):
        try:
            if stat.S_ISSOCK(os.fstat(fd).st_mode):
                os.write(fd, struct.pack(">Q", 1000) + b"J[")
        except OSError:
            pass
    time.sleep(60)
"""
    box = Sandbox(2, Limits(timeout=1.5))
    try:
        reply, student = run(box, code)
        expect_stopped_in_time(box, student, within=5)
        expect_reusable(box)
    finally:
        box.close()


def test_locked_folders_and_shared_memory_end_with_their_submission(sandbox):
    reply, _ = run(sandbox, "import os\nos.makedirs('locked/inner/deeper')\nos.chmod('locked/inner', 0)\n"
                            "os.chmod('locked', 0)")
    assert not reply[1][0]["error"], reply
    sandbox.finish()
    assert sandbox.process is not None  # wiped in place: the sandbox is kept
    reply, student = run(sandbox, "import os\nleft = sorted(os.listdir('/tmp')) + os.listdir('.')")
    assert student.value("left") == ["home", "output.txt", "work"]
    sandbox.finish()
    reply, _ = run(sandbox, "import ctypes\nsegment = ctypes.CDLL(None).shmget(4321, 4096, 0o1666)")
    sandbox.finish()
    # System V memory outlives processes, but not the IPC namespace each submission has
    # of its own: the sandbox is kept, and the next submission finds nothing.
    assert sandbox.process is not None
    reply, student = run(sandbox, "shm = open('/proc/sysvipc/shm').read().strip().splitlines()[1:]")
    assert student.value("shm") == []
    sandbox.finish()


def test_without_bubblewrap_root_still_hands_student_code_to_an_unprivileged_user(tmp_path, monkeypatch):
    """The opt-out's plain process is never root: in a private mount namespace where one
    can be made, else (Gradescope's Docker) as the slot's uid when it can reach Python;
    where neither works the grader refuses instead of running student code as root."""
    from autograder.grading.sandbox import isolation
    from autograder.grading.sandbox.commands import plain_command

    monkeypatch.setattr(isolation, "_plain", None)
    monkeypatch.setattr(isolation, "_mount_namespace_works", lambda: False)
    monkeypatch.setattr(isolation, "reachable", lambda path: True)
    command, scratch, env = plain_command(3, 7, tmp_path, Limits(), [])
    uid = isolation.SANDBOX_UID_BASE + 3
    assert command[:2] == ["setpriv", f"--reuid={uid}"] and "plain" in command
    assert os.stat(scratch).st_uid == uid and os.stat(scratch).st_mode & 0o777 == 0o700
    assert env["HOME"].startswith(scratch) and env["TMPDIR"] == scratch
    os.rmdir(scratch)
    monkeypatch.setattr(isolation, "_plain", None)
    monkeypatch.setattr(isolation, "reachable", lambda path: False)
    with pytest.raises(isolation.NoSandbox, match="cannot read it"):
        plain_command(3, 7, tmp_path, Limits(), [])
    monkeypatch.setattr(isolation, "_plain", None)
    monkeypatch.setattr(isolation, "_mount_namespace_works", lambda: True)
    command, scratch, env = plain_command(3, 7, tmp_path, Limits(), ["/some/course"])
    assert command[:3] == ["unshare", "--mount", "--propagation"] and scratch is None
    assert "setpriv" in command and f"--reuid={uid}" in command
    assert "/some/course" in command[command.index("-c") + 1]  # hidden behind an empty tmpfs


FILL_EVERYTHING = """
import ctypes, os
places = {"/tmp", "/dev/shm", os.getcwd(), os.path.expanduser("~")}
for root, dirs, files in os.walk("/"):
    if root.startswith(("/proc", "/sys")):
        dirs[:] = []
        continue
    probe = os.path.join(root, ".can-write")
    try:
        open(probe, "w").close()
        os.unlink(probe)
        places.add(root)
    except OSError:
        pass
chunk, total = b"x" * 2**20, 0
for number, place in enumerate(sorted(places)):  # /tmp and /dev/shm count twice if they are one place
    for index in range(1000):
        try:
            with open(os.path.join(place, f"fill-{number}-{index}"), "wb") as handle:
                for _ in range(8):  # 8 MB files: under the per-file limit
                    handle.write(chunk)
                    handle.flush()
                    total += len(chunk)
        except OSError:
            break
writable = sorted(os.path.realpath(p) for p in places)
libc = ctypes.CDLL(None, use_errno=True)
libc.mq_open.restype = ctypes.c_int
queue = libc.mq_open(b"/left-for-the-next-student", os.O_CREAT | os.O_RDWR, 0o600, None)
"""


def test_every_writable_place_together_holds_at_most_the_scratch_limit_and_is_wiped():
    limit = 64 * 2**20
    box = Sandbox(3, Limits(timeout=60, scratch_bytes=limit))
    try:
        reply, student = run(box, FILL_EVERYTHING)
        assert reply[0] == "ran" and not reply[1][0]["error"], reply
        assert all(p.startswith("/dev/shm") for p in student.value("writable")), student.value("writable")
        assert limit / 2 < student.value("total") <= limit  # /tmp and /dev/shm: one tmpfs, one limit
        assert student.value("queue") == -1  # no POSIX message queue to leave behind
        box.finish()
        reply, student = run(box, "import os\nseen = {p: sorted(os.listdir(p)) for p in ('/tmp', '/dev/shm', '.', "
                                   "os.path.expanduser('~'))}\nfree = os.statvfs('/tmp')")
        assert student.value("seen") == {"/tmp": ["home", "output.txt", "work"],
                                         "/dev/shm": ["home", "output.txt", "work"], ".": [], "/tmp/home": []}
        box.finish()
    finally:
        box.close()


SCAN_MEMORY = """
import ctypes
needle = ("Qz7" * 4).encode()
hits = 0
with open("/proc/self/maps") as maps:
    regions = [line.split() for line in maps]
for fields in regions:  # every private writable mapping: the heap and what malloc mapped
    if fields[1].startswith("rw") and (len(fields) < 6 or fields[5] == "[heap]"):
        start, end = (int(x, 16) for x in fields[0].split("-"))
        hits += ctypes.string_at(start, end - start).count(needle)
"""


def test_the_next_student_cannot_find_an_earlier_students_code_in_memory(sandbox):
    """Cells go straight to the submission's own process: the warm worker, whose heap every
    later child inherits, never holds them."""
    reply, _ = run(sandbox, "secret = '" + "Qz7" * 70_000 + "'")  # 210 KB of one student's code
    assert reply[0] == "ran"
    sandbox.finish()
    reply, student = run(sandbox, SCAN_MEMORY)
    assert reply[0] == "ran" and not reply[1][0]["error"], reply
    assert student.value("hits") < 100  # its own needle, a few times; a leak would give ~17 500
    sandbox.finish()


def _adopt_and_grade(handover, answers):
    """In another process: adopt a launched sandbox, grade one cell, close it."""
    from autograder.grading.sandbox.limits import Limits
    from autograder.grading.sandbox.process import Sandbox
    from autograder.grading.sandbox.proxy import SandboxStudent

    box = Sandbox(handover.slot, Limits(timeout=15, memory_bytes=2**30))
    box.adopt(handover)
    box.await_hello()
    reply = box.run([("cell", "v = 6 * 7")], seed=0)
    answers.put((reply[0], SandboxStudent(box).value("v")))
    box.finish()
    box.close(graceful=False)  # not its child: killed through its process group all the same
    answers.put(box.process is None)


def test_a_sandbox_launched_by_one_process_is_used_and_closed_by_another(tmp_path):
    """The grader launches each worker's first sandbox; the worker, made later by the fork
    server, adopts it (its control socket crosses as a duplicated descriptor)."""
    from autograder.grading.scheduler import _worker_context

    before = set(sandbox_processes())  # this module's own warm sandbox
    launched = Sandbox(0, Limits(timeout=15, memory_bytes=2**30))
    launched.launch(for_another=True)
    errors = launched.stderr_path
    assert os.path.exists(errors)
    context = _worker_context()  # the fork server the local workers come from
    answers = context.Queue()
    worker = context.Process(target=_adopt_and_grade, args=(launched.handover(), answers))
    worker.start()
    assert answers.get(timeout=120) == ("ran", 42)
    assert answers.get(timeout=30) is True
    worker.join(30)
    assert worker.exitcode == 0
    assert launched.process.wait(timeout=10) is not None  # killed by the worker; reaped here, its launcher
    assert not os.path.exists(errors)  # the worker took its error output and removed the file
    launched.close(graceful=False)
    assert pids(settled_sandbox_processes(len(before))) <= pids(before)  # (a line's state may change)


def test_an_adopted_sandbox_that_dies_is_seen_as_ended():
    from autograder.grading.sandbox.handover import AdoptedProcess

    before = set(sandbox_processes())
    launched = Sandbox(0, Limits(timeout=15, memory_bytes=2**30))
    launched.launch(for_another=True)
    adopted = AdoptedProcess(launched.process.pid, None)
    assert adopted.poll() is None
    with pytest.raises(subprocess.TimeoutExpired):
        adopted.wait(timeout=0.05)
    adopted.kill()  # the launcher has not reaped it: still a zombie of ours, so its pid is its own
    assert adopted.wait(timeout=10) is not None
    launched.close(graceful=False)
    assert pids(settled_sandbox_processes(len(before))) <= pids(before)  # (a line's state may change)


def test_a_sandbox_abandoned_while_another_process_may_use_it_is_killed_but_keeps_its_pid():
    """Stopped early, the grader kills the sandboxes it launched without reaping them: a
    worker still closing its own then signals a zombie, never a reused pid."""
    from autograder.grading.sandbox import handover

    before = set(sandbox_processes())
    launched = Sandbox(0, Limits(timeout=15, memory_bytes=2**30))
    launched.launch(for_another=True)
    pid, errors = launched.process.pid, launched.stderr_path
    launched.abandon()
    assert launched.process is None and not os.path.exists(errors)
    adopted = handover.AdoptedProcess(pid, None)
    assert adopted.wait(timeout=10) is not None  # dead ...
    with open(f"/proc/{pid}/stat") as stat:
        assert stat.read().rsplit(")", 1)[1].split()[0] == "Z"  # ... and not reaped: the pid is still its
    adopted.kill()  # harmless
    process = handover.UNREAPED.pop()
    assert process.pid == pid
    process.wait(timeout=10)
    assert pids(settled_sandbox_processes(len(before))) <= pids(before)  # (a line's state may change)


GRID = """
import sys, torch

class Grid(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = torch.nn.Linear(4, 4)
    def forward(self, x):
        return torch.softmax(self.proj(x), dim=-1) + torch.arange(x.shape[-1], device=x.device)

def compiler_loaded():
    return "torch._dynamo" in sys.modules
"""


def test_the_meta_device_probe_runs_without_importing_the_compiler(sandbox):
    """The warm interpreter marks torch's kernels so that the meta device does not import
    torch._dynamo (0.8 s per sandbox), and a student who compiles still can."""
    reply, student = run(sandbox, GRID, "before = 'torch._dynamo' in sys.modules")
    assert reply[0] == "ran" and not any(entry["error"] for entry in reply[1]), reply
    handle = student.new("Grid", seed=0)
    report = student.meta_forward(handle, torch.randn(2, 3, 4))
    assert report["error"] is None and report["output_device"] == "meta" and report["cpu_ops"] == []
    assert student.value("before") is False and student.call("compiler_loaded") is False
    sandbox.finish()
    compiled = GRID + """
seen = 'torch._dynamo' in sys.modules
f = torch.compile(lambda x: torch.softmax(x, dim=-1) * 2, backend="eager")
y = f(torch.zeros(2, 4))
after = 'torch._dynamo' in sys.modules
meta = Grid().to("meta")(torch.zeros(2, 3, 4, device="meta")).shape
"""
    reply, student = run(sandbox, compiled)
    assert reply[0] == "ran" and not reply[1][0]["error"], reply
    assert student.value("seen") is False and student.value("after") is True
    assert torch.equal(student.value("y"), torch.full((2, 4), 0.5))
    assert list(student.value("meta")) == [2, 3, 4]  # the marks undone: torch's own path, still right
    sandbox.finish()


@pytest.mark.parametrize("meddle", [
    "import os, resource\nresource.prlimit(os.getppid(), resource.RLIMIT_NOFILE, (8, 8))",
    "import os\nos.setpriority(os.PRIO_PROCESS, os.getppid(), 19)",
    "import os\nos.chmod('/tmp', 0o555)",
])
def test_a_submission_cannot_name_its_worker_so_meddling_changes_only_itself(sandbox, meddle):
    """A child has the worker's uid, but it runs in a PID namespace and on a file system of
    its own: its parent is not even named (getppid() is 0, which means itself), so the
    worker stays as it was and is kept, and the next student is graded normally. (Were the
    worker changed anyway, its state check would replace it: see agent._own_state.)"""
    reply, _ = run(sandbox, meddle)
    assert reply[0] == "ran" and not reply[1][0]["error"], reply
    sandbox.finish()
    assert sandbox.process is not None and sandbox.last_clean
    reply, student = run(sandbox, "import os, resource\nfiles = resource.getrlimit(resource.RLIMIT_NOFILE)\n"
                                  "nice = os.getpriority(os.PRIO_PROCESS, 0)\nmode = os.stat('/tmp').st_mode & 0o777")
    assert student.value("files") == [256, 256] and student.value("nice") == 0 and student.value("mode") == 0o755
    sandbox.finish()


WARM_MODULE = "email.mime.text"  # imported by neither torch nor IPython: a mark of the release's run


def sandbox_with_release(code, seconds=1):
    """A sandbox whose assignment's release is the single cell `code`."""
    import json

    files = {"settings.json": json.dumps({"warm_up_seconds": seconds}).encode(),
             "release_cells.json": json.dumps([["release cell 1", code]]).encode()}
    return Sandbox(0, Limits(timeout=15, memory_bytes=1 * 2**30), extra_files=files)


INSPECT_START = f"""
import os, sys, warnings, numpy, torch
warm = {WARM_MODULE!r} in sys.modules
names = sorted(name for name in globals() if not name.startswith("_"))
environment = "FROM_RELEASE" in os.environ
files = os.listdir(".") + os.listdir(os.environ["HOME"])
state = [str(torch.get_default_dtype()), torch.is_grad_enabled(), torch._tensor_str.PRINT_OPTS.precision,
         numpy.get_printoptions()["precision"], sys.path[0]]
with warnings.catch_warnings(record=True) as seen:
    warnings.warn("shown")
warned = len(seen)
compiler = "torch._dynamo" in sys.modules
"""


def start_as_without_release(student):
    """What a submission sees at its start is what it would see without any warm-up."""
    assert student.value("names") == ["In", "Out", "exit", "get_ipython", "numpy", "open", "os", "quit",
                                      "sys", "torch", "warm", "warnings"]
    assert student.value("environment") is False and student.value("files") == []
    assert student.value("state")[:4] == ["torch.float32", True, 4, 8]
    assert student.value("warned") == 1
    assert student.value("compiler") is False  # putting torch's state back must not import it


def test_the_sandbox_warms_up_on_the_release_and_each_submission_starts_as_without_it():
    release = f"""import {WARM_MODULE}, os, sys, warnings, numpy, torch
os.environ["FROM_RELEASE"] = "1"
leftover = torch.ones(3)
open("left.txt", "w").write("x")
open(os.path.join(os.environ["HOME"], "home.txt"), "w").write("x")
sys.path.insert(0, "/release")
torch.set_printoptions(precision=1)
torch.set_default_dtype(torch.float64)
torch.set_grad_enabled(False)
numpy.set_printoptions(precision=1)
warnings.simplefilter("ignore")
"""
    box = sandbox_with_release(release)
    try:
        assert box.start()["release_warm_up"].startswith("ok")
        reply, student = run(box, INSPECT_START)
        assert [cell["error"] for cell in reply[1]] == [None]
        assert student.value("warm") is True  # its imports were paid once, in the warm interpreter
        start_as_without_release(student)
        assert student.value("state")[4] != "/release"
        box.finish()
    finally:
        box.close()


@pytest.mark.parametrize("release, why", [
    ("import threading, time\nthreading.Thread(target=time.sleep, args=(60,), daemon=True).start()",
     "left threads or processes running"),
    ("import subprocess\nsubprocess.Popen(['sleep', '60'])", "left threads or processes running"),
    ("import os\nos._exit(3)", "ended its process"),
    ("import os, signal\nos.kill(os.getpid(), signal.SIGSEGV)", "ended its process"),
    ("while True:\n    pass", "took more than 1 s"),
], ids=["thread", "process", "exit", "crash", "loop"])
def test_a_release_unsafe_to_warm_up_on_is_tried_once_and_left_out(release, why):
    """Tried in a forked trial first: the warm interpreter never runs it, and grading goes on."""
    box = sandbox_with_release(f"import {WARM_MODULE}\n{release}")
    try:
        started = time.perf_counter()
        hello = box.start()
        assert why in hello["release_warm_up"] and hello["release_warm_up"].startswith("skipped")
        assert time.perf_counter() - started < 60
        reply, student = run(box, INSPECT_START)
        assert student.value("warm") is False
        start_as_without_release(student)
        box.finish()
        expect_reusable(box)
    finally:
        box.close()


def test_agent_folders_nobody_holds_are_swept_and_a_held_one_is_kept(tmp_path, monkeypatch):
    """Each version of the sandbox's code or settings gets a folder; one no sandbox holds
    any more (an older version, a killed run) goes when the next sandbox prepares."""
    from autograder.grading.sandbox import agent_files

    monkeypatch.setattr(agent_files, "shared_temp_dir", lambda: tmp_path)
    uid = os.geteuid()
    stale, held = tmp_path / f"autograder-agent-{uid}-0000stale", tmp_path / f"autograder-agent-{uid}-0000held"
    young = tmp_path / f"autograder-agent-{uid}-0000young"
    for folder in (stale, held, young):
        (folder / "autograder").mkdir(parents=True)
    for folder in (stale, held):
        os.utime(folder, (time.time() - 3600, time.time() - 3600))
    lock = agent_files.hold_agent_dir(held)  # a sandbox of another batch still runs on it
    try:
        box = Sandbox(0, extra_files={"settings.json": b"{}"})
        box.prepare()
        assert box.agent.exists() and box.agent_lock is not None
        assert not stale.exists() and held.exists() and young.exists()
    finally:
        os.close(lock)


def test_the_last_sandbox_to_close_removes_its_agent_folder_and_a_held_one_stays(tmp_path, monkeypatch):
    """A run leaves no agent folder behind: each sandbox removes its folder when it closes,
    unless another sandbox still runs on it; a sandbox started again makes it anew."""
    from autograder.grading.sandbox import agent_files

    monkeypatch.setattr(agent_files, "shared_temp_dir", lambda: tmp_path)
    first, second = Sandbox(0, extra_files={"settings.json": b"{}"}), Sandbox(1, extra_files={"settings.json": b"{}"})
    first.prepare()
    second.prepare()
    folder = first.agent
    assert second.agent == folder and folder.is_dir()  # one folder per version, shared
    first.close()
    assert folder.is_dir()  # the second sandbox still holds it
    second.close()
    assert not folder.exists() and list(tmp_path.glob("autograder-agent-*")) == []
    first.prepare()  # started again: made again
    assert first.agent.is_dir() and first.agent_lock is not None
    first.close()
    assert list(tmp_path.glob("autograder-agent-*")) == []



FOREIGN = """
import os, sys, time
from autograder.grading.sandbox.limits import Limits
from autograder.grading.sandbox.process import Sandbox
box = Sandbox(5, Limits(timeout=15, memory_bytes=2**30))
box.start()
with open(sys.argv[1] + ".part", "w") as handle:
    handle.write(f"{box.process.pid} {os.getpid()}")
os.rename(sys.argv[1] + ".part", sys.argv[1])
time.sleep(120)
"""


@pytest.mark.usefixtures("sandbox_required")
def test_the_tests_count_only_the_sandboxes_they_started(sandbox, tmp_path):
    """Another grader on the machine (another clone's tests, a TA's run) has sandboxes of the same
    uids: the tests' counts leave them out (they carry another run id), and keep this session's."""
    from autograder.grading.sandbox.process import RUN_ID
    from autograder.grading.sandbox.isolation import SANDBOX_UID_BASE

    # `setsid -f`: a process of its own, not below this one (its starter ends at once)
    subprocess.run(["setsid", "-f", sys.executable, "-c", FOREIGN, str(tmp_path / "pid")], check=True,
                   env={**os.environ, RUN_ID: "another-grader"})
    deadline = time.monotonic() + 60
    while not (tmp_path / "pid").exists():
        assert time.monotonic() < deadline, "the other grader did not start its sandbox"
        time.sleep(0.1)
    bwrap, grader = map(int, (tmp_path / "pid").read_text().split())
    try:
        listing = subprocess.run(["ps", "-eo", "uid=,pid=,ppid="], capture_output=True, text=True).stdout
        rows = [tuple(map(int, line.split())) for line in listing.splitlines()]
        theirs = {str(pid) for uid, pid, parent in rows if parent == bwrap or pid == bwrap}
        theirs |= {str(pid) for uid, pid, parent in rows if str(parent) in theirs}
        assert any(SANDBOX_UID_BASE <= uid for uid, pid, _ in rows if str(pid) in theirs)  # it runs, as a sandbox uid
        ours = pids(sandbox_processes())
        assert ours and not ours & theirs
        assert str(sandbox.process.pid) in ours or any(
            int(parent) == sandbox.process.pid for uid, pid, parent in rows if str(pid) in ours)
    finally:
        os.kill(grader, 9)  # its sandbox ends with it (--die-with-parent)
