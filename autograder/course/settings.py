"""An assignment's settings (`exercises/<assignment>/assignment.toml`), typed in one place.

Every key the engine reads is a field below, with its type, its default and one line on
what it does; `AssignmentSettings.read(path)` is the one reader. A key the engine does
not know (a misspelling, most often) or a value of the wrong type is refused with a
`CourseError` naming the file, the line and, for a misspelling, the key it resembles:

    exercises/x/assignment.toml line 7: unknown key 'timout' in [limits]; did you mean 'timeout'?

`settings_table()` is the reference table of every key (docs/settings.md is made from it).
"""
import difflib
import re
import tomllib
from dataclasses import MISSING, dataclass, field, fields
from datetime import date, datetime
from pathlib import Path

from autograder.course.errors import CourseError


def setting(default, kind, doc, example=None, *, factory=None, shown=None):
    """A field of a settings table: its default, its kind (a key of KINDS), one line on what it
    does, an example value for the error message, and how the table shows the default when not
    as itself (`shown`)."""
    metadata = {"kind": kind, "doc": doc, "example": example, "shown": shown}
    if factory is not None:
        return field(default_factory=factory, metadata=metadata)
    return field(default=default, metadata=metadata)


def _number(value):
    return type(value) in (int, float)


# kind -> (what a value of it is, for people; the test a value passes)
KINDS = {
    "text": ("text", lambda v: isinstance(v, str)),
    "integer": ("an integer", lambda v: type(v) is int),
    "boolean": ("true or false", lambda v: isinstance(v, bool)),
    "number": ("a number", lambda v: _number(v)),
    "seconds": ("a number of seconds", lambda v: _number(v) and v >= 0),
    "positive seconds": ("a number of seconds above 0", lambda v: _number(v) and v > 0),
    "megabytes": ("a whole number of megabytes above 0", lambda v: type(v) is int and v > 0),
    "fraction": ("a fraction from 0 to 1", lambda v: _number(v) and 0 <= v <= 1),
    "modules": ("a list of module names", lambda v: isinstance(v, list) and all(isinstance(x, str) for x in v)),
    "date-time": ("a date and time", lambda v: isinstance(v, (datetime, date, str))),
    "cells": ("a list of graded cells", lambda v: isinstance(v, list) and all(isinstance(x, str) for x in v)),
    "hours": ("a number of hours above 0", lambda v: _number(v) and v > 0),
    "positive integer": ("an integer above 0", lambda v: type(v) is int and v > 0),
    "counts": ('"last" or "best"', lambda v: v in ("last", "best")),
    "late base": ('"total" or "autograded"', lambda v: v in ("total", "autograded")),
    "visibility": ('"visible", "after_due_date" or "hidden"', lambda v: v in VISIBILITY),
}


@dataclass(frozen=True)
class LimitsSettings:
    """[limits]: per submission, when the TA passes none on the command line."""
    timeout: float | None = setting(None, "positive seconds", "Seconds a submission may run.", "timeout = 120",
                             shown="*the engine's*")
    memory_mb: int | None = setting(None, "megabytes", "Memory a submission may use, in MB.", "memory_mb = 4096",
                             shown="*the engine's*")

    def sandbox_limits(self):
        """These limits in the sandbox's terms (`Limits`: seconds, bytes), only those set: the one
        place megabytes become bytes, for assignment.toml and `grade --memory-mb` alike."""
        limits = {}
        if self.timeout is not None:
            limits["timeout"] = float(self.timeout)
        if self.memory_mb is not None:
            limits["memory_bytes"] = int(self.memory_mb) * 2**20
        return limits


@dataclass(frozen=True)
class SandboxSettings:
    """[sandbox]: the warm sandbox that forks a child per submission."""
    preimport: list = setting(None, "modules", "Modules imported once, before forking a child per submission.",
                              'preimport = ["tiktoken"]', factory=list)
    warm_up_on_release: bool = setting(True, "boolean", "Run the untouched release once before forking"
                                       " (tried in a fork first).", "warm_up_on_release = false")
    warm_up_seconds: float | None = setting(None, "seconds", "The most seconds the warm-up on the release may take.",
                                     "warm_up_seconds = 5", shown="*the sandbox's*")


@dataclass(frozen=True)
class ValidateSettings:
    """[validate]: the floors of `autograder validate`."""
    diagnoses_named_min: float = setting(0.9, "fraction", "Fraction of corpus mistakes whose student must read"
                                         " their mistake named and nothing misleading.",
                                         "diagnoses_named_min = 0.9")


@dataclass(frozen=True)
class LateSettings:
    """[late]: the late policy (read and checked further by runs/late.py, LatePolicy)."""
    due: datetime | None = setting(None, "date-time", "The due date and time (without an offset: UTC).",
                            "due = 2026-11-20T23:59:00+01:00", shown="*needed by a [late] table*")
    grace_minutes: float = setting(0, "number", "Late by less than this: no penalty.",
                                   "grace_minutes = 15")
    percent_per_day: float = setting(0, "number", "Penalty, in percent of the maximum score, per started"
                                     " day late.", "percent_per_day = 10")
    percent_per_hour: float = setting(0, "number", "... or per started hour (give one of the two).",
                                      "percent_per_hour = 1")
    cap_percent: float = setting(100, "number", "The penalty never exceeds this percentage.",
                                 "cap_percent = 50")
    cutoff: datetime | None = setting(None, "date-time", "Submitted after it: the score is 0.",
                               "cutoff = 2026-11-27T23:59:00+01:00", shown="*none*")
    of: str = setting("total", "late base", "What the percentages are of: every graded cell's points, the written"
                      " answers' included, or the autograded points alone. Either way the penalty comes off the"
                      " final grade, never below 0.", 'of = "autograded"')


VISIBILITY = ("visible", "after_due_date", "hidden")  # Gradescope's words


@dataclass(frozen=True)
class ServiceSettings:
    """[service]: grading when students submit (`autograder serve`); the due date is [late]'s."""
    opens: datetime | None = setting(None, "date-time", "Submissions are taken from this time on.",
                              "opens = 2026-11-01T09:00:00+01:00", shown="*at once*")
    attempts: int = setting(20, "positive integer", "Attempts a student may make in each window (an upload the"
                            " grader refuses costs none); raise it for a course that wants more, so that one student"
                            " handing in a notebook a second cannot fill the queue.", "attempts = 50")
    attempt_window_hours: float = setting(24, "hours", "The window the attempts are counted in, in"
                                          " hours.", "attempt_window_hours = 24")
    counts: str = setting("last", "counts", "Which attempt is the grade: the last before the cutoff, or the best.",
                          'counts = "best"')
    visibility: str = setting("visible", "visibility", "What students see of a check before the due date, unless"
                              " [visibility] says otherwise.", 'visibility = "after_due_date"')
    max_upload_mb: int = setting(50, "megabytes", "The largest upload taken (refused before it is read whole).",
                                 "max_upload_mb = 50")
    requests_per_minute: int = setting(60, "integer", "Requests one student may make in a minute.",
                                       "requests_per_minute = 60")


BUILDS_ON_EXAMPLE = 'ex5 = ["ex3"]'
VISIBILITY_EXAMPLE = '"ex3::test_structure" = "hidden"'


@dataclass(frozen=True)
class AssignmentSettings:
    """The top level of assignment.toml, and its tables."""
    title: str | None = setting(None, "text", "The assignment's title.", 'title = "Causal attention"',
                         shown="*the folder's name*")
    order: int = setting(1000, "integer", "Its place in the course (lower first; then by name).", "order = 2")
    limits: LimitsSettings = setting(None, "table", "", factory=LimitsSettings)
    sandbox: SandboxSettings = setting(None, "table", "", factory=SandboxSettings)
    validate: ValidateSettings = setting(None, "table", "", factory=ValidateSettings)
    late: LateSettings = setting(None, "table", "", factory=LateSettings)
    service: ServiceSettings = setting(None, "table", "", factory=ServiceSettings)
    builds_on: dict = setting(None, "builds_on", "{graded cell: [graded cells whose code it uses]}: while one of"
                              " those fails, the cell says to fix it first.", BUILDS_ON_EXAMPLE, factory=dict)
    visibility: dict = setting(None, "visibility_table", '{"cell" or "cell::check": visibility}: what students'
                               " see before the due date of a graded cell's checks, or of one check (its name"
                               " without the case in brackets), over [service] visibility.", VISIBILITY_EXAMPLE,
                               factory=dict)
    late_table: dict | None = field(default=None, metadata={"kind": "internal"})  # [late] as written, or None

    # -- reading ----------------------------------------------------------------
    @classmethod
    def read(cls, path):
        """The settings in the file `path`; CourseError if it cannot be read or is not right."""
        path = Path(path)
        try:
            text = path.read_text()
            return cls.from_dict(tomllib.loads(text), path, text)
        except (OSError, tomllib.TOMLDecodeError) as error:
            raise CourseError(f"{path} cannot be read: {error}") from None

    @classmethod
    def from_dict(cls, raw, path, text=None):
        """The settings in `raw` (assignment.toml as tomllib read it, from the file `path`, whose
        `text` gives the lines of the keys; read from `path` when needed and not given)."""
        where = _Where(path, text)
        known = {f.name for f in fields(cls) if f.metadata["kind"] != "internal"}
        where.refuse_unknown(raw, known, None)
        values = {}
        for spec in fields(cls):
            kind = spec.metadata["kind"]
            if kind == "internal" or spec.name not in raw:
                continue
            if kind == "table":
                values[spec.name] = _table(TABLES[spec.name], spec.name, raw[spec.name], where)
            elif kind == "builds_on":
                values[spec.name] = _builds_on(raw[spec.name], where)
            elif kind == "visibility_table":
                values[spec.name] = _visibility(raw[spec.name], where)
            else:
                values[spec.name] = where.checked(None, spec, raw[spec.name])
        late = raw.get("late")
        return cls(**values, late_table=dict(late) if late else None)


TABLES = {"limits": LimitsSettings, "sandbox": SandboxSettings, "validate": ValidateSettings, "late": LateSettings,
          "service": ServiceSettings}


def _table(table_class, name, value, where):
    if not isinstance(value, dict):
        raise where.error(name, None, f"[{name}] is a table (a [{name}] header and its keys)")
    where.refuse_unknown(value, {f.name for f in fields(table_class)}, name)
    return table_class(**{spec.name: where.checked(name, spec, value[spec.name])
                          for spec in fields(table_class) if spec.name in value})


def _builds_on(value, where):
    if not isinstance(value, dict):
        raise where.error("builds_on", None, f"[builds_on]: each entry is a list of graded cells, as in"
                                             f" {BUILDS_ON_EXAMPLE}")
    for cell, upstream in value.items():
        if not KINDS["cells"][1](upstream):
            raise where.error("builds_on", cell, f"[builds_on]: each entry is a list of graded cells, as in"
                                                 f" {BUILDS_ON_EXAMPLE} (got {cell} = {upstream!r})")
    return {cell: list(upstream) for cell, upstream in value.items()}


def _visibility(value, where):
    if not isinstance(value, dict):
        raise where.error("visibility", None, f"[visibility]: each entry is a cell or cell::check and one of"
                                              f" {', '.join(VISIBILITY)}, as in {VISIBILITY_EXAMPLE}")
    for key, word in value.items():
        if word not in VISIBILITY:
            close = difflib.get_close_matches(str(word), VISIBILITY, n=1)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            raise where.error("visibility", key, f"[visibility] {key}: one of {', '.join(VISIBILITY)}, not"
                                                 f" {word!r}{hint}")
    return dict(value)


class _Where:
    """The file the settings come from, to name the line of a key in what is refused."""

    def __init__(self, path, text):
        self.path, self._text = Path(path), text

    def text(self):
        if self._text is None:
            try:
                self._text = self.path.read_text()
            except OSError:
                self._text = ""
        return self._text

    def error(self, table, key, what):
        line = line_of(self.text(), table, key)
        return CourseError(f"{self.path}{f' line {line}' if line else ''}: {what}")

    def refuse_unknown(self, raw, known, table):
        for key in raw:
            if key not in known:
                is_table = table is None and isinstance(raw[key], dict)
                close = [f"[{name}]" if is_table else repr(name)
                         for name in difflib.get_close_matches(key, sorted(known), n=1)]
                hint = f"; did you mean {close[0]}?" if close else f" (known: {', '.join(sorted(known))})"
                place = f" in [{table}]" if table else ""
                what = f"table [{key}]" if is_table else f"key {key!r}"
                raise self.error(table, key, f"unknown {what}{place}{hint}")

    def checked(self, table, spec, value):
        what, test = KINDS[spec.metadata["kind"]]
        if not test(value):
            name = f"[{table}] {spec.name}" if table else spec.name
            raise self.error(table, spec.name, f"{name}: {what}, as in {spec.metadata['example']}"
                                               f" (got {value!r})")
        return list(value) if isinstance(value, list) else value


HEADER = re.compile(r"\s*\[\[?\s*([^\]]*?)\s*\]\]?\s*(#.*)?$")
KEY = re.compile(r"""\s*(?:"([^"]*)"|'([^']*)'|([A-Za-z0-9_.\-]+))\s*=""")


def line_of(text, table, key):
    """The line number (from 1) where `key` of `table` (None: the top level; key None: the table
    itself) is written in `text`; 0 when it cannot be found (a key set by code, say). Found by
    reading the text: tomllib gives no lines."""
    current, table_line = None, 0
    for number, line in enumerate(text.splitlines(), 1):
        if header := HEADER.match(line):
            current = header.group(1).replace('"', "").replace("'", "").replace(" ", "")
            if current == (key if table is None else f"{table}.{key}"):  # the key is a table of its own
                return number
            if current == table and not table_line:
                table_line = number
                if key is None:
                    return number
            continue
        match = KEY.match(line)
        if not match:
            continue
        name = next(g for g in match.groups() if g is not None)
        if table is None and current is None and name == key:
            return number
        if table is not None and ((current == table and name == key)  # [table] then key = ...
                                  or (current is None and name in (f"{table}.{key}", table))):  # dotted, inline
            return number
    return table_line


def settings_table():
    """Every key of assignment.toml as a Markdown table: table, key, type, default, description."""
    rows = ["| Table | Key | Type | Default | Description |", "|---|---|---|---|---|"]
    for spec in fields(AssignmentSettings):
        kind = spec.metadata["kind"]
        if kind == "table":
            table = TABLES[spec.name]
            doc = table.__doc__.split(": ", 1)[1]
            rows.append(f"| [{spec.name}] | | table | | {doc[0].upper()}{doc[1:]} |")
            rows += [_row(f"[{spec.name}]", key) for key in fields(table)]
        elif kind == "builds_on":
            rows.append(f"| [builds_on] | *graded cell* | {KINDS['cells'][0]} | *no entries* | {spec.metadata['doc']}"
                        f" Example: `{BUILDS_ON_EXAMPLE}` |")
        elif kind == "visibility_table":
            rows.append(f"| [visibility] | *cell* or *cell::check* | {KINDS['visibility'][0]} | *[service]"
                        f" visibility* | {spec.metadata['doc']} Example: `{VISIBILITY_EXAMPLE}` |")
        elif kind != "internal":
            rows.append(_row("(top level)", spec))
    return "\n".join(rows) + "\n"


def _row(table, spec):
    default = spec.default_factory() if spec.default is MISSING else spec.default
    shown = spec.metadata["shown"] or f"`{str(default).lower() if isinstance(default, bool) else default}`"
    return (f"| {table} | {spec.name} | {KINDS[spec.metadata['kind']][0]} | {shown} | {spec.metadata['doc']}"
            f" Example: `{spec.metadata['example']}` |")
