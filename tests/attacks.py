"""Hostile code a submission may hold, shared by the sandbox's tests and the class-level
attack collection (test_grade.py). Each snippet runs only inside the sandbox."""
import platform

from autograder.inside import world

LIBC = "import ctypes, os, struct\nlibc = ctypes.CDLL(None, use_errno=True)\n"
# This machine's syscall numbers, for the snippets below (as %(name)d)
NUMBERS = {**world._SYSCALLS[platform.machine()], "ioprio_set": {"x86_64": 251, "aarch64": 30}[platform.machine()]}
ACL = LIBC + """
# A default ACL with no permissions for anyone, on every folder it can reach, the mode bits
# left as they were: without a fresh file system the next student's home and working
# folders were made unusable, and a state check of the mode bits saw nothing.
acl = struct.pack("<I", 2) + b"".join(struct.pack("<HHI", tag, 0, 0xFFFFFFFF) for tag in (1, 4, 0x20))
for target in ("/tmp", "/dev/shm", os.path.realpath("/tmp"), os.getcwd(), os.path.expanduser("~")):
    for name, value in (("system.posix_acl_default", acl), ("user.mark", b"x")):
        try:
            os.setxattr(target, name, value)
        except OSError:
            pass
"""
PTRACE = LIBC + """
# Trace, read or take descriptors of every other process this code can name.
reached = []
for pid in range(1, 4096):
    if pid == os.getpid():
        continue
    if libc.ptrace(16, pid, 0, 0) == 0:  # PTRACE_ATTACH
        reached.append(("ptrace", pid))
    try:
        with open(f"/proc/{pid}/mem", "rb") as memory:
            reached.append(("mem", pid))
    except OSError:
        pass
    for target in (pid,):
        try:
            os.kill(target, 19)  # SIGSTOP
            reached.append(("stop", pid))
        except OSError:
            pass
"""
KEYS = LIBC + """
# Plant a key in every keyring this code can name, and look for the grader's.
planted = []
for ring in (-3, -4, -5, -2, -1):  # session, user, user session, process, thread
    if libc.syscall(%(add_key)d, b"user", b"planted", b"from a student", 14, ring) > 0:
        planted.append(ring)
found = libc.syscall(%(request_key)d, b"user", b"grader-secret", None, 0)
""" % NUMBERS
SCHEDULE = LIBC + """
# Lower the scheduling and I/O priority of everything this code can reach.
for pid in [0, os.getppid(), 1, *range(2, 64)]:
    try:
        os.sched_setscheduler(pid, os.SCHED_IDLE, os.sched_param(0))
    except OSError:
        pass
    try:
        os.setpriority(os.PRIO_PROCESS, pid, 19)
    except OSError:
        pass
try:
    os.setpriority(os.PRIO_USER, os.getuid(), 19)
except OSError:
    pass
libc.syscall(%(ioprio_set)d, 3, os.getuid(), (3 << 13))  # ioprio_set(IOPRIO_WHO_USER, uid, idle class)
os.kill(-1, 19)  # SIGSTOP to everything it may signal
""" % NUMBERS


# Many memory files, each under the file-size limit: 3 GiB that no address space shows.
MEMFD = "import os\nhoard = []\nfor _ in range(200):\n    hoard.append(os.memfd_create('hoard'))\n" \
        "    os.write(hoard[-1], b'x' * 15 * 2**20)\n"
SYSV = LIBC + """
# Chunks attached one at a time, so the address-space limit never sees more than one.
libc.shmat.restype = ctypes.c_void_p
for _ in range(16):
    segment = libc.shmget(0, 128 * 2**20, 0o1600)  # IPC_PRIVATE
    address = libc.shmat(segment, None, 0)
    ctypes.memset(address, 1, 128 * 2**20)
    libc.shmdt(ctypes.c_void_p(address))
"""
NESTED_TMPFS = LIBC + """
made = libc.unshare(0x10000000 | 0x00020000)  # a user and mount namespace of its own
error = ctypes.get_errno()
mounted = libc.mount(b"none", b"/tmp", b"tmpfs", 0, b"size=2g")
if mounted == 0:  # a private tmpfs no size limit of ours would count: fill it
    with open("/tmp/hoard", "wb") as hoard:
        for _ in range(64):
            hoard.write(b"x" * 2**25)
"""
INODES = "import os\nn = 0\ntry:\n    while n < 1_500_000:\n        open(f'/tmp/f{n}', 'w').close()\n        n += 1\n" \
         "except OSError as error:\n    stopped = str(error)\n"




# Logs every probe the grader makes and every value it is handed (the what-if runs' values are
# the reference's), by wrapping the probe API in its own process, and keeps them where a later
# answer can find them: in memory, and in a file. `report()` says all of it in one line, for an
# error message the student reads. It must never hold a hidden check's probes in what is shown
# before the due date, nor a what-if value anywhere.
PROBE_LOGGER = """
import hashlib as _hashlib, json as _json, sys as _sys
_seen, _trials = [], []


def _shape(value):
    return list(value.shape) if hasattr(value, "shape") else type(value).__name__


def _log(method, args, kwargs):
    _seen.append([method, [_shape(a) for a in args], sorted(kwargs)])
    for trial in kwargs.get("trials") or []:
        for value in trial.values():
            _trials.append(round(float(value.flatten()[0]), 4))
            try:
                with open("/tmp/leak.txt", "a") as leak:
                    leak.write(f"{float(value.flatten()[0]):.4f} ")
            except OSError:
                pass


def report():
    try:
        leaked = open("/tmp/leak.txt").read()
    except OSError:
        leaked = ""
    digest = _hashlib.sha256(_json.dumps(_seen).encode()).hexdigest()[:12]
    return f"seen {len(_seen)} probes, digest {digest}, trial values {_trials[:3]}, leaked file [{leaked[:40]}]"


_probes = _sys.modules.get("autograder.inside.student")
if _probes is not None:
    for _name in [name for name in dir(_probes.NamespaceStudent) if not name.startswith("_")]:
        _method = getattr(_probes.NamespaceStudent, _name)
        if callable(_method):
            def _logged(self, *args, _method=_method, _name=_name, **kwargs):
                _log(_name, args, kwargs)
                return _method(self, *args, **kwargs)
            setattr(_probes.NamespaceStudent, _name, _logged)
"""


def reporting_forward(class_name, method="forward"):
    """Code that makes `class_name`'s `method` raise what PROBE_LOGGER has seen so far."""
    return f"\ndef _reporting(self, *args, **kwargs):\n    raise RuntimeError(report())\n\n{class_name}.{method} = _reporting\n"
