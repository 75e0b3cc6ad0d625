"""One way to record a result: the outputs a graded result becomes, and the one recorder that
writes them, for `autograder grade`, a regrade and the grading service alike.

`standard_outputs` is the list (result file, feedback page, nbgrader's gradebook, autograded
notebook, grades.csv, class report); `Recorder` hands each result to every output of a list
and ends them with `finish`. Whatever goes wrong with one output costs that output only and
becomes one line for the TA: only the result file, the source of truth, stops the outputs
after it (nothing may show a grade it lacks). The batch finishes its outputs once at its end;
the service finishes them whenever its queue is quiet, so nothing an output keeps grows for
a term. A new output is one class in outputs/ and one line in `standard_outputs`.
"""
from pathlib import Path

from autograder.grading.notebook import grade_cells
from autograder.outputs.autograded import AutogradedNotebooks
from autograder.outputs.base import brief
from autograder.outputs.feedback import FeedbackPages, layout_of
from autograder.outputs.folder import GradedFolder
from autograder.outputs.gradebook import Gradebook
from autograder.outputs.report import ClassReport
from autograder.outputs.results import GradesCsv, ResultFiles
from autograder.runs.late import assignment_policy


def read_source(assignment):
    import nbformat  # (nbformat loads jsonschema: only for the commands that read notebooks)

    return nbformat.read(assignment.source_notebook, as_version=4)


def read_release(assignment):
    import nbformat  # (as above)

    return nbformat.read(assignment.release_notebook, as_version=4)


def graded_folder(assignment, out_dir=None):
    """The GradedFolder `out_dir` (a path or a GradedFolder), by default graded/<assignment>/."""
    if isinstance(out_dir, GradedFolder):
        return out_dir
    return GradedFolder(Path(out_dir or assignment.course.graded(assignment.name)).resolve())


def class_report(assignment, folder, source):
    """The class report of `assignment`'s graded folder, saying its late policy where it has one."""
    policy = assignment_policy(assignment, source)
    late = policy.in_words(sum(grade_cells(source).values())) if policy else ""
    return ClassReport(folder, assignment.name, layout_of(source), late=late)


def standard_outputs(assignment, folder, scratch=None, source=None):
    """Everything a graded result becomes, in the order each result reaches them: the result
    file first (the others show nothing it lacks), then pages, nbgrader's gradebook and
    autograded/ notebooks, the class report; grades.csv at the end. `scratch`: a folder for
    the gradebook (scratch/gradebook.db) and autograded/ notebooks instead of the course's,
    so a trial run never reaches formgrader or `nbgrader export`."""
    source = source if source is not None else read_source(assignment)
    layout, course = layout_of(source), assignment.course
    db_url = f"sqlite:///{Path(scratch).resolve() / 'gradebook.db'}" if scratch else None
    autograded = Path(scratch) / "autograded" if scratch else course.autograded
    return [ResultFiles(folder), FeedbackPages(folder, layout),
            Gradebook(course.root, assignment.name, folder.root, db_url), AutogradedNotebooks(autograded, assignment.name),
            GradesCsv(folder, grade_cells(source)), class_report(assignment, folder, source)]


class Recorder:
    """Hands results to a list of outputs. Adding and finishing may come from two threads (the
    service adds as results come and finishes when its queue is quiet): an output whose finish
    changes what its add uses guards itself (ResultFiles, Gradebook), so a class report being
    written never holds back the next student's result."""

    def __init__(self, outputs):
        self.outputs = list(outputs)

    @property
    def needs_notebook(self):
        return any(output.needs_notebook for output in self.outputs)

    def add(self, result):
        """`result` into every output. Returns (recorded, problems): recorded is False when a
        required output (the result file) failed, so no other output shows that grade."""
        problems = []
        for output in self.outputs:
            try:
                output.add(result)
            except Exception as error:  # noqa: BLE001 (this output, for this student, only)
                again = "; it is graded again next run" if output.required else ""
                problems.append((result.student_id, f"{output.what} could not be written ({brief(error)}){again}"))
                if output.required:
                    return False, problems
        return True, problems

    def finish(self, results, clock=None):
        """Every result of the folder into every output that writes at the end; returns the
        problems. `clock(name)`, when given, is called after each output (for benchmarks)."""
        problems = []
        for output in self.outputs:
            try:
                problems += output.finish(results)
            except Exception as error:  # noqa: BLE001 (the result files are safe; the next finish writes it)
                problems.append(("", f"{output.what} was not written ({brief(error)}); the next run writes it"))
            if clock is not None:
                clock(output.what)
        return problems


def write_outputs(outputs, results):
    """Every result into `outputs`, as a batch would (for results graded earlier): returns the
    problems, [(student, what the TA should know)]."""
    recorder, problems = Recorder(outputs), []
    for result in results:
        problems += recorder.add(result)[1]
    return problems + recorder.finish(results)
