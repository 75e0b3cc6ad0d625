"""The sandbox's own code: a world-readable folder holding the wire format, every module of
`inside/` and the assignment's sandbox code, and nothing of the course (no checks, no solutions).

One folder per version of that code, reused by every sandbox of that version and trusted only if
it is ours and nobody else can write to it; a shared lock while a sandbox may use it, and a sweep of
folders nobody holds."""
import hashlib
import os
import shutil
import tempfile
import time
from pathlib import Path

from autograder.grading.sandbox import isolation


# The sandbox's own code, in the package: the wire format and every module of inside/ (the code
# that runs next to student code, which imports nothing else of ours: an import-linter contract).
PACKAGE = Path(__file__).resolve().parents[2]  # autograder/
AGENT_FILES = ("wire.py", *sorted(f"inside/{path.name}" for path in (PACKAGE / "inside").glob("*.py")))


def agent_dir(extra=None):
    """A world-readable copy of the sandbox's own code: no checks, no solutions.

    `extra` ({file name: bytes}) is the assignment's sandbox code and settings, put
    next to the `autograder` folder.

    Named after a hash of its contents and reused, so runs (even killed ones)
    leave at most one per version behind. It is trusted only if we own it and
    nobody else can write to it; otherwise a fresh private copy is made.
    """
    sources = {f"autograder/{name}": (PACKAGE / name).read_bytes() for name in AGENT_FILES}
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
    if os.geteuid() != 0 or isolation.reachable(here):
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
