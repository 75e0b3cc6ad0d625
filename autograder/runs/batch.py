"""`autograder grade`: grade a batch of submissions, resumably, and write every output."""
import time
from datetime import datetime, timezone
from dataclasses import dataclass, field
from pathlib import Path

from autograder.course import write_atomically
from autograder.outputs.results import (GradebookWriter, Regrade, already_graded, batch_seed, record_wall_time,
                                        sync_gradebook, write_grades_csv)
from autograder.record import ERROR, Result, all_results, write_result
from autograder.grading.notebook import grade_cells, sha256
from autograder.runs.intake import discover


@dataclass
class BatchReport:
    graded: list = field(default_factory=list)  # record.Result graded in this run
    skipped: int = 0  # already graded by an earlier run
    results: list = field(default_factory=list)  # every result in the output folder
    seconds: float = 0.0
    out_dir: Path = None
    phases: dict = field(default_factory=dict)  # wall seconds per step, for benchmarks
    changes: list = field(default_factory=list)  # (previous, new) results whose score moved in this run
    # (student id, what the TA should know): inputs that could not be used as they were (a
    # renamed submission, an unreadable submission time) and results that could not be
    # written or recorded. Found again on every run until they are fixed.
    problems: list = field(default_factory=list)


def grade_batch(assignment, paths, out_dir=None, jobs=2, limits=None, force=False, seed=None,
                scheduler=None, on_result=None, unsafe_no_sandbox=False, submitted_at=None, roster=None):
    """Grade `paths` (submissions of `assignment`, an `Assignment` of its course) and write
    every output. `submitted_at` ({student: time}) and `roster` ({student: row}, for
    extensions) feed the assignment's late policy. Raises NoSandbox or PoisonedInterpreter,
    before any submission runs or anything is written, when grading must not happen."""
    import threading

    from autograder.runs.identical import CACHE_DIR, IdenticalAnswers
    from autograder.runs.late import LatePolicy, LateWork
    from autograder.grading.submission import BatchSpec, write_autograded
    from autograder.grading.scheduler import LocalScheduler
    from autograder.grading.selfcheck import verify
    from autograder.outputs.feedback import layout_of, write_feedback
    from autograder.outputs.report import warm_up_report

    late = LateWork(LatePolicy.from_settings(assignment.settings.get("late"),
                                             f"{assignment.folder / 'assignment.toml'} [late]"),
                    submitted_at, roster)  # a bad policy stops here, before anything runs
    assignment.builds_on  # so does a bad [builds_on] table
    scheduler = scheduler or LocalScheduler(jobs)
    isolation = scheduler.require_sandbox(unsafe_no_sandbox)  # a cluster asks each worker
    verify(comparisons=False)  # the workers check the comparisons once they have torch
    started = time.perf_counter()
    course = assignment.course
    out_dir = Path(out_dir or course.graded(assignment.name)).resolve()
    out_dir.mkdir(parents=True, exist_ok=True)
    submissions = discover(paths, assignment.name)
    renamed = {s.student_id: s.renamed for s in submissions if s.renamed}
    todo = [s for s in submissions if force or not _is_done(out_dir, s)]
    spec = BatchSpec(assignment=assignment.name, course=str(course.root), seed=batch_seed(out_dir, seed, force),
                     limits={**assignment.limits, **(limits or {})}, autograded_dir=str(course.autograded),
                     isolation=isolation)
    report = BatchReport(skipped=len(submissions) - len(todo), out_dir=out_dir,
                         problems=[*renamed.items(), *late.unreadable(submissions)])
    clock = _Clock(report.phases)
    source = read_source(assignment)
    identical = IdenticalAnswers(assignment, spec, out_dir, source, read_release(assignment), use_cache=not force)
    (out_dir / CACHE_DIR).mkdir(exist_ok=True)
    gradebook = None
    regrade = Regrade(out_dir, datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%S.%fZ"))

    layout = layout_of(source)

    def warm_up_report_after_gradebook():
        # One import at a time: two threads importing overlapping modules (nbgrader's and
        # matplotlib's share dateutil, for one) can leave one of them half-imported.
        gradebook.opened.wait(timeout=60)
        warm_up_report()

    warming = threading.Thread(target=warm_up_report_after_gradebook, name="report", daemon=True)

    def record(result):
        nonlocal gradebook
        if gradebook is None:
            clock("until the first result")
            # Threads only now: the workers are made (a forked pool copies this process), and
            # while they start they need every core (measured: starting these first delayed
            # the first result by 0.3 s).
            gradebook = GradebookWriter(course.root, assignment.name)
            # The class report's plot library loads while the workers grade, not after them,
            # when every core but this process's would wait for it.
            warming.start()
        # Whatever goes wrong with one student's result is that student's problem, said to
        # the TA; the batch, and everyone else's result, goes on.
        try:
            result = late.apply(result)  # a copy: the raw result stays as it is for identical answers
        except Exception as error:  # noqa: BLE001
            report.problems.append((result.student_id, f"the late policy could not be applied ({_brief(error)})"))
        if result.student_id in renamed and renamed[result.student_id] not in result.notes:
            result = Result.from_json(result.to_json())  # never the raw result identical answers keep
            result.add_note(renamed[result.student_id])
        if result.status != ERROR:  # a grader fault is retried next run
            try:
                regrade.keep(result)  # the previous result, if any, goes to history/ first
                write_result(out_dir, result)
            except Exception as error:  # noqa: BLE001
                report.problems.append((result.student_id, f"its result could not be written ({_brief(error)});"
                                                            " it is graded again next run"))
            else:
                try:
                    write_feedback(out_dir, [result], layout)  # now, while the workers still grade
                except Exception as error:  # noqa: BLE001 (written again at the end of the run)
                    report.problems.append((result.student_id, f"its feedback page could not be written"
                                                                f" ({_brief(error)})"))
                gradebook.add(result)
        report.graded.append(result)
        if on_result:
            on_result(result)

    def record_copies(copies):
        for result, notebook in copies:
            if spec.autograded_dir and result.status != ERROR:
                try:
                    write_autograded(spec, result.student_id, notebook, result)
                except Exception as error:  # noqa: BLE001
                    report.problems.append((result.student_id, f"its graded notebook could not be written to"
                                                                f" autograded/ ({_brief(error)})"))
            record(result)

    # Workers start at once; the answers keys are worked out while they warm up.
    if todo and hasattr(scheduler, "start"):
        scheduler.start(spec, len(todo))  # its workers and sandboxes warm up while this process reads
    for result in scheduler.grade(spec, _Counted(identical.to_run(todo), len(todo))):
        record_copies(identical.take_ready())
        copies = identical.copies_of(result)  # first: it also records the answers key in the result
        record(result)
        record_copies(copies)
        clock("grading the rest")
    record_copies(identical.take_ready())  # when nothing had to run
    record_copies(identical.unanswered(spec))
    clock("stopping the workers")
    report.results = all_results(out_dir)
    report.changes = regrade.changes
    regrade.write_changes()
    write_grades_csv(out_dir, report.results, list(grade_cells(source)))
    clock("grades.csv")
    try:
        if gradebook is None:
            unwritten = sync_gradebook(course.root, assignment.name, report.results)
        else:
            unwritten = gradebook.finish(report.results)
    except Exception as error:  # noqa: BLE001 (the JSON results are safe; grades.csv and the report follow)
        report.problems.append(("", f"nbgrader's gradebook was not updated ({_brief(error)}); the results"
                                    f" are in {out_dir}, and the next run writes them"))
    else:
        report.problems += [(student, f"its grades could not be written to nbgrader's gradebook ({why});"
                                      " the next run tries again") for student, why in sorted(unwritten.items())]
    clock("gradebook")
    report.seconds = time.perf_counter() - started
    record_wall_time(out_dir, report.seconds)
    if warming.is_alive():
        warming.join()  # no thread is left importing when a caller forks again (demo grades twice)
    write_pages(assignment.name, out_dir, report.results, source, new_results=[])  # feedback pages are written
    clock("feedback and report pages")
    return report


def _brief(error):
    """An exception in one bounded line."""
    text = " ".join(str(error).split())
    return f"{type(error).__name__}: {text[:300]}" if text else type(error).__name__


def write_pages(assignment, out_dir, results, source, new_results=None):
    """feedback/<student>.html (for `new_results`, default all) and report.html."""
    from autograder.outputs.feedback import layout_of, write_feedback
    from autograder.outputs.results import read_batch_file
    from autograder.outputs.report import render_report

    layout = layout_of(source)
    write_feedback(out_dir, results if new_results is None else new_results, layout)
    page = render_report(assignment, results, layout, read_batch_file(out_dir).get("last_wall_time"), out_dir)
    return write_atomically(Path(out_dir) / "report.html", page)


def read_source(assignment):
    import nbformat

    return nbformat.read(assignment.source_notebook, as_version=4)


def read_release(assignment):
    import nbformat

    return nbformat.read(assignment.release_notebook, as_version=4)


class _Counted:
    """An iterable that says how long it is at most (a scheduler sizes its pool by it)."""

    def __init__(self, items, count):
        self.items, self.count = items, count

    def __iter__(self):
        return iter(self.items)

    def __len__(self):
        return self.count


class _Clock:
    """Adds the wall time since its last call to `phases[name]`."""

    def __init__(self, phases):
        self.phases, self.last = phases, time.perf_counter()

    def __call__(self, name):
        now = time.perf_counter()
        self.phases[name] = self.phases.get(name, 0.0) + now - self.last
        self.last = now


def _is_done(out_dir, submission):
    try:
        submission.sha256 = sha256(submission.path)
    except OSError:
        return False
    return already_graded(out_dir, submission, submission.sha256)
