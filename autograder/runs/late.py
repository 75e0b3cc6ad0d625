"""Late work: a due date, a policy, extensions, and the penalty as its own line.

An assignment's `assignment.toml` may have

    [late]
    due = 2026-11-20T23:59:00+01:00   # a TOML date-time (without an offset: UTC)
    grace_minutes = 15                 # late by less than this: no penalty
    percent_per_day = 10               # of the points (see `of`), per started day late
    # percent_per_hour = 1             # ... or per started hour
    cap_percent = 50                   # the penalty never exceeds this
    cutoff = 2026-11-27T23:59:00+01:00 # submitted after it: the score is 0
    of = "total"                       # the percentages' base: every graded cell's points
                                       # (the written answers' too), or "autograded"

A submission's time comes from nbgrader's `timestamp.txt` beside the notebook,
Gradescope's `submission_metadata.json`, or a CSV a TA gives
(`--submitted-at FILE`: student_id,submitted_at). A roster's `extension_hours`
column moves one student's due date and cutoff. Without a time, nothing is
deducted and the result says the time was unknown.

The raw score stays visible: the result keeps every cell's points and records
the penalty and its reason next to them; the total is the raw score minus it (never
below 0). The penalty is one number for the whole assignment: the final grade
(outputs/final.py) takes it from the autograded and the written answers' points together,
whichever base it was a share of, so a student late by a day loses the same points whether
a TA has graded their written answers yet or not.
"""
import csv
import errno
import math
import os
import re
import stat
from dataclasses import dataclass
from datetime import date, datetime, time, timedelta, timezone
from pathlib import Path

from autograder.course import CourseError
from autograder.untrusted import visible

FIELDS = {"due", "grace_minutes", "percent_per_day", "percent_per_hour", "cap_percent", "cutoff", "of"}
# What the percentages are of: every graded cell's points, as the final grade counts them (the
# docs' "the maximum score", and nbgrader's, whose late penalty comes off the whole notebook),
# or the autograded points alone.
BASES = ("total", "autograded")
YEARS = range(1990, 2200)  # a submission time, due date or cutoff outside them is refused
MAX_TIMESTAMP_BYTES = 256  # nbgrader writes about 30


class LateError(CourseError):
    """The late policy or a submission time cannot be read; the message says where."""


def parse_time(value, where):
    """An aware datetime from a TOML date-time or an ISO / nbgrader timestamp string (UTC if
    naive), in the years YEARS; LateError, saying `where`, otherwise."""
    try:
        return _strict_time(value)
    except ValueError as error:
        raise LateError(f"{where}: {error} (write it as 2026-11-20T23:59:00+01:00)") from None


def _strict_time(value):
    if isinstance(value, date) and not isinstance(value, datetime):
        value = datetime.combine(value, time(23, 59, 59))  # a date alone: the end of that day
    if isinstance(value, str):
        try:
            value = datetime.fromisoformat(value.strip().removesuffix(" UTC").replace("Z", "+00:00"))
        except ValueError:
            raise ValueError(f"'{visible(value.strip(), 60)}' is not a date and time") from None
    if not isinstance(value, datetime):
        raise ValueError(f"'{visible(value, 60)}' is not a date and time")
    value = value if value.tzinfo else value.replace(tzinfo=timezone.utc)
    try:  # nbgrader's gradebook and the late arithmetic convert it to UTC
        year = value.astimezone(timezone.utc).year
    except OverflowError:  # year 1 at +01:00 is before Python's first day in UTC
        year = value.year
    if year not in YEARS:
        raise ValueError(f"{value.isoformat()} is outside the years {YEARS.start} to {YEARS.stop - 1}")
    return value


# A time in a file name, as LMS downloads write them (nbgrader's FileNameCollector example:
# 2016-01-30-15-00-00): digits with any of - _ . : T or a space between the parts.
FILE_NAME_TIME = re.compile(r"(\d{4})[-_.]?(\d{2})[-_.]?(\d{2})[-_T ]?(\d{2})[-_.:]?(\d{2})(?:[-_.:]?(\d{2}))?")


def file_name_time(text):
    """An aware datetime (UTC when the text gives no offset) from an ISO time or a file name's
    digits (2026-11-20-15-00-00); ValueError saying why not."""
    try:
        return _strict_time(text)
    except ValueError:
        match = FILE_NAME_TIME.fullmatch(text.strip())
        if not match:
            raise
        year, month, day, hour, minute, second = (int(part or 0) for part in match.groups())
        try:
            return _strict_time(datetime(year, month, day, hour, minute, second, tzinfo=timezone.utc))
        except ValueError as error:
            raise ValueError(f"'{visible(text, 60)}' is not a date and time ({error})") from None


@dataclass(frozen=True)
class LatePolicy:
    due: datetime
    grace: timedelta = timedelta(0)
    percent_per_day: float = 0.0
    percent_per_hour: float = 0.0
    cap_percent: float = 100.0
    cutoff: datetime = None
    of: str = "total"
    total: float = None  # every graded cell's points (written answers included), once known

    @classmethod
    def from_settings(cls, table, where="assignment.toml [late]"):
        """The policy from an assignment's `[late]` table; None when it has none."""
        if not table:
            return None
        unknown = set(table) - FIELDS
        if unknown:
            raise LateError(f"{where}: unknown settings {sorted(unknown)} (known: {sorted(FIELDS)})")
        if "due" not in table:
            raise LateError(f"{where}: needs `due`, the due date and time")
        if table.get("percent_per_day") and table.get("percent_per_hour"):
            raise LateError(f"{where}: give percent_per_day or percent_per_hour, not both")
        try:
            numbers = {k: float(table.get(k, default)) for k, default in
                       (("grace_minutes", 0), ("percent_per_day", 0), ("percent_per_hour", 0), ("cap_percent", 100))}
        except (TypeError, ValueError):
            raise LateError(f"{where}: grace_minutes and the percentages are numbers") from None
        if table.get("of", "total") not in BASES:
            raise LateError(f"{where}: `of` is \"total\" (every graded cell's points, the written answers' too) or"
                            f" \"autograded\", not {visible(table['of'], 40)!r}")
        if any(v < 0 for v in numbers.values()) or numbers["cap_percent"] > 100:
            raise LateError(f"{where}: the numbers are >= 0 and cap_percent is at most 100")
        due = parse_time(table["due"], f"{where} due")
        cutoff = parse_time(table["cutoff"], f"{where} cutoff") if "cutoff" in table else None
        if cutoff is not None and cutoff < due:
            raise LateError(f"{where}: the cutoff comes before the due date")
        return cls(due=due, grace=timedelta(minutes=numbers["grace_minutes"]),
                   percent_per_day=numbers["percent_per_day"], percent_per_hour=numbers["percent_per_hour"],
                   cap_percent=numbers["cap_percent"], cutoff=cutoff, of=table.get("of", "total"))

    def base(self, autograded):
        """The points the percentages are of, given the autograded points (a result's maximum)."""
        return self.total if self.of == "total" and self.total else autograded

    def base_in_words(self, autograded):
        base = self.base(autograded)
        if self.of == "total" and self.total and self.total != autograded:
            return f"all {base:g} points (the written answers' included)"
        return f"the {base:g} autograded points" if self.of == "autograded" else f"all {base:g} points"

    def in_words(self, autograded):
        """The policy in one sentence for the class report (`autograded`: the autograded points)."""
        rate, unit = ((self.percent_per_hour, "hour") if self.percent_per_hour else (self.percent_per_day, "day"))
        parts = [f"due {_stamp(self.due)}"]
        if self.grace:
            parts.append(f"{_duration(self.grace)} of grace")
        if rate:
            parts.append(f"{rate:g}% of {self.base_in_words(autograded)} per started {unit} late"
                         + (f", at most {self.cap_percent:g}%" if self.cap_percent < 100 else ""))
        else:
            parts.append("no penalty before the cutoff")
        if self.cutoff:
            parts.append(f"no points after {_stamp(self.cutoff)}")
        return "; ".join(parts) + " (extensions move both dates)"

    def penalty(self, max_score, submitted_at, extension=timedelta(0)):
        """(points to deduct, a sentence for the student and the TA; "" when on time). `max_score`:
        the autograded points; the base is `base(max_score)`. After the cutoff it is every point
        (the total where known), so the final grade is 0 whichever the base."""
        due = self.due + extension
        late = submitted_at - due
        if late <= self.grace:
            return 0.0, ""
        when = f"submitted {_duration(late)} after the due date ({_stamp(due)})"
        cutoff = self.cutoff + extension if self.cutoff else None
        if cutoff is not None and submitted_at > cutoff:
            return float(max(self.total or 0, max_score)), (f"{when}, after the last day work is accepted"
                                                            f" ({_stamp(cutoff)}): no points")
        if self.percent_per_hour:
            units, rate, unit = math.ceil(late / timedelta(hours=1)), self.percent_per_hour, "hour"
        else:
            units, rate, unit = math.ceil(late / timedelta(days=1)), self.percent_per_day, "day"
        percent = min(self.cap_percent, units * rate)
        if not percent:
            return 0.0, f"{when}; this assignment has no late penalty"
        capped = " (the most it can be)" if percent == self.cap_percent and units * rate > percent else ""
        return (round(self.base(max_score) * percent / 100, 2),
                f"{when}: {percent:g}% of {self.base_in_words(max_score)}{capped}, {rate:g}% per started {unit}")


def assignment_policy(assignment, source=None):
    """The late policy of `assignment` (None without one), knowing its total points: those of
    every graded cell of its source notebook (`source`, read when not given)."""
    policy = LatePolicy.from_settings(assignment.late_settings, f"{assignment.folder / 'assignment.toml'} [late]")
    if policy is None:
        return None
    from dataclasses import replace

    from autograder.grading.notebook import grade_cells, manual_cells

    if source is None:
        import nbformat

        source = nbformat.read(assignment.source_notebook, as_version=4)
    total = round(sum(grade_cells(source).values()) + sum(manual_cells(source).values()), 2)
    return replace(policy, total=total or None)


def _duration(late):
    minutes = math.ceil(late.total_seconds() / 60)
    days, rest = divmod(minutes, 24 * 60)
    hours, minutes = divmod(rest, 60)
    parts = [f"{n} {word}{'s' if n != 1 else ''}" for n, word in ((days, "day"), (hours, "hour"), (minutes, "minute"))
             if n]
    return " ".join(parts[:2])


def _stamp(moment):
    return moment.strftime("%Y-%m-%d %H:%M %Z").replace("UTC+00:00", "UTC").strip()


# -- where submission times come from -------------------------------------------------------
def nbgrader_timestamp(notebook_path):
    """The time in nbgrader's timestamp.txt beside a submitted notebook, else None (also
    when it cannot be read: `read_timestamp` says why)."""
    return read_timestamp(notebook_path)[0]


def read_timestamp(notebook_path):
    """(time, "") from nbgrader's timestamp.txt beside a submitted notebook; (None, "") when
    there is none; (None, why) when it cannot be read. Never raises: the file is the
    student's (`nbgrader submit` writes it on their machine), so it may hold anything. At
    most MAX_TIMESTAMP_BYTES are read, and only from a regular file (not through a link,
    and not a pipe that would never end)."""
    stamp = Path(notebook_path).parent / "timestamp.txt"
    try:
        descriptor = os.open(stamp, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW)
    except FileNotFoundError:
        return None, ""
    except OSError as error:
        return None, ("timestamp.txt is a link, not a file" if error.errno == errno.ELOOP
                      else f"timestamp.txt cannot be opened ({error.strerror})")
    try:
        with open(descriptor, "rb") as handle:
            if not stat.S_ISREG(os.fstat(handle.fileno()).st_mode):
                return None, "timestamp.txt is not a plain file"
            raw = handle.read(MAX_TIMESTAMP_BYTES + 1)
    except OSError as error:
        return None, f"timestamp.txt cannot be read ({error.strerror})"
    if len(raw) > MAX_TIMESTAMP_BYTES:
        return None, f"timestamp.txt is longer than {MAX_TIMESTAMP_BYTES} bytes, far longer than a date and time"
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        return None, "timestamp.txt holds bytes that are not UTF-8 text"
    try:
        return _strict_time(text), ""
    except ValueError as error:
        return None, f"timestamp.txt: {error}"


def read_times(path):
    """{student id: time} from a CSV with student_id and submitted_at columns."""
    try:
        with open(path, newline="", encoding="utf-8-sig") as handle:
            reader = csv.DictReader(handle)
            if not {"student_id", "submitted_at"} <= set(reader.fieldnames or []):
                raise LateError(f"{path}: needs the columns student_id and submitted_at")
            return {row["student_id"].strip(): parse_time(row["submitted_at"], f"{path}, line {line}")
                    for line, row in enumerate(reader, start=2) if row["student_id"].strip()}
    except (OSError, UnicodeDecodeError, csv.Error) as error:
        raise LateError(f"{path}: cannot read it ({error})") from None


def extensions(roster):
    """{student id: timedelta} from a roster's extension_hours column."""
    found = {}
    for student, row in (roster or {}).items():
        hours = (row.get("extension_hours") or "").strip()
        if hours:
            try:
                found[student] = timedelta(hours=float(hours))
            except ValueError:
                raise LateError(f"the roster's extension_hours for {student} is not a number: {hours!r}") from None
    return found


class LateWork:
    """Applies an assignment's late policy to the results of one batch."""

    def __init__(self, policy, times=None, roster=None):
        self.policy, self.times, self.extensions = policy, dict(times or {}), extensions(roster)
        self.stamps = {}  # student id -> read_timestamp() of their notebook, read once
        self.recorded = {}  # student id -> the time an earlier run recorded for the same file
        self.unparsed = {}  # student id -> why the time the intake found cannot be read

    def remember(self, earlier):
        """An earlier run's result of the very file graded now: the submission time it recorded
        still counts when this run is given none (a time a TA gave once, --submitted-at)."""
        try:
            if earlier.submitted_at:
                self.recorded[earlier.student_id] = _strict_time(earlier.submitted_at)
        except ValueError:
            pass

    def submission_time(self, student, path):
        """(time or None, why it is unreadable or "") of one student's submission: the time
        given for this run, else nbgrader's timestamp.txt, else one an earlier run recorded."""
        if self.times.get(student):
            return self.times[student], ""
        if student in self.unparsed:
            return None, self.unparsed[student]
        if path and student not in self.stamps:
            self.stamps[student] = read_timestamp(path)
        when, why = self.stamps.get(student, (None, ""))
        return (self.recorded.get(student), "") if when is None and not why else (when, why)

    def unreadable(self, submissions):
        """[(student id, why)] for the submissions whose time cannot be read, when the
        assignment has a late policy (without one, their time does not matter)."""
        if self.policy is None:
            return []
        found = [(s, *self.submission_time(s.student_id, s.path)) for s in submissions]
        return [*((s.student_id, f"submission time unreadable ({why}); no late penalty was applied")
                  for s, _, why in found if why),
                *((s.student_id, "Canvas marks this submission late, but its time is not known here, so no late"
                                 " penalty was applied: give the times with --submitted-at FILE")
                  for s, when, why in found if when is None and not why and s.lms.get("canvas_late"))]

    def given(self, submissions):
        """Submission times the intake read where the files came from (a --pattern's timestamp
        group): they count unless the TA gave this run a time for the student (--submitted-at)."""
        for submission in submissions:
            if submission.submitted_at and submission.student_id not in self.times:
                try:
                    self.times[submission.student_id] = file_name_time(submission.submitted_at)
                except ValueError as error:
                    self.unparsed[submission.student_id] = f"the time in its file name: {error}"

    def apply(self, result):
        """`result` itself when nothing changes, else a copy with the penalty as its own line.
        Without a late policy the submission time is still recorded, where it is known."""
        from autograder.record import GRADED, Result

        if result.status != GRADED:
            return result
        when, unreadable = self.submission_time(result.student_id, result.path)
        if self.policy is None:
            if when is None or result.submitted_at == when.isoformat():
                return result
            copy = Result.from_json(result.to_json())
            copy.submitted_at = when.isoformat()
            return copy
        copy = Result.from_json(result.to_json())
        if unreadable:
            copy.late_note = (f"the submission time could not be read ({unreadable}), so no late penalty was"
                              " applied; your instructor will check when it was handed in")
            return copy
        if when is None:
            copy.late_note = "the submission time is unknown, so no late penalty was applied"
            return copy
        points, why = self.policy.penalty(result.max_score, when, self.extensions.get(result.student_id, timedelta(0)))
        copy.submitted_at = when.isoformat()
        # The whole penalty is recorded: the final grade takes it from the written answers' points
        # too (outputs/final.py). The autograded score alone never goes below 0.
        copy.late_penalty = points
        copy.late_note = why
        copy.score = max(0.0, round(result.score - points, 2))
        if copy.late_penalty:
            first, _, rest = copy.output.partition("\n")
            copy.output = (f"{result.student_id}: {copy.score:g} / {result.max_score:g} points"
                           f" ({result.score:g} before a late penalty of {copy.late_penalty:g}: {why})"
                           + (f"\n{rest}" if rest else ""))
        return copy

    def refresh(self, recorded):
        """For a result an earlier run recorded and this one keeps (the same file, graded alike):
        the result as graded, without its penalty, to record again when the policy, the
        submission time or the extensions now give another penalty; None when they give the
        same. Late penalties always follow the current policy: a changed or removed [late]
        table changes every student's on the next run."""
        from autograder.record import GRADED

        if recorded.status != GRADED:
            return None
        raw = without_penalty(recorded)
        now = self.apply(raw)
        if (now.score, now.late_penalty, now.late_note, now.submitted_at) == \
                (recorded.score, recorded.late_penalty, recorded.late_note, recorded.submitted_at):
            return None
        return raw


def without_penalty(result):
    """`result` as it was graded, before a late policy: `result` itself when it has no late
    penalty or note, else a copy with the raw score and the first line of its output as grading
    wrote it. The submission time stays (the same file was handed in then)."""
    from autograder.record import Result

    if not (result.late_penalty or result.late_note):
        return result
    copy = Result.from_json(result.to_json())
    copy.score, copy.late_penalty, copy.late_note = result.raw_score, 0.0, ""
    if result.late_penalty:
        _, _, rest = result.output.partition("\n")
        first = f"{result.student_id}: {copy.score:g} / {result.max_score:g} points"
        copy.output = first + (f"\n{rest}" if rest else "")
    return copy

