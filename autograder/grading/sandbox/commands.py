"""The command line that starts a sandbox's warm interpreter (`inside/agent.py`).

With bubblewrap (`bwrap_command`): its own namespaces, read-only system and Python folders, the
agent's folder and one size-limited scratch tmpfs. Without it (`plain_command`, only with the
opt-out): a plain process, handed to the slot's uid and, where a private mount namespace works,
given a private /tmp and no view of the course."""
import os
import shlex
import sys
import tempfile
from pathlib import Path

from autograder.grading.sandbox import agent_files, isolation


SHM_DIR = ".shm"  # /dev/shm is this folder of the scratch tmpfs: inside its size limit, wiped with it


def plain_command(slot, control, agent, limits, conceal):
    """(command, scratch folder, environment) for the agent without bubblewrap.

    Never as root: root hands the agent to the slot's unprivileged uid. Where a
    private mount namespace works, that user also gets a private /tmp (the
    size-limited scratch, with /dev/shm inside it), read-only Python folders and
    no view of `conceal` (the course). Without root, nothing can be kept apart:
    `unsafe_warning` says so.
    """
    mode = isolation.plain_mode()
    env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8", "OMP_NUM_THREADS": "1",
           "MPLBACKEND": "Agg"}
    if mode == "namespace":
        env.update(HOME="/tmp/home", TMPDIR="/tmp")
        return _private_namespace(slot, control, agent, limits, conceal), None, env
    # 0700: nobody else reads it
    scratch = tempfile.mkdtemp(prefix="autograder-scratch-", dir=agent_files.shared_temp_dir())
    env.update(HOME=os.path.join(scratch, "home"), TMPDIR=scratch)
    command = _agent_call(control, "plain", scratch, agent)
    if mode == "user":
        uid = isolation.SANDBOX_UID_BASE + slot
        os.chown(scratch, uid, uid)
        command = isolation.as_sandbox_user(slot, command, hidden=[])
    return command, scratch, env


def _private_namespace(slot, control, agent, limits, conceal):
    """As root, in a private mount namespace: hide /tmp, /var/tmp, the course and private
    folders behind empty tmpfs mounts, put Python back read-only, then drop to the slot's uid."""
    roots = isolation.python_roots()
    tops = sorted({isolation.first_unreachable(r) for r in roots} - {None})
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
    uid = str(isolation.SANDBOX_UID_BASE + slot)
    drop = ["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups", "--inh-caps=-all"]
    return ["unshare", "--mount", "--propagation", "private", "--", "sh", "-c", "\n".join(lines), "sh",
            *drop, *_agent_call(control, "plain", "/tmp", "/mnt/agent", _sandbox_python(places))]


def bwrap_command(slot, agent, control, limits):
    roots = isolation.python_roots()
    hidden = [r for r in roots if os.geteuid() == 0 and not isolation.reachable(r)]
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
    return isolation.as_sandbox_user(slot, bwrap, hidden)


def _agent_call(control, mode, scratch, agent, python=sys.executable):
    code = ("import sys; sys.path.insert(0, sys.argv[1]); from autograder.inside.agent import main; "
            "main(int(sys.argv[2]), sys.argv[3] == 'pidns', sys.argv[4])")
    return [python, "-I", "-c", code, str(agent), str(control), mode, str(scratch)]


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
