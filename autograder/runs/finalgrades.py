"""`autograder export`: the final grade file, for one assignment or the whole course.

It reads each assignment's results (graded/<assignment>/), the written answers' points a TA
entered in formgrader (nbgrader's gradebook) and the roster, adds them up in one place
(outputs/final.py), and writes one file: plain CSV, Canvas's import or Moodle's.
"""
from dataclasses import dataclass, field
from pathlib import Path

from autograder.course import CourseError, write_atomically
from autograder.grading.notebook import grade_cells, manual_cells
from autograder.outputs import final, lms
from autograder.outputs.gradebook_db import read_manual_scores
from autograder.runs.recording import graded_folder, read_source
from autograder.runs.late import LateWork, assignment_policy

REMOVED, NO_NOTEBOOK, NOTHING = "removed", "no notebook", "nothing"  # why a student on the roster has no grade


@dataclass
class ExportReport:
    target: Path
    assignments: list  # [final.AssignmentGrades]
    export: lms.Export = None  # who is missing on which side (Canvas and Moodle)
    stale_penalties: list = field(default_factory=list)  # (assignment, student): the policy now says otherwise
    empty: list = field(default_factory=list)  # assignments with no results yet
    # (assignment, student) -> (REMOVED | NO_NOTEBOOK | NOTHING, in words) for a student on the roster
    # without a result: what a TA needs to know to do something about it
    no_grade: dict = field(default_factory=dict)

    def students(self, status):
        return sorted({s for a in self.assignments for s, g in a.grades.items() if g.status == status})

    def without_grade(self, kind):
        """["student: why"] (with the assignment, when the file holds several) of one kind of no grade."""
        several = len(self.assignments) > 1
        return [f"{student}{f' ({name})' if several else ''}: {why}" if why else f"{student}{f' ({name})' if several else ''}"
                for (name, student), (found, why) in sorted(self.no_grade.items()) if found == kind]


def assignment_grades(assignment, roster=None, results_dir=None, column=None):
    """final.AssignmentGrades of one assignment, and [students whose late penalty the current
    policy would change] (they need `autograder grade` again, which updates every output)."""
    folder = graded_folder(assignment, results_dir)
    results = folder.results()
    source = read_source(assignment)
    try:
        manual = read_manual_scores(assignment.course.root, assignment.name)
    except Exception as error:  # noqa: BLE001 (SQLAlchemy's and nbgrader's many errors: one clear line)
        raise CourseError(f"nbgrader's gradebook could not be read for {assignment.name}, so the written answers'"
                          f" points are unknown ({type(error).__name__}: {error})") from None
    grades = final.assignment_grades(assignment.name, column or assignment.title, results, grade_cells(source),
                                     manual_cells(source), manual, roster)
    policy = assignment_policy(assignment, source)
    grades.late_base = policy and policy.base(sum(grade_cells(source).values()))
    return grades, _stale_penalties(policy, results, roster)


def _stale_penalties(policy, results, roster):
    late = LateWork(policy, None, roster)
    for result in results:
        late.remember(result)  # the time it recorded counts where the file has moved since
    return [result.student_id for result in results if late.refresh(result) is not None]


def export(course, names, form, roster=None, key=None, out=None, results_dir=None, column=None):
    """Write the final grade file of the assignments `names` (all of the course's when empty) in
    `form` (one of lms.formats()); returns an ExportReport."""
    if form not in lms.formats():
        raise CourseError(f"the final grade file is one of {', '.join(lms.formats())}, not {form}")
    chosen = [course.assignment(name) for name in names] if names else course.assignments()
    if not chosen:
        raise CourseError(f"the course {course.root} has no assignments yet")
    if (results_dir or column) and len(chosen) != 1:
        raise CourseError("--results and --column go with one assignment")
    report = ExportReport(target=None, assignments=[])
    for assignment in chosen:
        grades, stale = assignment_grades(assignment, roster, results_dir, column)
        if not any(g.status != final.NO_SUBMISSION for g in grades.grades.values()):
            report.empty.append(assignment.name)
        folder = graded_folder(assignment, results_dir)
        for student, grade in grades.grades.items():
            if grade.status == final.NO_SUBMISSION:
                report.no_grade[(assignment.name, student)] = why_no_grade(folder, assignment.name, student)
        report.assignments.append(grades)
        report.stale_penalties += [(assignment.name, student) for student in stale]
    text = _text(report, form, roster, key)
    single = len(chosen) == 1 and names
    default = (graded_folder(chosen[0], results_dir).root / f"{_prefix(form)}-{chosen[0].name}.csv" if single
               else course.root / "graded" / f"{_prefix(form)}-course.csv")
    target = Path(out) if out else default
    target.parent.mkdir(parents=True, exist_ok=True)
    report.target = write_atomically(target, text)
    return report


def why_no_grade(folder, name, student):
    """(REMOVED | NO_NOTEBOOK | NOTHING, in words) for a student of the roster without a result in
    `folder`: removed by a TA (and how to undo it), or what they handed in that was no notebook
    (from the last run's intake.csv), or nothing the grader was handed."""
    from autograder.untrusted import listed

    removed = folder.removed().get(student)
    if removed:
        return REMOVED, f"{removed}; `autograder remove {name} {student} --undo` grades them again"
    files = [row.get("file", "") for row in folder.intake() if row.get("student_id") == student]
    if files:
        return NO_NOTEBOOK, f"handed in {listed(files, 4, 80)}, no notebook it could grade"
    return NOTHING, ""


def _prefix(form):
    return "final" if form == "csv" else form


def _text(report, form, roster, key):
    assignments = report.assignments
    if form == "csv":
        return final.assignment_csv(assignments[0]) if len(assignments) == 1 else final.course_csv(assignments, roster)
    report.export = lms.BY_NAME[form].export(assignments, roster, key)
    return report.export.text


