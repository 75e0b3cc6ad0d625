"""How much isolation this machine allows, and who student code runs as.

bubblewrap, where it can make namespaces here (`available`); without it nothing runs
(`NoSandbox`), unless the TA passes --unsafe-no-sandbox: then student code is a plain process
that root hands to an unprivileged uid (`plain_mode`, `as_sandbox_user`), and `unsafe_warning`
says what is missing. Also which folders a stranger's uid can reach: Python's among them."""
import os
import shutil
import subprocess
import sys
from pathlib import Path


SANDBOX_UID_BASE = 61000  # one unprivileged uid per worker slot when the grader is root
UNSAFE_FLAG = "--unsafe-no-sandbox"
_isolation = None


class NoSandbox(RuntimeError):
    """Student code must not run here: no working sandbox, and no explicit opt-out."""


def available():
    """('bwrap' | 'none', explanation). Probed once per process."""
    global _isolation
    if _isolation is None:
        _isolation = _probe_isolation()
    return _isolation


def _probe_isolation():
    if not shutil.which("bwrap"):
        return "none", "bubblewrap is not installed"
    command = as_sandbox_user(0, ["bwrap", "--unshare-all", "--ro-bind", "/", "/", "true"], [])
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
    mode, why = available()
    if mode == "bwrap":
        return "bubblewrap"
    if not unsafe_no_sandbox:
        raise NoSandbox(
            f"Refusing to run student code: there is no working sandbox ({why}). Install bubblewrap"
            " (as root: apt-get install -y bubblewrap, or run ./setup.sh) and grade again. To run student"
            f" code without isolation anyway, pass {UNSAFE_FLAG}; results graded that way say so.")
    plain_mode()  # raises NoSandbox when even a separate user is impossible
    return "none"


def unsafe_warning():
    """What is missing when grading with the opt-out (for the terminal and logs)."""
    mode, why = available()
    if mode == "bwrap":
        return None
    plain = plain_mode()
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


def plain_mode():
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
        elif all(reachable(p) for p in python_roots()):
            _plain = "user"
        else:
            unreachable = ", ".join(str(p) for p in python_roots() if not reachable(p))
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


def reachable(path):
    """Can a stranger (an unprivileged uid) open this directory?"""
    return first_unreachable(path) is None


def first_unreachable(path):
    """The outermost folder on the way to `path` that a stranger cannot enter, or None."""
    for part in [*reversed(Path(path).resolve().parents), Path(path).resolve()]:
        if not part.stat().st_mode & 0o001:
            return part
    return None


def python_roots():
    roots = {Path(sys.base_prefix).resolve(), Path(sys.prefix).resolve(),
             Path(sys.executable).resolve().parent.parent}
    roots = {r for r in roots if not any(r != o and o in r.parents for o in roots)}
    system = Path("/usr")
    return sorted(r for r in roots if r != system and system not in r.parents)


def as_sandbox_user(slot, command, hidden):
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
