"""A fresh world for each submission, made inside the warm sandbox (Linux only).

The warm worker forks one process per submission (the *keeper*). Before any student
code runs, the keeper:

1. joins the submission's own cgroups (descriptors opened by the grader, outside);
2. unshares a new user, mount, IPC and PID namespace: the user namespace is only
   there so that the others can be made without privileges;
3. mounts a new, size- and inode-bounded tmpfs over the scratch folder, so nothing an
   earlier submission did to its files, their modes, ACLs or extended attributes can
   be seen: the whole file system is new and goes away with the namespace;
4. forks the *submission process*, the first process (pid 1) of the new PID namespace.
   It mounts a /proc of its own (it sees only its own processes), joins a new session
   keyring, gives up every capability, and installs a syscall filter (`seccomp`) that
   refuses ptrace, reading other processes' memory or descriptors, keyrings, mounts
   and new namespaces. Then it runs the student's cells.

So a submission cannot see or signal the warm worker, bubblewrap or any earlier
submission; its System V objects, keys, files and processes all end with it (when the
namespace's first process ends the kernel kills the rest); and the worker checks its
own state afterwards anyway. The keeper waits and ends as the submission process did,
so the worker reads one exit status and one CPU usage, as before.

This file imports only the standard library: it runs next to student code.
"""
import ctypes
import errno
import os
import platform
import struct

CLONE_NEWNS, CLONE_NEWCGROUP, CLONE_NEWUTS = 0x00020000, 0x02000000, 0x04000000
CLONE_NEWIPC, CLONE_NEWUSER, CLONE_NEWPID, CLONE_NEWNET = 0x08000000, 0x10000000, 0x20000000, 0x40000000
NAMESPACE_FLAGS = CLONE_NEWNS | CLONE_NEWCGROUP | CLONE_NEWUTS | CLONE_NEWIPC | CLONE_NEWUSER | CLONE_NEWPID | CLONE_NEWNET
MS_NOSUID, MS_NODEV, MS_NOEXEC, MS_REC, MS_PRIVATE = 0x2, 0x4, 0x8, 0x4000, 0x40000
PR_SET_DUMPABLE, PR_CAPBSET_DROP, PR_SET_NO_NEW_PRIVS, PR_SET_SECCOMP, PR_CAP_AMBIENT = 4, 24, 38, 22, 47
PR_CAP_AMBIENT_CLEAR_ALL, SECCOMP_MODE_FILTER = 4, 2
KEYCTL_JOIN_SESSION_KEYRING = 1
SETUP_FAILED = 71  # the keeper's exit code when the world could not be made: never the student's fault

_libc = ctypes.CDLL(None, use_errno=True)


class WorldError(OSError):
    """The fresh world could not be made: the grader's problem, not the student's."""


def _check(result, what):
    if result != 0:
        number = ctypes.get_errno()
        raise WorldError(number, f"{what}: {os.strerror(number)}")


# -- the syscall filter ---------------------------------------------------------------
# Numbers per architecture (from the kernel's syscall tables). Where the machine is
# neither, no filter is installed and the hello message says so.
_AUDIT_ARCH = {"x86_64": 0xC000003E, "aarch64": 0xC00000B7}
_SYSCALLS = {
    "x86_64": {"ptrace": 101, "process_vm_readv": 310, "process_vm_writev": 311, "pidfd_getfd": 438,
               "kcmp": 312, "keyctl": 250, "add_key": 248, "request_key": 249, "unshare": 272, "setns": 308,
               "mount": 165, "umount2": 166, "pivot_root": 155, "chroot": 161, "open_tree": 428,
               "move_mount": 429, "fsopen": 430, "fsconfig": 431, "fsmount": 432, "fspick": 433,
               "mount_setattr": 442, "bpf": 321, "perf_event_open": 298, "userfaultfd": 323,
               "io_uring_setup": 425, "io_uring_enter": 426, "io_uring_register": 427, "process_madvise": 440,
               "kexec_load": 246, "init_module": 175, "finit_module": 313, "delete_module": 176,
               "clone": 56, "clone3": 435},
    "aarch64": {"ptrace": 117, "process_vm_readv": 270, "process_vm_writev": 271, "pidfd_getfd": 438,
                "kcmp": 272, "keyctl": 219, "add_key": 217, "request_key": 218, "unshare": 97, "setns": 268,
                "mount": 40, "umount2": 39, "pivot_root": 41, "chroot": 51, "open_tree": 428,
                "move_mount": 429, "fsopen": 430, "fsconfig": 431, "fsmount": 432, "fspick": 433,
                "mount_setattr": 442, "bpf": 280, "perf_event_open": 241, "userfaultfd": 282,
                "io_uring_setup": 425, "io_uring_enter": 426, "io_uring_register": 427, "process_madvise": 440,
                "kexec_load": 104, "init_module": 105, "finit_module": 273, "delete_module": 106,
                "clone": 220, "clone3": 435},
}
# Refused outright. clone is allowed without namespace flags (fork, threads); clone3 passes
# its flags in memory a filter cannot read, so it answers ENOSYS and the C library falls
# back to clone, as under Docker's default profile.
REFUSED = ("ptrace", "process_vm_readv", "process_vm_writev", "pidfd_getfd", "kcmp", "keyctl", "add_key",
           "request_key", "unshare", "setns", "mount", "umount2", "pivot_root", "chroot", "open_tree",
           "move_mount", "fsopen", "fsconfig", "fsmount", "fspick", "mount_setattr", "bpf", "perf_event_open",
           "userfaultfd", "io_uring_setup", "io_uring_enter", "io_uring_register", "process_madvise",
           "kexec_load", "init_module", "finit_module", "delete_module")

_LD_W_ABS, _JEQ, _JGE, _JSET, _RET = 0x20, 0x15, 0x35, 0x45, 0x06
_ALLOW, _ERRNO = 0x7FFF0000, 0x00050000
_X32_BIT = 0x40000000


def filter_program(machine=None):
    """The seccomp program for this machine as a list of (code, jt, jf, k), or None."""
    machine = machine or platform.machine()
    if machine not in _SYSCALLS:
        return None
    numbers = _SYSCALLS[machine]
    deny = (_RET, 0, 0, _ERRNO | errno.EPERM)
    program = [(_LD_W_ABS, 0, 0, 4)]  # seccomp_data.arch
    program.append((_JEQ, 1, 0, _AUDIT_ARCH[machine]))
    program.append(deny)  # another ABI (32-bit calls on a 64-bit kernel): refused
    program.append((_LD_W_ABS, 0, 0, 0))  # seccomp_data.nr
    if machine == "x86_64":
        program.append((_JGE, 0, 1, _X32_BIT))
        program.append(deny)
    for name in REFUSED:
        program.append((_JEQ, 0, 1, numbers[name]))
        program.append(deny)
    program.append((_JEQ, 0, 1, numbers["clone3"]))
    program.append((_RET, 0, 0, _ERRNO | errno.ENOSYS))
    program.append((_JEQ, 0, 3, numbers["clone"]))
    program.append((_LD_W_ABS, 0, 0, 16))  # low half of args[0], the flags (little-endian)
    program.append((_JSET, 0, 1, NAMESPACE_FLAGS))
    program.append(deny)
    program.append((_RET, 0, 0, _ALLOW))
    return program


def install_filter(program=None):
    """Refuse the syscalls in REFUSED (or as `program` says) for this process and all it starts.
    Irreversible; filters add up, the strictest answer wins."""
    program = filter_program() if program is None else program
    if program is None:
        raise WorldError(errno.ENOSYS, f"no syscall filter for this machine ({platform.machine()})")
    raw = b"".join(struct.pack("HBBI", *instruction) for instruction in program)
    buffer = ctypes.create_string_buffer(raw, len(raw))

    class Program(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]

    fprog = Program(len(program), ctypes.cast(buffer, ctypes.c_void_p))
    _check(_libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "no_new_privs")
    _check(_libc.prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.byref(fprog), 0, 0), "seccomp")


# -- a sealed fork ----------------------------------------------------------------------------
# A fork of the submission that is handed the reference's values (the what-if runs of value
# localisation) must have no way to pass anything to the process it was forked from, whose later
# answers a page may quote. `seal` closes every descriptor it inherited but its own channel to the
# grader, unmaps shared memory, and adds a filter that refuses what could reach another process:
# files (no open at all, no change to a path), System V IPC and message queues, sockets (abstract
# Unix sockets are shared), signals to anyone but itself, other processes' priorities, limits and
# memory placement, new programs and new processes (threads only). The parent waits meanwhile with
# every signal blocked and nothing else running (agent.py checks), so nothing watches it either.
_SEAL_NUMBERS = {
    "x86_64": {"open": 2, "creat": 85, "openat": 257, "openat2": 437, "name_to_handle_at": 303,
               "open_by_handle_at": 304, "rename": 82, "renameat": 264, "renameat2": 316, "unlink": 87,
               "unlinkat": 263, "rmdir": 84, "mkdir": 83, "mkdirat": 258, "link": 86, "linkat": 265,
               "symlink": 88, "symlinkat": 266, "mknod": 133, "mknodat": 259, "truncate": 76, "chmod": 90,
               "fchmodat": 268, "fchmodat2": 452, "chown": 92, "fchownat": 260, "lchown": 94, "utime": 132,
               "utimes": 235, "futimesat": 261, "utimensat": 280, "setxattr": 188, "lsetxattr": 189,
               "removexattr": 197, "lremovexattr": 198, "socket": 41, "tkill": 200, "rt_sigqueueinfo": 129,
               "rt_tgsigqueueinfo": 297, "pidfd_open": 434, "pidfd_send_signal": 424, "shmget": 29, "shmat": 30,
               "shmctl": 31, "semget": 64, "semop": 65, "semctl": 66, "semtimedop": 220, "msgget": 68,
               "msgsnd": 69, "msgrcv": 70, "msgctl": 71, "mq_open": 240, "mq_timedsend": 242, "mq_notify": 244,
               "prctl": 157, "execve": 59, "execveat": 322, "fork": 57, "vfork": 58, "setpriority": 141,
               "sched_setaffinity": 203, "sched_setscheduler": 144, "sched_setparam": 142, "sched_setattr": 314,
               "ioprio_set": 251, "prlimit64": 302, "setrlimit": 160, "migrate_pages": 256, "move_pages": 279,
               "kill": 62, "tgkill": 234, "clone": 56},
    "aarch64": {"openat": 56, "openat2": 437, "name_to_handle_at": 264, "open_by_handle_at": 265,
                "renameat": 38, "renameat2": 276, "unlinkat": 35, "mkdirat": 34, "linkat": 37, "symlinkat": 36,
                "mknodat": 33, "truncate": 45, "fchmodat": 53, "fchmodat2": 452, "fchownat": 54, "utimensat": 88,
                "setxattr": 5, "lsetxattr": 6, "removexattr": 14, "lremovexattr": 15, "socket": 198, "tkill": 130,
                "rt_sigqueueinfo": 138, "rt_tgsigqueueinfo": 240, "pidfd_open": 434, "pidfd_send_signal": 424,
                "shmget": 194, "shmat": 196, "shmctl": 195, "semget": 190, "semop": 193, "semctl": 191,
                "semtimedop": 192, "msgget": 186, "msgsnd": 189, "msgrcv": 188, "msgctl": 187, "mq_open": 180,
                "mq_timedsend": 182, "mq_notify": 184, "prctl": 167, "execve": 221, "execveat": 281,
                "setpriority": 140, "sched_setaffinity": 122, "sched_setscheduler": 119, "sched_setparam": 118,
                "sched_setattr": 274, "ioprio_set": 30, "prlimit64": 261, "setrlimit": 164, "migrate_pages": 238,
                "move_pages": 239, "kill": 129, "tgkill": 131, "clone": 220},
}
SEALED_ONLY_SELF = ("kill", "tgkill")  # allowed when their first argument is the sealed process itself
CLONE_THREAD = 0x00010000


def sealed_program(own_pid, machine=None):
    """The seccomp program of a sealed fork whose pid is `own_pid` (see above), or None."""
    machine = machine or platform.machine()
    numbers = _SEAL_NUMBERS.get(machine)
    if numbers is None:
        return None
    deny = (_RET, 0, 0, _ERRNO | errno.EPERM)
    program = [(_LD_W_ABS, 0, 0, 4), (_JEQ, 1, 0, _AUDIT_ARCH[machine]), deny, (_LD_W_ABS, 0, 0, 0)]
    for name, number in numbers.items():
        if name not in SEALED_ONLY_SELF and name != "clone":
            program += [(_JEQ, 0, 1, number), deny]
    for name in SEALED_ONLY_SELF:  # the low half of args[0] (a pid is an int), little-endian
        program += [(_JEQ, 0, 4, numbers[name]), (_LD_W_ABS, 0, 0, 16), (_JEQ, 0, 1, own_pid),
                    (_RET, 0, 0, _ALLOW), deny]
    program += [(_JEQ, 0, 4, numbers["clone"]), (_LD_W_ABS, 0, 0, 16), (_JSET, 0, 1, CLONE_THREAD),
                (_RET, 0, 0, _ALLOW), deny]
    program.append((_RET, 0, 0, _ALLOW))
    return program


def seal(channel):
    """Make this process (a fork of the submission) a sealed one that can talk only through the
    descriptor `channel` (see above). Irreversible. Raises WorldError where it cannot be done."""
    program = sealed_program(os.getpid())
    if program is None:
        raise WorldError(errno.ENOSYS, f"no syscall filter for this machine ({platform.machine()})")
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        if fd != channel:
            os.dup2(null, fd)
    keep = sorted({0, 1, 2, channel})
    for low, high in zip(keep, keep[1:] + [None]):
        os.closerange(low + 1, high if high is not None else 1 << 20)
    _unmap_shared()
    _libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)
    install_filter(program)


def _unmap_shared():
    """Unmap every shared mapping (memory another process may map too)."""
    with open("/proc/self/maps") as maps:
        shared = [line.split()[0] for line in maps if len(line.split()) > 1 and line.split()[1][3:4] == "s"]
    _libc.munmap.argtypes = (ctypes.c_void_p, ctypes.c_size_t)
    for span in shared:
        start, end = (int(part, 16) for part in span.split("-"))
        _check(_libc.munmap(ctypes.c_void_p(start), ctypes.c_size_t(end - start)), "unmapping shared memory")


# -- capabilities -------------------------------------------------------------------------
def drop_capabilities():
    """Give up every capability (the new user namespace granted all of them, there)."""
    for cap in range(64):
        if _libc.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) != 0 and ctypes.get_errno() == errno.EINVAL:
            break  # past the last capability this kernel knows
    _libc.prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0)
    header = (ctypes.c_uint32 * 2)(0x20080522, 0)  # _LINUX_CAPABILITY_VERSION_3, this process
    data = (ctypes.c_uint32 * 6)()  # effective, permitted, inheritable: twice, all empty
    _check(_libc.capset(header, data), "capset")


# -- namespaces ----------------------------------------------------------------------------
def _write(path, text):
    with open(path, "w") as handle:
        handle.write(text)


def unshare_world(scratch, scratch_bytes, max_files):
    """In the keeper: new user, mount, IPC and PID namespaces, and a new scratch tmpfs.

    The PID namespace takes effect for the next process forked."""
    uid, gid = os.getuid(), os.getgid()
    _check(_libc.unshare(CLONE_NEWUSER | CLONE_NEWNS | CLONE_NEWIPC | CLONE_NEWPID), "unshare")
    # A process that is not dumpable (the worker is not: see agent.py) does not own its
    # /proc/self files, so it cannot write its own maps. For these three writes only, and
    # before any student code exists, it is.
    _libc.prctl(PR_SET_DUMPABLE, 1, 0, 0, 0)
    try:
        _write("/proc/self/setgroups", "deny")
        _write("/proc/self/uid_map", f"{uid} {uid} 1")  # the same unprivileged user as outside
        _write("/proc/self/gid_map", f"{gid} {gid} 1")
    finally:
        _libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)
    _check(_libc.mount(b"none", b"/", None, MS_REC | MS_PRIVATE, None), "making mounts private")
    options = f"size={int(scratch_bytes)},nr_inodes={int(max_files)},mode=0755".encode()
    target = os.path.realpath(scratch).encode()
    _check(_libc.mount(b"scratch", target, b"tmpfs", MS_NOSUID | MS_NODEV, options), "mounting the scratch")


def enter_world():
    """In the submission process (pid 1 of its namespace): own /proc, new keyring, no
    capabilities, the syscall filter. Student code may run after this."""
    _check(_libc.mount(b"proc", b"/proc", b"proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, None), "mounting /proc")
    new_session_keyring()
    drop_capabilities()
    _libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)
    install_filter()


def new_session_keyring():
    """Leave whatever session keyring we inherited for a new, empty one of our own."""
    result = _libc.syscall(_SYSCALLS.get(platform.machine(), {}).get("keyctl", -1),
                           KEYCTL_JOIN_SESSION_KEYRING, None)
    if result < 0:
        number = ctypes.get_errno()
        raise WorldError(number, f"new session keyring: {os.strerror(number)}")


def join_cgroups(descriptors):
    """Move this process into the submission's cgroups (files the grader opened: the kernel
    checks the opener's rights, so this works for an unprivileged process)."""
    for fd in descriptors:
        try:
            os.write(fd, b"0")  # "0": the writing process itself
        finally:
            os.close(fd)


def keep(submission_pid):
    """The keeper's life after the fork: wait for the submission process, then end as it did."""
    import signal

    while True:
        try:
            _, status = os.waitpid(submission_pid, 0)
            break
        except InterruptedError:
            continue
        except ChildProcessError:
            os._exit(SETUP_FAILED)
    if os.WIFSIGNALED(status):
        number = os.WTERMSIG(status)
        signal.signal(number, signal.SIG_DFL)
        os.kill(os.getpid(), number)
        os._exit(128 + number)  # a signal whose default is to be ignored
    os._exit(os.waitstatus_to_exitcode(status) if os.WIFEXITED(status) else SETUP_FAILED)


def io_priority():
    """This process's I/O priority (class and level), or None where it cannot be read."""
    number = {"x86_64": 252, "aarch64": 31}.get(platform.machine())  # ioprio_get
    if number is None:
        return None
    value = _libc.syscall(number, 1, 0)  # IOPRIO_WHO_PROCESS, this process
    return None if value < 0 else value
