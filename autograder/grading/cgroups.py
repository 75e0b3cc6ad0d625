"""One memory, process and CPU bound per submission, counted by the kernel (cgroups).

An address-space limit (RLIMIT_AS) counts only what one process maps. It misses
what a submission can hold outside any process: a memfd's pages, System V shared
memory, files on a tmpfs, the kernel's own memory for millions of inodes. A memory
cgroup counts all of these where they are spent, and its limit ends the submission
(the kernel's OOM killer, inside the cgroup only) instead of letting the machine's
OOM killer pick the grader or another student.

For each submission the grader makes a cgroup (memory and pids, in cgroup v1 or v2,
whichever this machine has), opens its `cgroup.procs` and hands the open file to the
sandbox, whose per-submission process writes itself into it before any student code
runs (the kernel checks the rights of whoever opened the file). Afterwards the
grader reads whether the bound was hit and removes the cgroup.

Where no cgroup can be made (not root, no delegated cgroup), `available()` says why,
the grader says so, and submissions are bounded by address space, the scratch size and
the process limit alone.

CPU, likewise, where the cpu and cpuset controllers can be had (`cpu_available()`): each
submission's cgroup holds it to the cores its worker runs on (a cpuset: an affinity mask is
something any process may widen, a cpuset is not) and to one core's time in all (a quota), so a
submission that starts busy processes on every core it can name slows only itself. Without them
the grader says that a submission may use every core the grader may.
"""
import contextlib
import itertools
import os
import time
from pathlib import Path

PREFIX = "autograder-"
_counter = itertools.count()
_probe = None


class Hierarchy:
    """Where this process's memory and pids cgroups are (and its cpu and cpuset ones, or None
    where this machine gives none: `cpu_why` says why), and how to write them."""

    def __init__(self, memory, pids, v2, cpu=None, cpuset=None, cpu_why=""):
        self.memory, self.pids, self.v2 = Path(memory), Path(pids), v2
        self.cpu, self.cpuset = (Path(cpu) if cpu else None), (Path(cpuset) if cpuset else None)
        self.cpu_why = cpu_why


CPU_PERIOD_US = 100_000  # the quota's period: one core's time is this many microseconds in it
PAGE = 4096


def _mounts():
    """{'memory'|'pids'|'cpu'|'cpuset'|'unified': (mount point, mount root)} from /proc/self/mountinfo."""
    found = {}
    with open("/proc/self/mountinfo") as info:
        for line in info:
            left, _, right = line.partition(" - ")
            fields, kind = left.split(), right.split()
            if len(fields) < 5 or len(kind) < 3:
                continue
            root, point = fields[3], fields[4]
            if kind[0] == "cgroup":
                for name in ("memory", "pids", "cpu", "cpuset"):
                    if name in kind[2].split(","):
                        found.setdefault(name, (point, root))
            elif kind[0] == "cgroup2":
                found.setdefault("unified", (point, root))
    return found


def _membership():
    """{controller or 'unified': path} from /proc/self/cgroup."""
    found = {}
    with open("/proc/self/cgroup") as groups:
        for line in groups:
            _, controllers, path = line.rstrip("\n").split(":", 2)
            if not controllers:
                found["unified"] = path
            for name in controllers.split(","):
                found[name] = path
    return found


def _folder(mount, path):
    point, root = mount
    relative = os.path.relpath(path, root) if path.startswith(root) else path.lstrip("/")
    folder = Path(point) / ("" if relative == "." else relative)
    return folder if folder.is_dir() else Path(point)


def _find():
    """(Hierarchy, None) where submissions' cgroups can be made, else (None, why not)."""
    try:
        mounts, member = _mounts(), _membership()
    except OSError as error:
        return None, f"cgroups cannot be read here ({error.strerror})"
    if "memory" in mounts and "pids" in mounts:  # cgroup v1
        cpu = [_folder(mounts[name], member.get(name, "/")) if name in mounts else None for name in ("cpu", "cpuset")]
        hierarchy = Hierarchy(_folder(mounts["memory"], member.get("memory", "/")),
                              _folder(mounts["pids"], member.get("pids", "/")), v2=False, cpu=cpu[0], cpuset=cpu[1],
                              cpu_why="" if all(cpu) else "this machine mounts no cpu and cpuset cgroups")
    elif "unified" in mounts:
        folder = _folder(mounts["unified"], member.get("unified", "/"))
        hierarchy = Hierarchy(folder, folder, v2=True)
        try:
            enabled = (folder / "cgroup.subtree_control").read_text().split()
            if not {"memory", "pids"} <= set(enabled):
                (folder / "cgroup.subtree_control").write_text("+memory +pids")
        except OSError as error:
            return None, (f"the memory and pids controllers are not delegated to this process's cgroup"
                          f" {folder} ({error.strerror})")
        try:  # optional: without them a submission is bounded in memory and processes, not in CPU
            if not {"cpu", "cpuset"} <= set((folder / "cgroup.subtree_control").read_text().split()):
                (folder / "cgroup.subtree_control").write_text("+cpu +cpuset")
            hierarchy.cpu = hierarchy.cpuset = folder
        except OSError as error:
            hierarchy.cpu_why = f"the cpu and cpuset controllers are not delegated to {folder} ({error.strerror})"
    else:
        return None, "this machine mounts no memory cgroup"
    try:
        trial = _make(hierarchy, 64 * 2**20, 8, "probe")
    except OSError as error:
        return None, f"no cgroup can be made under {hierarchy.memory} ({error.strerror})"
    trial.remove()
    if hierarchy.cpu is not None:
        try:
            trial = _make(hierarchy, 64 * 2**20, 8, "probe", cores=os.sched_getaffinity(0))
            trial.remove()
        except OSError as error:
            hierarchy.cpu = hierarchy.cpuset = None
            hierarchy.cpu_why = f"no cpu or cpuset cgroup can be made here ({error.strerror})"
    _remove_stale(hierarchy)
    return hierarchy, None


def available():
    """(True, where) if submissions get cgroups here, else (False, why not). Probed once."""
    global _probe
    if _probe is None:
        _probe = _find()
    hierarchy, why = _probe
    return (True, f"one memory cgroup per submission under {hierarchy.memory}") if hierarchy else (False, why)


def cpu_available():
    """(True, where) if each submission is held to its worker's cores and one core's time, else
    (False, why not)."""
    ok, why = available()
    if not ok:
        return False, why
    hierarchy = _probe[0]
    if hierarchy.cpu is None:
        return False, hierarchy.cpu_why
    return True, f"one cpu and cpuset cgroup per submission under {hierarchy.cpu}"


# What goes unbounded without a memory cgroup: said once, for this machine and for a Dask worker.
MEMORY_UNBOUNDED = ("memory is then bounded by its address space, its scratch size and its process limit only:"
                    " memory files and System V shared memory are not counted, and a submission that fills them"
                    " can make the machine run short")


def bound_notes():
    """What the TA should know about the bounds this machine cannot give each submission: [] when
    memory, processes and CPU are all bounded per submission."""
    notes = []
    ok, why = available()
    if not ok:
        notes.append(f"{why}. Each submission's {MEMORY_UNBOUNDED}. Run the grader as root, or in a cgroup with"
                     " the memory and pids controllers delegated to it.")
        return notes
    ok, why = cpu_available()
    if not ok:
        notes.append(f"{why}. A submission's processes may then use every core the grader may: one that starts"
                     " busy processes slows the submissions graded beside it (each still stops at its time"
                     " limit). Delegate the cpu and cpuset controllers to the grader's cgroup to hold each one to"
                     " its own core.")
    return notes


def _make(hierarchy, memory_bytes, max_tasks, tag, cores=None):
    name = f"{PREFIX}{os.getpid()}-{tag}-{next(_counter)}"
    folders = [hierarchy.memory / name] if hierarchy.v2 else [hierarchy.memory / name, hierarchy.pids / name]
    if cores and hierarchy.cpu is not None and not hierarchy.v2:
        folders += [hierarchy.cpu / name, hierarchy.cpuset / name]
    made = SubmissionCgroup(hierarchy, folders)
    try:
        for folder in folders:
            folder.mkdir()
        if cores and hierarchy.cpu is not None:
            _bound_cpu(hierarchy, name, cores)
        memory, pids = folders[0], folders[1] if len(folders) > 1 else folders[0]
        if hierarchy.v2:
            (memory / "memory.max").write_text(str(memory_bytes))
            with contextlib.suppress(OSError):  # no swap accounting: nothing to turn off
                (memory / "memory.swap.max").write_text("0")
        else:
            (memory / "memory.limit_in_bytes").write_text(str(memory_bytes))
            with contextlib.suppress(OSError):  # swap counted with memory, where swap is accounted
                (memory / "memory.memsw.limit_in_bytes").write_text(str(memory_bytes))
        (pids / "pids.max").write_text(str(max_tasks))
    except OSError:
        made.remove()
        raise
    return made


def _bound_cpu(hierarchy, name, cores):
    """The cgroup `name`: on `cores` only (a cpuset), and one core's time in all (a quota)."""
    cpus = ",".join(str(core) for core in sorted(cores))
    if hierarchy.v2:
        folder = hierarchy.memory / name
        (folder / "cpuset.cpus").write_text(cpus)
        (folder / "cpu.max").write_text(f"{CPU_PERIOD_US} {CPU_PERIOD_US}")
        return
    cpuset = hierarchy.cpuset / name
    (cpuset / "cpuset.mems").write_text((hierarchy.cpuset / "cpuset.mems").read_text().strip() or "0")
    (cpuset / "cpuset.cpus").write_text(cpus)
    cpu = hierarchy.cpu / name
    (cpu / "cpu.cfs_period_us").write_text(str(CPU_PERIOD_US))
    (cpu / "cpu.cfs_quota_us").write_text(str(CPU_PERIOD_US))


class SubmissionCgroup:
    """The cgroup(s) of one submission: the files to hand over, what happened, removal."""

    def __init__(self, hierarchy, folders):
        self.hierarchy, self.folders = hierarchy, folders  # memory first, then pids (v1), cpu, cpuset

    def descriptors(self):
        """Open `cgroup.procs` files for writing, one per hierarchy (the caller closes them)."""
        opened = []
        try:
            for folder in self.folders:
                opened.append(os.open(folder / "cgroup.procs", os.O_WRONLY | os.O_CLOEXEC))
        except OSError:
            for fd in opened:
                os.close(fd)
            raise
        return opened

    def _counter(self, folder, file, key):
        try:
            for line in (folder / file).read_text().splitlines():
                name, _, value = line.partition(" ")
                if name == key:
                    return int(value)
        except (OSError, ValueError):
            pass
        return 0

    def memory_exceeded(self):
        """Did the kernel stop the submission at its memory bound?"""
        memory = self.folders[0]
        if self.hierarchy.v2:
            return self._counter(memory, "memory.events", "oom_kill") > 0
        return self._counter(memory, "memory.oom_control", "oom_kill") > 0

    def memory_reached(self):
        """Did the submission reach its memory bound at least once (killed or refused)? Kernel
        memory refused at the bound (socket buffers, for one) counts in no failure counter of
        cgroup v1: its peak standing at the bound says it."""
        memory = self.folders[0]
        if self.hierarchy.v2:
            return any(self._counter(memory, "memory.events", key) > 0 for key in ("max", "oom"))
        for counter in ("memory.failcnt", "memory.kmem.failcnt", "memory.kmem.tcp.failcnt"):
            with contextlib.suppress(OSError, ValueError):
                if int((memory / counter).read_text()) > 0:
                    return True
        try:
            limit = int((memory / "memory.limit_in_bytes").read_text())
            return int((memory / "memory.max_usage_in_bytes").read_text()) >= limit - PAGE
        except (OSError, ValueError):
            return False

    def tasks_exceeded(self):
        """Was a new process or thread refused at the process bound?"""
        return self._counter(self.folders[0 if self.hierarchy.v2 else 1], "pids.events", "max") > 0

    def peak_bytes(self):
        name = "memory.peak" if self.hierarchy.v2 else "memory.max_usage_in_bytes"
        try:
            return int((self.folders[0] / name).read_text())
        except (OSError, ValueError):
            return None

    def empty(self):
        try:
            return all(not (folder / "cgroup.procs").read_text().strip() for folder in self.folders)
        except OSError:
            return True

    def remove(self, wait=1.0):
        """Remove the cgroup(s); True when gone. Processes still leaving get `wait` seconds."""
        deadline = time.monotonic() + wait
        for folder in self.folders:
            while True:
                try:
                    folder.rmdir()
                    break
                except FileNotFoundError:
                    break
                except OSError:
                    if time.monotonic() >= deadline:
                        return False
                    time.sleep(0.005)
        return True


def for_submission(memory_bytes, max_tasks, tag, cores=None):
    """A new SubmissionCgroup, or None where this machine gives none (see `available`); held to
    `cores` and one core's time where it can be (`cpu_available`)."""
    ok, _ = available()
    if not ok:
        return None
    try:
        return _make(_probe[0], memory_bytes, max_tasks, tag, cores)
    except OSError:
        try:  # a cpuset or quota refused now (cores taken away meanwhile): memory and pids at least
            return _make(_probe[0], memory_bytes, max_tasks, tag)
        except OSError:
            return None


def _remove_stale(hierarchy):
    """Empty cgroups that graders which are no longer running left behind (killed ones)."""
    for parent in {hierarchy.memory, hierarchy.pids, hierarchy.cpu, hierarchy.cpuset} - {None}:
        try:
            entries = list(parent.iterdir())
        except OSError:
            continue
        for entry in entries:
            owner = entry.name[len(PREFIX):].split("-", 1)[0]
            if entry.name.startswith(PREFIX) and owner.isdigit() and not Path(f"/proc/{owner}").exists():
                with contextlib.suppress(OSError):
                    entry.rmdir()
