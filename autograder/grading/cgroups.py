"""One memory and process bound per submission, counted by the kernel (cgroups).

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
    """Where this process's memory and pids cgroups are, and how to write them."""

    def __init__(self, memory, pids, v2):
        self.memory, self.pids, self.v2 = Path(memory), Path(pids), v2


def _mounts():
    """{'memory'|'pids'|'unified': (mount point, mount root)} from /proc/self/mountinfo."""
    found = {}
    with open("/proc/self/mountinfo") as info:
        for line in info:
            left, _, right = line.partition(" - ")
            fields, kind = left.split(), right.split()
            if len(fields) < 5 or len(kind) < 3:
                continue
            root, point = fields[3], fields[4]
            if kind[0] == "cgroup":
                for name in ("memory", "pids"):
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
        hierarchy = Hierarchy(_folder(mounts["memory"], member.get("memory", "/")),
                              _folder(mounts["pids"], member.get("pids", "/")), v2=False)
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
    else:
        return None, "this machine mounts no memory cgroup"
    try:
        trial = _make(hierarchy, 64 * 2**20, 8, "probe")
    except OSError as error:
        return None, f"no cgroup can be made under {hierarchy.memory} ({error.strerror})"
    trial.remove()
    _remove_stale(hierarchy)
    return hierarchy, None


def available():
    """(True, where) if submissions get cgroups here, else (False, why not). Probed once."""
    global _probe
    if _probe is None:
        _probe = _find()
    hierarchy, why = _probe
    return (True, f"one memory cgroup per submission under {hierarchy.memory}") if hierarchy else (False, why)


def _make(hierarchy, memory_bytes, max_tasks, tag):
    name = f"{PREFIX}{os.getpid()}-{tag}-{next(_counter)}"
    folders = [hierarchy.memory / name] if hierarchy.v2 else [hierarchy.memory / name, hierarchy.pids / name]
    made = SubmissionCgroup(hierarchy, folders)
    try:
        for folder in folders:
            folder.mkdir()
        memory, pids = folders[0], folders[-1]
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


class SubmissionCgroup:
    """The cgroup(s) of one submission: the files to hand over, what happened, removal."""

    def __init__(self, hierarchy, folders):
        self.hierarchy, self.folders = hierarchy, folders

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
        """Did the submission reach its memory bound at least once (killed or refused)?"""
        memory = self.folders[0]
        if self.hierarchy.v2:
            return self._counter(memory, "memory.events", "max") > 0
        try:
            return int((memory / "memory.failcnt").read_text()) > 0
        except (OSError, ValueError):
            return False

    def tasks_exceeded(self):
        """Was a new process or thread refused at the process bound?"""
        return self._counter(self.folders[-1], "pids.events", "max") > 0

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


def for_submission(memory_bytes, max_tasks, tag):
    """A new SubmissionCgroup, or None where this machine gives none (see `available`)."""
    ok, _ = available()
    if not ok:
        return None
    try:
        return _make(_probe[0], memory_bytes, max_tasks, tag)
    except OSError:
        return None


def _remove_stale(hierarchy):
    """Empty cgroups that graders which are no longer running left behind (killed ones)."""
    for parent in {hierarchy.memory, hierarchy.pids}:
        try:
            entries = list(parent.iterdir())
        except OSError:
            continue
        for entry in entries:
            owner = entry.name[len(PREFIX):].split("-", 1)[0]
            if entry.name.startswith(PREFIX) and owner.isdigit() and not Path(f"/proc/{owner}").exists():
                with contextlib.suppress(OSError):
                    entry.rmdir()
