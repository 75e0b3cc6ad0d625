"""Taking a submission in: may this student hand this in now, and is it a notebook at all?

Nothing the grader refuses costs an attempt: a file over the size limit, one that is not a
notebook or not valid JSON, the wrong or a closed assignment, too many requests. A
notebook that is taken is on disk (written and synced) and in the database (committed)
before its id is given back, and only then queued.
"""
import json
import os
import secrets
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone

from autograder.grading.notebook import InvalidNotebook
from autograder.service.store import ERROR, stamp


@dataclass
class Refused(Exception):
    """A request refused (a submission not taken, a sign-in missing, a page not theirs): the HTTP
    status and what the student reads. Raised wherever it is found; the service answers it in one
    place (app.py `answer_refused`): JSON on the API, a page elsewhere, or a redirect to `redirect`."""

    status: int
    message: str
    extra: dict = field(default_factory=dict)
    headers: dict = field(default_factory=dict)
    redirect: str = ""

    def __str__(self):
        return self.message


def check_open(service, who, assignment, now):
    """Refused unless `who` may hand in `assignment` (an Assignment the service grades) now."""
    config = assignment.config.service
    opens = _aware(config.opens)
    if opens is not None and now < opens:
        raise Refused(403, f"{assignment.title} opens for submissions at {when(opens)}.")
    cutoff = service.counting.records[assignment.name].cutoff_for(who.student_id)
    if cutoff is not None:
        if now > cutoff:
            raise Refused(403, f"{assignment.title} closed at {when(cutoff)}: no more submissions are taken."
                               " Your last attempt before then is your grade.")


def check_attempts(service, who, assignment, now):
    """Refused when the student has used every attempt of the current window."""
    config = assignment.config.service
    if config.attempts is None:
        return None
    window = timedelta(hours=config.attempt_window_hours)
    rows = service.store.of_student(assignment.name, who.student_id)
    used = [row for row in rows if row.attempt and row.status != ERROR
            and datetime.fromisoformat(row.received_at) > now - window]
    if len(used) < config.attempts:
        return config.attempts - len(used)
    again = min(datetime.fromisoformat(row.received_at) for row in used) + window
    counted = next((row.id for row in rows if row.counted), None)
    shown = (" The attempt that counts so far is shown below." if counted else
             " None of them is graded yet: your page lists them.")
    attempts = "your one attempt" if config.attempts == 1 else f"your {config.attempts} attempts"
    raise Refused(429, f"You have used {attempts} of the last {config.attempt_window_hours:g}"
                       f" hours; your next one is possible from {when(again)}.{shown}",
                  {"counted": counted, "retry_at": again.isoformat()})


def take(service, who, assignment, incoming, now=None):
    """Take the uploaded file at `incoming` (a temporary path) as `who`'s submission of
    `assignment`: (the database row, attempts left after it or None). Refused, with the file
    removed, when it may not be taken."""
    now = now or datetime.now(timezone.utc)
    lane = service.lanes[assignment.name]
    try:
        check_open(service, who, assignment, now)
        try:
            prepared = lane.read(incoming, who.student_id)  # read once: checked, sanitized, its answers key
        except InvalidNotebook as error:
            raise Refused(422, f"This file cannot be graded: {error}. It did not cost you an attempt.") from None
        except OSError:
            raise Refused(422, "The upload could not be read. It did not cost you an attempt.") from None
        with service.lock(assignment.name, who.student_id):
            left = check_attempts(service, who, assignment, now)
            submission_id = secrets.token_hex(8)
            path = service.uploads(assignment.name) / f"{submission_id}.ipynb"
            without_outputs(incoming)
            _sync(incoming)
            os.replace(incoming, path)
            _sync(path.parent)  # the rename too
            service.store.add(submission_id, assignment.name, who.student_id, stamp(now), prepared.sha, path)
    finally:
        if os.path.exists(incoming):
            os.unlink(incoming)
    row = service.store.get(submission_id)
    lane.take(row, prepared)  # answers graded before get their result at once
    return row, (left - 1 if left is not None else None)


def without_outputs(path):
    """Store the upload at `path` without its code cells' outputs: they never count for grading
    (the answers key and the checks read the code alone), and plots or printed tensors of many
    megabytes would stay on disk for the term. A file that cannot be rewritten stays as it is."""
    try:
        with open(path, "rb") as handle:
            notebook = json.load(handle)
        cells = notebook.get("cells") if isinstance(notebook, dict) else None
        if not isinstance(cells, list) or not any(isinstance(c, dict) and c.get("outputs") for c in cells):
            return
        for cell in cells:
            if isinstance(cell, dict) and cell.get("outputs"):
                cell["outputs"] = []
        stripped = f"{path}.stripped"
        with open(stripped, "w", encoding="utf-8") as handle:
            json.dump(notebook, handle, ensure_ascii=False)
        os.replace(stripped, path)
    except (OSError, ValueError, RecursionError):  # read already (lane.read): keep the bytes as they came
        if os.path.exists(f"{path}.stripped"):
            os.unlink(f"{path}.stripped")


def _sync(path):
    """A file's bytes (or a folder's entries) on the disk, not only in the page cache."""
    descriptor = os.open(path, os.O_RDONLY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)


def when(moment):
    """A moment as students read it: 2026-11-20 23:59 UTC."""
    return moment.astimezone(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")


def _aware(moment):
    if moment is None:
        return None
    if not isinstance(moment, datetime):
        from autograder.runs.late import parse_time

        return parse_time(moment, "[service] opens")
    return moment if moment.tzinfo else moment.replace(tzinfo=timezone.utc)
