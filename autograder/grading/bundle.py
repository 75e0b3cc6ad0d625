"""The course bundle: what a remote worker needs to grade one assignment, as bytes.

A cluster's workers have no copy of the course. The client packs the assignment's
grading material (its exercise folder without the corpus and the examples, its
solutions, its source and release notebooks, the nbgrader config) into one
reproducible tar archive named by its SHA-256. Workers unpack it once per hash into
a private folder and check the hash first, so a bundle damaged on the way is never
graded with. (The hash travels with the bundle: against someone who can change both,
only TLS between client, scheduler and workers helps.)
"""
import hashlib
import io
import json
import os
import shutil
import tarfile
import tempfile
import tomllib
from pathlib import Path

import autograder
from autograder.course import SETTINGS, copy_assignment
from autograder.course.visibility import Visibility

BUNDLE_SKIPS = ("corpus.toml", "examples.toml", "notebook.md")  # they change no grade (notebook.md via source)
# Tables of assignment.toml that judge no answer: the late policy is applied to each result
# afterwards, always from the current [late] table (runs/late.py), so editing it recomputes the
# penalties without grading anyone again. [service] says how students hand in. [visibility] (and
# [service] visibility) count only by the split of the checks into levels they make: each level's
# checks run after the ones below, and a result holds a view per level (course/visibility.py), so
# a result made with another split is graded again.
SETTINGS_SKIPS = ("late", "service", "visibility")


def _files_digest(digest, root, paths):
    for path in sorted(paths):
        if "__pycache__" not in path.parts and path.is_file():
            digest.update(str(path.relative_to(root)).encode() + b"\0")
            digest.update(hashlib.sha256(path.read_bytes()).digest())


def bundle_hash(assignment):
    """The hash of everything on the trusted side that judges a submission: assignment.toml
    as its settings but SETTINGS_SKIPS (`judging_settings`), every other file as its bytes."""
    digest = hashlib.sha256()
    folder = assignment.folder
    settings = folder / SETTINGS
    _files_digest(digest, folder, (p for p in folder.rglob("*") if p.name not in BUNDLE_SKIPS and p != settings))
    digest.update(f"{SETTINGS}\0".encode() + hashlib.sha256(judging_settings(settings)).digest())
    digest.update(b"levels\0" + Visibility.of(assignment).key().encode())
    for path in (assignment.solutions, assignment.source_notebook, assignment.release_notebook):
        _files_digest(digest, path.parent, [path])
    digest.update(engine_hash().encode())
    return digest.hexdigest()


def judging_settings(path):
    """The settings file at `path` as the bundle hash sees it: every setting but the tables in
    SETTINGS_SKIPS, as canonical JSON (so a comment or the order of keys changes nothing either).
    A file that cannot be read as TOML counts as its bytes: grading stops on it anyway."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return b""
    try:
        settings = tomllib.loads(data.decode())
    except (UnicodeDecodeError, tomllib.TOMLDecodeError):
        return data
    judged = {key: value for key, value in settings.items() if key not in SETTINGS_SKIPS}
    return json.dumps(judged, sort_keys=True, default=str).encode()


def engine_hash():
    """The hash of the grader's own code (a cluster worker must run the same)."""
    digest = hashlib.sha256()
    engine = Path(autograder.__file__).parent
    _files_digest(digest, engine, engine.rglob("*.py"))
    return digest.hexdigest()


class BundleError(RuntimeError):
    """A bundle that does not match its hash, or cannot be unpacked."""


def make_bundle(assignment):
    """(hash, tar bytes) of `assignment`'s grading material."""
    with tempfile.TemporaryDirectory(prefix="autograder-bundle-") as staging:
        copy_assignment(assignment, staging, grading_only=True)
        data = _reproducible_tar(Path(staging))
    return hashlib.sha256(data).hexdigest(), data


def _reproducible_tar(root):
    """The same files give the same bytes: sorted names, no times, owners or modes beyond r/x."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as archive:
        for path in sorted(root.rglob("*")):
            if not path.is_file():
                continue
            info = tarfile.TarInfo(str(path.relative_to(root)))
            data = path.read_bytes()
            info.size, info.mtime, info.mode = len(data), 0, 0o600
            archive.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


def unpack_bundle(data, expected_hash, parent):
    """parent/<hash>/: the bundle unpacked, readable by this user only. Reused when it is
    already there (workers cache bundles by hash)."""
    if hashlib.sha256(data).hexdigest() != expected_hash:
        raise BundleError("the course bundle does not match its hash: it was damaged or replaced on the way")
    parent = Path(parent)
    parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    os.chmod(parent, 0o700)  # hidden checks and solutions: no other user on this host reads them
    target = parent / expected_hash
    if (target / ".complete").is_file():
        return target
    staging = Path(tempfile.mkdtemp(prefix=".unpacking-", dir=parent))
    try:
        with tarfile.open(fileobj=io.BytesIO(data), mode="r") as archive:
            archive.extractall(staging, filter="data")  # no absolute paths, links or devices
        (staging / ".complete").touch()
        try:
            os.rename(staging, target)
        except OSError:  # another process unpacked the same bundle first
            shutil.rmtree(staging, ignore_errors=True)
    except (tarfile.TarError, OSError) as error:
        shutil.rmtree(staging, ignore_errors=True)
        raise BundleError(f"the course bundle could not be unpacked: {error}") from None
    return target
