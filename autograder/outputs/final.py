"""The final grade: one place that adds up what a student earned on an assignment, and on the course.

A notebook's points come from two hands: the autograded cells (the result files, the
source of truth) and the written answers a TA grades in formgrader (nbgrader's gradebook,
where a TA may also override an autograded cell or give extra credit). The late penalty
is the result's own line. So, per student and assignment:

    total = autograded + written + extra credit - late penalty   (never below 0)

out of every graded cell's points, as nbgrader counts them. A total exists only when
nothing is missing: a student whose written answers wait for a TA is "needs grading",
with the points so far, never a total that silently counts them as 0. Canvas's,
Moodle's and the plain files (outputs/lms.py and `write_csv` here) are all written from
these rows.
"""
import csv
import io
from dataclasses import dataclass, field

from autograder.record import ERROR, INVALID
from autograder.untrusted import for_spreadsheet

GRADED = "graded"
NEEDS_GRADING = "needs grading"  # written answers not graded yet in formgrader
NOT_GRADABLE = "not gradable"  # the file was not a notebook: 0, and the student was told
NOT_YET = "not graded yet"  # a grader error: it is graded again on the next run
NO_SUBMISSION = "no submission"  # on the roster, nothing handed in


@dataclass
class FinalGrade:
    student_id: str
    status: str
    autograded: float = 0.0
    written: float = 0.0
    extra_credit: float = 0.0
    late_penalty: float = 0.0
    out_of: float = 0.0
    waiting: list = field(default_factory=list)  # written answers (grade ids) no TA has graded yet
    overridden: list = field(default_factory=list)  # autograded cells a TA gave other points in formgrader
    submitted_at: str = ""
    late_note: str = ""
    lms: dict = field(default_factory=dict)  # the LMS's identities the intake recorded

    @property
    def total(self):
        """The final points, or None while anything is missing (see the module's doc)."""
        return max(0.0, self.points_so_far) if self.status in (GRADED, NOT_GRADABLE) else None

    @property
    def points_so_far(self):
        return round(self.autograded + self.written + self.extra_credit - self.late_penalty, 2)


@dataclass
class AssignmentGrades:
    name: str
    title: str
    out_of: float
    grades: dict  # student id -> FinalGrade
    late_base: float = None  # the points a late penalty's percentages are of; None without a late policy

    def counts(self):
        found = {}
        for grade in self.grades.values():
            found[grade.status] = found.get(grade.status, 0) + 1
        return found


def assignment_grades(name, title, results, auto_cells, written_cells, manual=None, roster=None):
    """AssignmentGrades from the results and what formgrader holds.

    `auto_cells`, `written_cells`: {grade id: points} of the autograded and the hand-graded cells
    (grading/notebook.py grade_cells, manual_cells); `manual`: outputs/gradebook.py
    read_manual_scores; `roster`: {student id: row}, whose students without a result are listed
    as "no submission"."""
    manual = manual or {}
    out_of = round(sum(auto_cells.values()) + sum(written_cells.values()), 2)
    grades = {}
    for result in results:
        grades[result.student_id] = _final(result, auto_cells, written_cells, manual.get(result.student_id, {}),
                                           out_of)
    for student in roster or {}:
        grades.setdefault(student, FinalGrade(student, NO_SUBMISSION, out_of=out_of))
    return AssignmentGrades(name, title, out_of, dict(sorted(grades.items())))


def _final(result, auto_cells, written_cells, manual, out_of):
    grade = FinalGrade(result.student_id, GRADED, out_of=out_of, submitted_at=result.submitted_at,
                       late_note=result.late_note, lms=dict(result.lms))
    if result.status == ERROR:
        grade.status = NOT_YET
        return grade
    if result.status == INVALID:  # no notebook to grade by hand either: the 0 the student was told
        grade.status = NOT_GRADABLE
        return grade
    scores = result.scores
    for cell in auto_cells:
        override, extra = manual.get(cell, (None, None))
        if override is not None and override != scores.get(cell):
            grade.overridden.append(cell)
        grade.autograded += override if override is not None else scores.get(cell, 0.0)
        grade.extra_credit += extra or 0.0
    for cell in written_cells:
        points, extra = manual.get(cell, (None, None))
        if points is None:
            grade.waiting.append(cell)
        else:
            grade.written += points
        grade.extra_credit += extra or 0.0
    grade.autograded, grade.written = round(grade.autograded, 2), round(grade.written, 2)
    grade.late_penalty = result.late_penalty
    if grade.waiting:
        grade.status = NEEDS_GRADING
    return grade


# -- the plain files --------------------------------------------------------------------------
ASSIGNMENT_COLUMNS = ["student_id", "autograded", "written", "extra_credit", "late_penalty", "late_penalty_of",
                      "total", "out_of", "status", "waiting_for_grading", "overridden_in_formgrader", "submitted_at", "late_note"]


def assignment_csv(grades):
    """One assignment's final grades, a row per student (AssignmentGrades)."""
    handle = io.StringIO(newline="")
    writer = csv.writer(handle)
    writer.writerow(ASSIGNMENT_COLUMNS)
    for grade in grades.grades.values():
        known = grade.status in (GRADED, NEEDS_GRADING, NOT_GRADABLE)
        writer.writerow([for_spreadsheet(grade.student_id),
                         *(_number(value) if known else "" for value in
                           (grade.autograded, grade.written, grade.extra_credit, grade.late_penalty)),
                         _number(grades.late_base), _number(grade.total), _number(grade.out_of), grade.status,
                         " ".join(grade.waiting), " ".join(grade.overridden), for_spreadsheet(grade.submitted_at),
                         for_spreadsheet(grade.late_note)])
    return handle.getvalue()


def course_rows(assignments, roster=None):
    """[(student id, {assignment: FinalGrade or None}, course total or None, status)] for every
    student of any assignment (and the roster), with the course total once nothing is missing."""
    students = sorted({s for a in assignments for s in a.grades} | set(roster or {}))
    rows = []
    for student in students:
        found = {a.name: a.grades.get(student) for a in assignments}
        missing = [name for name, grade in found.items() if grade is None or grade.total is None]
        total = None if missing else round(sum(grade.total for grade in found.values()), 2)
        status = GRADED if not missing else "incomplete: " + ", ".join(
            f"{name} ({found[name].status if found[name] else NO_SUBMISSION})" for name in missing)
        rows.append((student, found, total, status))
    return rows


def course_csv(assignments, roster=None):
    """The course's final grades: each assignment's total, the course total, and what is missing."""
    handle = io.StringIO(newline="")
    writer = csv.writer(handle)
    out_of = round(sum(a.out_of for a in assignments), 2)
    writer.writerow(["student_id", *(a.name for a in assignments), "total", "out_of", "status"])
    for student, found, total, status in course_rows(assignments, roster):
        writer.writerow([for_spreadsheet(student), *(_number(g.total if g else None) for g in found.values()),
                         _number(total), _number(out_of), status])
    return handle.getvalue()


def _number(value):
    return "" if value is None else f"{value:g}"
