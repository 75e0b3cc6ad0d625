"""Grades for a learning management system: Canvas's and Moodle's gradebook import CSVs.

`grades.csv` is ours; an LMS wants its own columns and its own student
identities. A roster (CSV, one row per student) maps our student ids (the
submission folders' names) to them:

    student_id,name,canvas_id,sis_user_id,sis_login_id,section,email,id_number,extension_hours

Only `student_id` is required; the columns an export needs must be there for
the students it exports (`extension_hours` is for grading late work, see
runs/late.py). Without a roster, our student ids are used as the
LMS's own identifiers (Canvas's SIS User ID, Moodle's ID number), which is right
when submissions were collected under those ids.

Nobody is dropped in silence: students on the roster without a result, and
results whose student is not on the roster, are returned so the command can
list them. A roster student without a result gets an empty cell (the LMS then
leaves that grade alone) rather than a zero that nobody decided.

Every text cell is written so that a spreadsheet shows it as text: a student id or
name starting with = + - @ (a formula) gets a quote in front (see untrusted.py).
"""
import csv
import io
from dataclasses import dataclass, field

from autograder.untrusted import for_spreadsheet

ROSTER_COLUMNS = ("student_id", "name", "canvas_id", "sis_user_id", "sis_login_id", "section", "email", "id_number",
                  "extension_hours")
CANVAS_COLUMNS = ["Student", "ID", "SIS User ID", "SIS Login ID", "Section"]
MOODLE_KEYS = {"email": "Email address", "id_number": "ID number"}


class RosterError(ValueError):
    """The roster cannot be used; the message says why and where."""


@dataclass
class Export:
    text: str  # the CSV
    exported: int = 0
    without_result: list = field(default_factory=list)  # on the roster, not graded
    not_on_roster: list = field(default_factory=list)  # graded, not on the roster (not in the file)
    not_finished: list = field(default_factory=list)  # graded with a grader error: no grade yet


def read_roster(path):
    """{student id: row} from a roster CSV."""
    try:
        with open(path, newline="", encoding="utf-8-sig") as handle:  # Excel writes a BOM
            reader = csv.DictReader(handle)
            if "student_id" not in (reader.fieldnames or []):
                raise RosterError(f"{path}: the roster needs a student_id column (found {reader.fieldnames})")
            roster = {}
            for line, row in enumerate(reader, start=2):
                student = (row.get("student_id") or "").strip()
                if not student:
                    raise RosterError(f"{path}, line {line}: no student_id")
                if student in roster:
                    raise RosterError(f"{path}, line {line}: {student} is on the roster twice")
                roster[student] = {k: (v or "").strip() for k, v in row.items() if k in ROSTER_COLUMNS}
            return roster
    except (OSError, UnicodeDecodeError, csv.Error) as error:
        raise RosterError(f"{path}: cannot read the roster ({error})") from None


def _people(results, roster):
    """[(student id, roster row, result or None)] in roster order (then the rest), and the
    lists of who is missing on which side."""
    by_student = {r.student_id: r for r in results}
    if roster is None:
        roster = {student: {"student_id": student, "sis_user_id": student, "id_number": student}
                  for student in sorted(by_student)}
    export = Export(text="")
    people = []
    for student, row in roster.items():
        result = by_student.get(student)
        if result is None:
            export.without_result.append(student)
        elif not result.finished:
            export.not_finished.append(student)
            result = None
        people.append((student, row, result))
    export.not_on_roster = sorted(set(by_student) - set(roster))
    return people, export


def _points(result):
    return "" if result is None else f"{result.score:g}"


def canvas(results, column, points_possible, roster=None):
    """Canvas's gradebook import: identity columns, one assignment column, a Points Possible row."""
    people, export = _people(results, roster)
    needed = ("canvas_id", "sis_user_id", "sis_login_id")
    unidentified = [s for s, row, _ in people if not any(row.get(k) for k in needed)]
    if unidentified:
        raise RosterError(f"Canvas matches students by ID, SIS User ID or SIS Login ID; the roster has none"
                          f" of them for {', '.join(unidentified[:5])}{' and more' if len(unidentified) > 5 else ''}")
    handle = io.StringIO(newline="")
    writer = csv.writer(handle)
    writer.writerow([*CANVAS_COLUMNS, for_spreadsheet(column)])
    writer.writerow(["Points Possible", "", "", "", "", f"{points_possible:g}"])
    for student, row, result in people:
        writer.writerow([*map(for_spreadsheet, (row.get("name") or student, row.get("canvas_id", ""),
                                                row.get("sis_user_id", ""), row.get("sis_login_id", ""),
                                                row.get("section", ""))), _points(result)])
        export.exported += result is not None
    export.text = handle.getvalue()
    return export


def moodle(results, column, roster=None, key="id_number"):
    """Moodle's grade import CSV: one identity column (ID number or email), one grade column."""
    if key not in MOODLE_KEYS:
        raise RosterError(f"Moodle matches students by {' or '.join(MOODLE_KEYS)}, not {key}")
    people, export = _people(results, roster)
    unidentified = [s for s, row, _ in people if not row.get(key)]
    if unidentified:
        raise RosterError(f"the roster has no {key} for {', '.join(unidentified[:5])}"
                          f"{' and more' if len(unidentified) > 5 else ''}")
    handle = io.StringIO(newline="")
    writer = csv.writer(handle)
    writer.writerow([MOODLE_KEYS[key], for_spreadsheet(column)])
    for student, row, result in people:
        writer.writerow([for_spreadsheet(row[key]), _points(result)])
        export.exported += result is not None
    export.text = handle.getvalue()
    return export

