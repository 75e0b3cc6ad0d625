"""`autograder prune`: free the disk the service's superseded uploads take.

Every upload is kept under service/uploads/<assignment>/ so that it can be graded (again after
a restart) and copied to service/counted/ when it counts. Once an attempt is finished and does
not count (graded and replaced by a later or better one, replaced in the queue before it was
graded, or a grader error), its upload is needed by nothing: its result, its row and its page
stay. Pruning deletes those uploads. The attempt that counts, and anything still queued or
running, is never touched. Should a pruned attempt ever count again (handing in, after the due
date, the answers an on-time attempt had: service/counting.py), its counted copy is made from
the newer upload of the same answers.
"""
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path

from autograder.service.store import ERROR, GRADED, REPLACED, Store

FINISHED = (GRADED, ERROR, REPLACED)


@dataclass
class Pruned:
    files: int = 0
    bytes: int = 0
    kept: int = 0  # uploads kept: counted, unfinished, or newer than --older-than
    problems: list = field(default_factory=list)  # (path, why) of uploads that could not be deleted


def prune(service_root, assignment, older_than_days=0.0, dry_run=False, now=None):
    """Delete (or with `dry_run`, count) the uploads of `assignment` no attempt needs any more."""
    store = Store(Path(service_root) / "service.db")
    uploads = (Path(service_root) / "uploads" / assignment).resolve()
    before = (now or datetime.now(timezone.utc)) - timedelta(days=older_than_days)
    found = Pruned()
    for row in store.of_assignment(assignment):
        path = Path(row.path)
        if not path.exists():
            continue
        if row.counted or row.status not in FINISHED or datetime.fromisoformat(row.received_at) > before:
            found.kept += 1
            continue
        if path.resolve().parent != uploads:  # only the service's own files, whatever the database says
            found.problems.append((str(path), "not in the service's uploads folder, so left alone"))
            continue
        size = path.stat().st_size
        if not dry_run:
            try:
                path.unlink()
            except OSError as error:
                found.problems.append((str(path), error.strerror or str(error)))
                continue
        found.files += 1
        found.bytes += size
    return found
