"""Grades for a learning management system: Canvas's and Moodle's import CSVs, from the final grades.

Every grade here is a final grade (outputs/final.py): autograded points, the written
answers graded in formgrader, extra credit, minus the late penalty. An LMS wants its own
columns and its own student identities. A roster (CSV, one row per student) maps our
student ids to them:

    student_id,name,canvas_id,sis_user_id,sis_login_id,section,email,id_number,extension_hours,moodle_participant

Only `student_id` is required; the columns an export needs must be there for the students
it exports (`extension_hours` is for late work, see runs/late.py). Without a roster, what
the intake read from the download is used (Canvas's user id, Moodle's participant number),
else our student ids stand for the LMS's own (Canvas's SIS User ID, Moodle's ID number).

Nobody is dropped in silence: students on the roster without a result, results whose
student is not on the roster, and students whose written answers wait for a TA are
returned so the command can list them. A cell with no final grade is left empty (the LMS
then leaves that grade alone) rather than a zero that nobody decided.

Every text cell is written so that a spreadsheet shows it as text: a student id or
name starting with = + - @ (a formula) gets a quote in front (see untrusted.py).
"""
import csv
import io
import re
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime, timezone

from autograder.outputs import final

from autograder.untrusted import canvas_gradebook_id, for_spreadsheet, listed, moodle_student_id

CANVAS_COLUMNS = ["Student", "ID", "SIS User ID", "SIS Login ID", "Section"]
MOODLE_KEYS = {"email": "Email address", "id_number": "ID number"}
# The grading worksheet's columns that Moodle's "Upload grading worksheet" reads: it refuses a
# file without Identifier, Grade and this one (mod/assign/feedback/offline/importgradeslib.php).
MOODLE_MODIFIED = "Last modified (grade)"


class RosterError(ValueError):
    """The roster cannot be used; the message says why and where."""


@dataclass
class Export:
    text: str  # the CSV
    exported: int = 0
    without_result: list = field(default_factory=list)  # on the roster, not graded
    not_on_roster: list = field(default_factory=list)  # graded, not on the roster (not in the file)
    not_finished: list = field(default_factory=list)  # graded with a grader error: no grade yet
    needs_grading: list = field(default_factory=list)  # written answers not graded yet: left empty


class LMS:
    """One LMS's grade file and its own roster, in one place. Adding an LMS is a subclass and one
    entry in BY_NAME (with its test): the export command, its --key choices and the roster's
    columns follow from here."""

    name = ""  # the export's format name (`autograder export NAME`)
    title = ""  # what the file is, as the command says it wrote it
    roster_columns = ()  # the roster's columns this LMS knows its students by (kept when read)
    keys = ()  # what `--key` may choose to match students by (none: no choice)
    own_roster = ""  # the LMS's own export read as a roster, in words
    own_columns = ()  # the columns that tell that file apart

    def roster(self, path, reader):
        """{student id: row} from the LMS's own export (csv.DictReader `reader` of `path`)."""
        raise NotImplementedError

    def export(self, assignments, roster=None, key=None):
        """An Export of `assignments` ([final.AssignmentGrades], a column each) for `roster`."""
        raise NotImplementedError


def roster_columns():
    """The columns a roster row keeps: ours, late work's, and every LMS's."""
    return ("student_id", "name", "extension_hours", *(c for lms in BY_NAME.values() for c in lms.roster_columns))


def read_roster(path):
    """{student id: row} from a roster CSV: ours (a student_id column), or an LMS's own export
    as it comes (Moodle's grading worksheet, Canvas's gradebook export)."""
    try:
        with open(path, newline="", encoding="utf-8-sig") as handle:  # Excel writes a BOM
            reader = csv.DictReader(handle)
            columns = [name.strip() for name in reader.fieldnames or []]
            reader.fieldnames = columns
            if "student_id" in columns:
                return _our_roster(path, reader)
            for lms in BY_NAME.values():
                if lms.own_columns and set(lms.own_columns) <= set(columns):
                    return lms.roster(path, reader)
            theirs = " or ".join(f"{lms.own_roster} ({', '.join(lms.own_columns)})"
                                 for lms in BY_NAME.values() if lms.own_columns)
            raise RosterError(f"{path}: a roster has a student_id column, or is {theirs} as they come;"
                              f" found the columns {listed(columns) if columns else 'none'}")
    except (OSError, UnicodeDecodeError, csv.Error) as error:
        raise RosterError(f"{path}: cannot read the roster ({error})") from None


def _our_roster(path, reader):
    roster, kept = {}, set(roster_columns())
    for line, row in enumerate(reader, start=2):
        student = (row.get("student_id") or "").strip()
        if not student:
            raise RosterError(f"{path}, line {line}: no student_id")
        if student in roster:
            raise RosterError(f"{path}, line {line}: {student} is on the roster twice")
        roster[student] = {k: (v or "").strip() for k, v in row.items() if k in kept}
    return roster


def _people(assignments, roster):
    """[(student id, roster row)] in roster order (then the rest), and an Export saying who is
    missing on which side. Without a roster each student's row is made from what the intake
    recorded (Canvas's user id, the LMS's name), else their id stands for the LMS's own."""
    graded = {}
    for grades in assignments:
        for student, grade in grades.grades.items():
            if grade.status != final.NO_SUBMISSION:
                graded.setdefault(student, grade)
    export = Export(text="")
    if roster is None:
        people = [(student, _identity(student, grade.lms)) for student, grade in sorted(graded.items())]
    else:
        people = [(student, row) for student, row in roster.items()]
        export.not_on_roster = sorted(set(graded) - set(roster))
    for student, _ in people:
        found = [grades.grades.get(student) for grades in assignments]
        if all(grade is None or grade.status == final.NO_SUBMISSION for grade in found):
            export.without_result.append(student)
        for grade in found:
            if grade is not None and grade.status == final.NOT_YET and student not in export.not_finished:
                export.not_finished.append(student)
            if grade is not None and grade.status == final.NEEDS_GRADING and student not in export.needs_grading:
                export.needs_grading.append(student)
    return people, export


def _identity(student, lms):
    """A roster row for a student graded without a roster."""
    if lms.get("canvas_id"):
        return {"student_id": student, "name": lms.get("lms_name") or student, "canvas_id": lms["canvas_id"]}
    row = {"student_id": student, "sis_user_id": student, "id_number": student, "name": lms.get("lms_name", "")}
    if lms.get("moodle_participant"):
        row["moodle_participant"] = lms["moodle_participant"]
    return row


def _points(grade):
    """An LMS cell: the final total, or empty while it is not known (the LMS leaves the grade alone)."""
    return "" if grade is None or grade.total is None else f"{grade.total:g}"


class Canvas(LMS):
    name, title = "canvas", "Canvas's gradebook import"
    roster_columns = ("canvas_id", "sis_user_id", "sis_login_id", "section")
    own_roster, own_columns = "Canvas's gradebook export", ("Student", "ID")

    def roster(self, path, reader):
        """Canvas's gradebook export (Grades, Export): each student under the id a Canvas download
        gets without a roster (the name's letters, lower case, and the Canvas user id), with their
        SIS ids and section. The "Points Possible" row is not a student."""
        roster = {}
        for line, row in enumerate(reader, start=2):
            name, canvas_id = (row.get("Student") or "").strip(), (row.get("ID") or "").strip()
            if "points possible" in name.lower() or (not name and not canvas_id):
                continue
            if not canvas_id.isdigit():
                raise RosterError(f"{path}, line {line}: Canvas's ID column holds a user number, not {canvas_id[:40]!r}")
            student = canvas_gradebook_id(name, canvas_id)
            roster[student] = {"student_id": student, "name": name, "canvas_id": canvas_id,
                               "sis_user_id": (row.get("SIS User ID") or "").strip(),
                               "sis_login_id": (row.get("SIS Login ID") or "").strip(),
                               "section": (row.get("Section") or "").strip()}
        return roster

    def export(self, assignments, roster=None, key=None):
        """Canvas's gradebook import: identity columns, a column per assignment, a Points Possible row.
        `assignments`: [final.AssignmentGrades], each a column named by its title."""
        people, export = _people(assignments, roster)
        needed = ("canvas_id", "sis_user_id", "sis_login_id")
        unidentified = [s for s, row in people if not any(row.get(k) for k in needed)]
        if unidentified:
            raise RosterError(f"Canvas matches students by ID, SIS User ID or SIS Login ID; the roster has none"
                              f" of them for {listed(unidentified)}")
        handle = io.StringIO(newline="")
        writer = csv.writer(handle)
        writer.writerow([*CANVAS_COLUMNS, *(for_spreadsheet(grades.title) for grades in assignments)])
        writer.writerow(["Points Possible", "", "", "", "", *(f"{grades.out_of:g}" for grades in assignments)])
        for student, row in people:
            cells = [_points(grades.grades.get(student)) for grades in assignments]
            writer.writerow([*map(for_spreadsheet, (row.get("name") or student, row.get("canvas_id", ""),
                                                    row.get("sis_user_id", ""), row.get("sis_login_id", ""),
                                                    row.get("section", ""))), *cells])
            export.exported += any(cells)
        export.text = handle.getvalue()
        return export


class Moodle(LMS):
    name, title = "moodle", "Moodle's grade import"
    roster_columns = ("email", "id_number", "moodle_participant")
    keys = (*MOODLE_KEYS, "participant")
    own_roster, own_columns = "Moodle's grading worksheet", ("Identifier", "Grade")

    def roster(self, path, reader):
        """Moodle's grading worksheet (an assignment's "Download grading worksheet"): each student
        under the id a Moodle download gets without a roster (their name's words, runs/intake),
        with their participant number, email, ID number and the worksheet's "Last modified
        (grade)", which the worksheet written back carries (Moodle's check that no grade changed
        in Moodle meanwhile)."""
        rows = []
        for line, row in enumerate(reader, start=2):
            found = re.fullmatch(r"\D*?(\d+)", (row.get("Identifier") or "").strip())
            if not found:
                raise RosterError(f"{path}, line {line}: the Identifier is not Moodle's \"Participant N\""
                                  f" ({(row.get('Identifier') or '')[:40]!r})")
            name = (row.get("Full name") or "").strip()
            rows.append({"name": name, "moodle_participant": found.group(1),
                         "email": (row.get("Email address") or "").strip(),
                         "id_number": (row.get("ID number") or "").strip(),
                         "moodle_modified": (row.get(MOODLE_MODIFIED) or "").strip()})
        names = defaultdict(int)
        for row in rows:
            names[moodle_student_id(row["name"])] += 1
        roster = {}
        for row in rows:  # two students of one name: each with their number, as the intake keeps them apart
            student = moodle_student_id(row["name"])
            student = f"{student}-{row['moodle_participant']}" if names[student] > 1 else student
            roster[student] = {"student_id": student, **row}
        return roster

    def export(self, assignments, roster=None, key=None):
        """Moodle's grade import CSV: one identity column (ID number or email), a column per assignment.
        key "participant": the assignment's offline grading worksheet instead (Identifier "Participant
        N", as Moodle names its downloads; one assignment only)."""
        key = key or self.default_key(assignments, roster)
        if key == "participant":
            return self.worksheet(assignments, roster)
        if key not in MOODLE_KEYS:
            raise RosterError(f"Moodle matches students by {' or '.join(MOODLE_KEYS)} (or participant), not {key}")
        people, export = _people(assignments, roster)
        unidentified = [s for s, row in people if not row.get(key)]
        if unidentified:
            raise RosterError(f"the roster has no {key} for {listed(unidentified)}")
        handle = io.StringIO(newline="")
        writer = csv.writer(handle)
        writer.writerow([MOODLE_KEYS[key], *(for_spreadsheet(grades.title) for grades in assignments)])
        for student, row in people:
            cells = [_points(grades.grades.get(student)) for grades in assignments]
            writer.writerow([for_spreadsheet(row[key]), *cells])
            export.exported += any(cells)
        export.text = handle.getvalue()
        return export

    def default_key(self, assignments, roster):
        """By ID number with a roster; without one, by participant when every student came from a
        Moodle download of this one assignment (the numbers in its file names), else by our ids as
        ID numbers."""
        if roster is not None or len(assignments) != 1:
            return "id_number"
        grades = [g for g in assignments[0].grades.values() if g.status != final.NO_SUBMISSION]
        return "participant" if grades and all(g.lms.get("moodle_participant") for g in grades) else "id_number"

    def worksheet(self, assignments, roster=None):
        """Moodle's offline grading worksheet for one assignment: Identifier ("Participant N", the number in
        the name of each student's download), Full name, Grade, Maximum Grade. Upload it on the
        assignment's page (Grading action: Upload grading worksheet)."""
        if len(assignments) != 1:
            raise RosterError("Moodle's grading worksheet holds one assignment: name it (or use --key id_number)")
        (grades,) = assignments
        people, export = _people(assignments, roster)
        handle = io.StringIO(newline="")
        writer = csv.writer(handle)
        writer.writerow(["Identifier", "Full name", "Email address", "Grade", "Maximum Grade", MOODLE_MODIFIED])
        # Moodle skips a row whose grade was changed in Moodle more than a minute after this date: the
        # date of the worksheet read as the roster (Moodle's own round trip), else the moment written.
        now = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")
        for student, row in people:
            grade = grades.grades.get(student)
            participant = (grade.lms.get("moodle_participant") if grade else "") or row.get("moodle_participant", "")
            if not participant:
                export.not_on_roster.append(student)  # nothing Moodle can match it by
                continue
            cell = _points(grade)
            modified = row.get("moodle_modified", "")
            writer.writerow([f"Participant {participant}", for_spreadsheet(row.get("name") or student),
                             for_spreadsheet(row.get("email", "")), cell, f"{grades.out_of:g}",
                             modified if modified and modified != "-" else now])
            export.exported += bool(cell)
        export.text = handle.getvalue()
        return export


CANVAS, MOODLE = Canvas(), Moodle()
BY_NAME = {lms.name: lms for lms in (CANVAS, MOODLE)}  # every LMS, listed once


def formats():
    """The final grade file's formats (`autograder export FORMAT`): our plain CSV, and each LMS's import."""
    return ("csv", *BY_NAME)
