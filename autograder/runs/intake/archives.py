"""Zip files of submissions (an LMS's bulk download), unpacked so that nothing in them can harm the grader.

An LMS hands a TA one zip of every student's upload; the names inside are the students'
own, so the zip is as untrusted as a notebook. Unpacking refuses what could reach outside
its folder (an absolute name, `..`, a link), stops a zip bomb by counting the bytes it
writes (never trusting the sizes the zip declares), and bounds how many files it writes.
A member it will not write is named, so the TA hears of it; the rest are unpacked.

The same zip unpacks into the same folder (its name ends with the zip's hash), once: a
rerun finds the very files graded before, so their results are kept.
"""
import hashlib
import json
import os
import shutil
import stat
import zipfile
from pathlib import Path, PurePosixPath

from autograder.untrusted import visible

MAX_MEMBERS = 20_000  # a class of 2,000 with ten files each
MAX_MEMBER_BYTES = 512 * 2**20  # as notebook.MAX_FILE_BYTES: a larger file is never read
MAX_TOTAL_BYTES = 8 * 2**30
CHUNK = 1 << 20
DONE = ".unpacked.json"  # written last: a folder without it is half unpacked, and done again
SKIPPED = ("__MACOSX", ".DS_Store", "Thumbs.db")  # what a Mac or Windows adds to a zip: not anyone's work


class ArchiveError(Exception):
    """The zip cannot be unpacked at all; the message says why, for the TA."""


def is_zip(path):
    return Path(path).suffix.lower() == ".zip"


def unpack(zip_path, into):
    """(the folder `zip_path` is unpacked in, under `into`; [(member, why it was not unpacked)]).

    Raises ArchiveError for a file that is not a zip, a damaged one, or one over the bounds."""
    zip_path = Path(zip_path)
    digest = _sha256(zip_path)
    stem = "".join(c if c.isalnum() or c in "-_." else "_" for c in zip_path.stem)[:60].lstrip(".") or "zip"
    folder = Path(into) / f"{stem}-{digest[:10]}"
    done = folder / DONE
    if done.is_file():
        try:
            return folder, [tuple(pair) for pair in json.loads(done.read_text())["skipped"]]
        except (OSError, ValueError, KeyError, TypeError):
            pass  # unpacked again below
    Path(into).mkdir(parents=True, exist_ok=True)
    partial = Path(into) / f".{folder.name}.{os.getpid()}.partial"
    shutil.rmtree(partial, ignore_errors=True)
    try:
        skipped = _unpack(zip_path, partial)
        (partial / DONE).write_text(json.dumps({"zip": str(zip_path), "sha256": digest, "skipped": skipped}))
        shutil.rmtree(folder, ignore_errors=True)  # a half-unpacked folder from a killed run
        os.replace(partial, folder)
    finally:
        shutil.rmtree(partial, ignore_errors=True)
    return folder, [tuple(pair) for pair in skipped]


def _sha256(path):
    digest = hashlib.sha256()
    try:
        descriptor = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
        with open(descriptor, "rb") as handle:
            if not stat.S_ISREG(os.fstat(descriptor).st_mode):
                raise ArchiveError("it is not a plain file")
            for chunk in iter(lambda: handle.read(CHUNK), b""):
                digest.update(chunk)
    except OSError as error:
        raise ArchiveError(f"it cannot be read ({error.strerror})") from None
    return digest.hexdigest()


def _unpack(zip_path, target):
    """Unpack into `target` (made here); returns [[member, why]] for members left out."""
    try:
        archive = zipfile.ZipFile(zip_path)
    except (zipfile.BadZipFile, OSError, ValueError) as error:
        raise ArchiveError(f"it is not a zip file, or it is damaged ({error})") from None
    target.mkdir(parents=True)
    skipped, written = [], 0
    with archive:
        members = archive.infolist()
        if len(members) > MAX_MEMBERS:
            raise ArchiveError(f"it holds {len(members):,} files, more than the {MAX_MEMBERS:,} the grader unpacks")
        for member in members:
            name = member.filename
            parts = _safe_parts(name)
            if member.is_dir() or (parts and parts[0] in SKIPPED) or (parts and parts[-1] in SKIPPED):
                continue
            why = _refused(member, parts)
            if why:
                skipped.append([visible(name, 200), why])
                continue
            try:
                written += _write_member(archive, member, target.joinpath(*parts), MAX_TOTAL_BYTES - written)
            except _TooBig as error:
                if error.total:
                    raise ArchiveError(f"it unpacks to more than {MAX_TOTAL_BYTES / 2**30:g} GB") from None
                skipped.append([visible(name, 200), str(error)])
            except FileExistsError:
                skipped.append([visible(name, 200), "the zip holds two files of this name; the first was kept"])
            except (OSError, zipfile.BadZipFile, RuntimeError, NotImplementedError, EOFError) as error:
                skipped.append([visible(name, 200), f"it could not be unpacked ({type(error).__name__}:"
                                                    f" {visible(error, 120)})"])
    return skipped


def _safe_parts(name):
    """The member's path as folder names, or () when it could reach outside its folder."""
    path = PurePosixPath(name.replace("\\", "/"))
    if path.is_absolute() or (path.parts and ":" in path.parts[0]):  # /etc/x, C:/x
        return ()
    parts = tuple(part for part in path.parts if part not in ("", "."))
    return () if any(part == ".." for part in parts) else parts


def _refused(member, parts):
    """Why this member is not unpacked, or ""."""
    if not parts:
        return "its name points outside the folder it is unpacked in"
    mode = member.external_attr >> 16
    if stat.S_ISLNK(mode):
        return "it is a link, not a file"
    if mode and not stat.S_ISREG(mode) and stat.S_IFMT(mode):
        return "it is not a plain file"
    if member.flag_bits & 0x1:
        return "it is encrypted"
    if any(len(os.fsencode(part)) > 255 for part in parts):
        return "its name is too long for a file"
    return ""


class _TooBig(Exception):
    def __init__(self, text, total):
        super().__init__(text)
        self.total = total  # the zip as a whole is over MAX_TOTAL_BYTES, not this one member


def _write_member(archive, member, path, room):
    """Copy one member to `path`, counting what is really written; returns the bytes written."""
    limit = min(MAX_MEMBER_BYTES, room)
    path.parent.mkdir(parents=True, exist_ok=True)
    written = 0
    try:
        with archive.open(member) as source, open(path, "xb") as sink:
            while chunk := source.read(CHUNK):
                written += len(chunk)
                if written > limit:
                    raise _TooBig(f"it unpacks to more than {limit / 2**20:.0f} MB", total=room < MAX_MEMBER_BYTES)
                sink.write(chunk)
    except BaseException:
        path.unlink(missing_ok=True)
        raise
    return written
