"""`autograder grade`: grade a batch of submissions, resumably, into the outputs it is given.

The batch decides what runs (new and changed notebooks; identical answers once) and hands
every result to a list of outputs (outputs/base.py). `standard_outputs` (runs/recording.py, the
one way a result is recorded, shared with the service) is what `autograder grade` writes;
`validate` asks for result files only, Gradescope for results.json only.
"""
import time
from dataclasses import dataclass, field
from pathlib import Path

from autograder.course import CourseError
from autograder.grading.notebook import sha256
from autograder.outputs.base import brief
from autograder.record import ERROR, INVALID, Result, broken_checks
from autograder.runs.intake import discover
from autograder.runs.recording import Recorder, graded_folder, read_release, read_source, standard_outputs


@dataclass
class BatchReport:
    graded: list = field(default_factory=list)  # record.Result graded in this run
    skipped: int = 0  # already graded by an earlier run, with the same checks and settings
    regraded: int = 0  # graded again: their earlier result was made with other checks, settings or grader
    late_updated: list = field(default_factory=list)  # kept results whose late penalty changed, as recorded
    results: list = field(default_factory=list)  # every finished result: this run's and the folder's
    seconds: float = 0.0
    out_dir: Path = None
    phases: dict = field(default_factory=dict)  # wall seconds per step, for benchmarks
    changes: list = field(default_factory=list)  # (previous, new) results whose score moved in this run
    # (student id, what the TA should know): inputs that could not be used as they were (a
    # renamed submission, an unreadable submission time) and outputs that could not be
    # written. Found again on every run until they are fixed.
    problems: list = field(default_factory=list)


@dataclass
class BatchOptions:
    jobs: int = 2  # local worker processes (a cluster scheduler brings its own)
    limits: dict = None  # over the assignment's [limits]: {"timeout": s, "memory_bytes": n}
    force: bool = False  # grade again what an earlier run graded
    seed: int = None  # None: the folder's (a resumed batch grades alike), else a new one
    unsafe_no_sandbox: bool = False
    submitted_at: dict = None  # {student: time}, for the late policy
    roster: dict = None  # {student: row}: LMS ids to student ids (runs/intake), and extensions
    pattern: str = None  # a regular expression for file names no known layout reads (runs/intake/layouts.py)
    max_notebook_mb: float = None  # the limit on a notebook without its outputs (default: notebook.py's)

    def __post_init__(self):
        if self.max_notebook_mb is not None and not 0 < self.max_notebook_mb < 2**20:
            raise CourseError(f"the notebook size limit is a number of MB above 0, not {self.max_notebook_mb}")


def grade_batch(assignment, paths, outputs=None, out_dir=None, scheduler=None, on_result=None, **options):
    """Grade `paths` (submissions of `assignment`, an `Assignment` of its course) into `outputs`
    (a list, or a running Recorder such as the service's; default: `standard_outputs`) in the graded folder `out_dir` (default: the course's
    graded/<assignment>/). `options`: see BatchOptions. Raises NoSandbox or PoisonedInterpreter,
    before any submission runs or anything is written, when grading must not happen."""
    from autograder.grading.scheduler import LocalScheduler
    from autograder.grading.selfcheck import verify
    from autograder.runs.identical import IdenticalAnswers

    options, started = BatchOptions(**options), time.perf_counter()
    late = _late_work(assignment, options)  # a bad policy stops here, before anything runs
    assignment.builds_on  # so does a bad [builds_on] table
    scheduler = scheduler or LocalScheduler(options.jobs)
    isolation = scheduler.require_sandbox(options.unsafe_no_sandbox)  # a cluster asks each worker
    verify(comparisons=False)  # the workers check the comparisons once they have torch
    folder = graded_folder(assignment, out_dir)
    plan = plan_batch(assignment, paths, options, isolation=isolation, folder=folder, late=late)  # as --dry-run says
    intake, todo, kept, stale = plan.intake, plan.todo, plan.kept, len(plan.again) if not options.force else 0
    folder.make()
    submissions = [s for s in intake.submissions if s.student_id not in plan.removed]
    folder.write_intake(intake.rows)
    if not isinstance(outputs, Recorder):
        outputs = Recorder(standard_outputs(assignment, folder) if outputs is None else outputs)
    recorder, outputs = outputs, outputs.outputs
    late.given(submissions)
    spec = _spec(assignment, folder, options, isolation, keep_notebook=recorder.needs_notebook)
    identical = IdenticalAnswers(assignment, spec, folder, read_source(assignment), read_release(assignment),
                                 use_cache=not options.force)
    clock = _Clock({})
    clock("checking earlier results")
    report = BatchReport(skipped=len(kept), regraded=stale, out_dir=folder.root, phases=clock.phases,
                         problems=[*intake.problems, *((s.student_id, s.renamed) for s in submissions if s.renamed),
                                   *late.unreadable(submissions)])
    record = _Recorder(recorder, late, submissions, report, on_result)
    if todo and hasattr(scheduler, "start"):
        scheduler.start(spec, len(todo))  # its workers and sandboxes warm up while this process reads
    for result in scheduler.grade(spec, _Counted(identical.to_run(todo), len(todo))):
        record.copies(identical.take_ready())
        copies = identical.copies_of(result)  # first: it also records the answers key in the result
        record(result)
        record.copies(copies)
        clock("grading the rest")
    record.copies(identical.take_ready())  # when nothing had to run
    record.copies(identical.unanswered(spec))
    record.kept(kept)  # after the workers started: the gradebook's thread must not be forked
    clock("stopping the workers")
    report.results = _every_result(folder, [r for r in [*report.graded, *report.late_updated]
                                            if r.student_id not in record.unrecorded])
    report.problems += _not_gradable(report.results, submissions)
    report.problems += broken_checks(report.results)  # a hidden check that broke: the instructor's to fix
    folder.record_wall_time(time.perf_counter() - started)
    # (read before finishing: finishing ends an output's run, and the service starts the next)
    report.changes = [change for output in outputs for change in getattr(output, "changes", [])]
    record.finish(report.results, clock)
    report.seconds = time.perf_counter() - started
    return report


@dataclass
class Plan:
    """What a run of `grade_batch` will do with what it is handed, worked out without grading or
    writing anything (`plan_batch`; `grade --dry-run` prints it): the students it grades (`todo`;
    of them, `again` have an earlier result of the same file made with other checks, settings or
    grader, or are graded again on --force), those whose current result it keeps (`kept`), and
    those a TA removed (`removed`). The intake's rows say it for each file."""
    intake: object
    todo: list = field(default_factory=list)  # Submission
    kept: list = field(default_factory=list)  # earlier results kept
    again: list = field(default_factory=list)  # student ids of `todo` graded again
    removed: list = field(default_factory=list)  # student ids left out: removed by a TA


def plan_batch(assignment, paths, options=None, out_dir=None, isolation="bubblewrap", unpack_to=None, folder=None,
               late=None):
    """The Plan of grading `paths` with `options` into `out_dir`, as `grade_batch` decides it; reads
    files, writes none (zips go to `unpack_to`, a dry run's scratch folder, when given)."""
    from autograder.runs.identical import IdenticalAnswers

    options = options if isinstance(options, BatchOptions) else BatchOptions(**(options or {}))
    late = late or _late_work(assignment, options)  # (the run's own: it remembers earlier results' times)
    intake = take_in(assignment, paths, options, unpack_to=unpack_to)
    folder = folder or graded_folder(assignment, out_dir)
    removed = folder.removed()
    submissions = _not_removed(intake, removed)
    spec = _spec(assignment, folder, options, isolation, keep_notebook=False, seed=0)  # the seed decides nothing here

    class Current:  # (read the source and release notebooks only where there is an earlier result to judge)
        judge = None

        def current(self, submission, earlier):
            if self.judge is None:
                self.judge = IdenticalAnswers(assignment, spec, folder, read_source(assignment),
                                              read_release(assignment), use_cache=not options.force)
            return self.judge.current(submission, earlier)

    todo, kept, again = _split(submissions, folder, Current(), late, options.force)
    plan = Plan(intake, todo, kept, again, sorted({s.student_id for s in intake.submissions} & set(removed)))
    kept_ids = {result.student_id for result in kept}
    for row in intake.rows:
        if row.outcome.startswith("graded") and row.student_id in kept_ids:
            row.outcome = "kept: graded before, and its result is current"
        elif row.outcome.startswith("graded") and row.student_id in again:
            row.outcome = ("graded again: --force" if options.force else
                           "graded again: its earlier result was made with other checks, settings or grader")
    return plan


def take_in(assignment, paths, options=None, unpack_to=None):
    """The Intake of `paths` (runs/intake): whose each file is, which are graded, and what a
    person must look at. Zips are unpacked into the course's downloaded/<assignment>/unpacked/,
    where a rerun finds the same files, or into `unpack_to` (a dry run's temporary folder).
    `options`: a BatchOptions (its roster and pattern)."""
    options = options or BatchOptions()
    unpack_to = unpack_to or assignment.course.root / "downloaded" / assignment.name / "unpacked"
    return discover(paths, assignment.name, roster=options.roster, pattern=options.pattern, unpack_to=unpack_to)


def _not_removed(intake, removed):
    """The intake's submissions but those of students a TA removed (runs/remove.py), whose rows say so."""
    for row in intake.rows:
        if row.student_id in removed and row.outcome.startswith("graded"):
            row.outcome = (f"not graded: {removed[row.student_id]} (`autograder remove ASSIGNMENT"
                           f" {row.student_id} --undo` grades them again)")
    return [s for s in intake.submissions if s.student_id not in removed]


def _not_gradable(results, submissions):
    """[(student, why)] for this run's students whose notebook could not be graded at all (not a
    notebook, damaged, too large): they have a 0 and a message, and someone should ask them for it."""
    handed_in = {s.student_id for s in submissions}
    return [(r.student_id, f"could not be graded ({r.notes[0] if r.notes else r.output}); it has 0 points"
                           " and a message asking for a new file")
            for r in results if r.status == INVALID and r.student_id in handed_in]


def _late_work(assignment, options):
    from autograder.runs.late import LateWork, assignment_policy

    return LateWork(assignment_policy(assignment), options.submitted_at, options.roster)


def _split(submissions, folder, identical, late, force):
    """(submissions to grade, [earlier results kept], the ids of those to grade that have an earlier
    result of the same file, not current or graded again on `force`).

    A result made with other checks, weights, settings, solutions or grader is graded again by
    default, not kept and named: a stale grade shown as current is the worst thing a grader can
    do (the TA has no reason to doubt it, the student no way to know), and identical answers
    are run once, so a regrade of a class costs a run per distinct answer (see identical.py).
    A result of another seed is kept (the folder's seed is the TA's choice; --force draws again)."""
    todo, kept, again = [], [], []
    for submission in submissions:
        earlier = _earlier_result(folder, submission)
        if earlier is not None:
            late.remember(earlier)  # the submission time it recorded, for the penalty now
            if not force and identical.current(submission, earlier):
                kept.append(earlier)
                continue
            again.append(submission.student_id)
        todo.append(submission)
    return todo, kept, again


class _Recorder:
    """Hands each result, as this batch knows it (late penalty, intake notes), to the recorder
    the moment it is graded. Whatever goes wrong with one student's output is that student's
    problem, said to the TA; the batch, and everyone else's result, goes on."""

    def __init__(self, recorder, late, submissions, report, on_result):
        self.recorder, self.late, self.report, self.on_result = recorder, late, report, on_result
        self.submissions = {s.student_id: s for s in submissions}  # what the intake knows of each student
        self.unrecorded = set()  # students whose result file could not be written: no output shows their grade

    def __call__(self, result, notebook=None, graded=True):
        """Record `result` (as graded, before the late policy) in every output; `graded`: False
        for an earlier run's result recorded again (see `kept`), which this run did not grade."""
        notebook = notebook if notebook is not None else result.graded_notebook
        result.graded_notebook = None  # never kept by the raw result identical answers copy from
        try:
            result = self.late.apply(result)  # a copy: the raw result stays as it is for identical answers
        except Exception as error:  # noqa: BLE001
            self.report.problems.append((result.student_id, f"the late policy could not be applied ({brief(error)})"))
        result = self._as_handed_in(result)
        if result.status != ERROR:  # a grader fault is retried next run
            result.graded_notebook = notebook
            self._add(result)
            result.graded_notebook = None  # written: a class's notebooks are not held to the end
        if not graded:
            self.report.late_updated.append(result)
            return
        self.report.graded.append(result)
        if self.on_result:
            self.on_result(result)

    def _as_handed_in(self, result):
        """`result` with what the intake knows of its student: their LMS identities, and notes on
        a renamed id or older uploads that were replaced. A copy when anything is added: never
        the raw result identical answers keep."""
        submission = self.submissions.get(result.student_id)
        if submission is None:
            return result
        notes = [note for note in (submission.renamed, replaced_note(submission), zip_note(submission))
                 if note and note not in result.notes]
        if not notes and (not submission.lms or result.lms == submission.lms):
            return result
        result = Result.from_json(result.to_json())
        result.lms = dict(submission.lms) or result.lms
        for note in notes:
            result.add_note(note)
        return result

    def kept(self, results):
        """Earlier runs' results this run keeps: each recorded again, in every output, where the
        late policy, the submission time or an extension now gives it another penalty."""
        for recorded in results:
            try:
                raw = self.late.refresh(recorded)
            except Exception as error:  # noqa: BLE001
                self.report.problems.append((recorded.student_id, f"the late policy could not be applied again"
                                                                  f" ({brief(error)}); its earlier penalty stands"))
                continue
            if raw is not None:
                self(raw, graded=False)

    def _add(self, result):
        recorded, problems = self.recorder.add(result)
        self.report.problems += problems
        if not recorded:
            self.unrecorded.add(result.student_id)

    def copies(self, copies):
        for result, notebook in copies:
            self(result, notebook)

    def finish(self, results, clock):
        self.report.problems += self.recorder.finish(results, clock)


def replaced_note(submission):
    """The note for a student who uploaded the same file more than once, or ""."""
    if not submission.replaced:
        return ""
    from autograder.untrusted import listed, visible

    return (f"you uploaded this notebook more than once: your newest upload, {visible(submission.path.name, 120)},"
            f" was graded, and the earlier {'ones' if len(submission.replaced) > 1 else 'one'}"
            f" ({listed(submission.replaced)}) not")


def zip_note(submission):
    """The note for a student whose notebook came out of the zip they handed in, or ""."""
    if not submission.from_zip:
        return ""
    from autograder.untrusted import visible

    return (f"your notebook was graded from inside the zip you handed in ({visible(submission.from_zip, 160)});"
            " handing in the .ipynb file itself works too")


def _spec(assignment, folder, options, isolation, keep_notebook, seed=None):
    from autograder.grading.submission import BatchSpec

    return BatchSpec(assignment=assignment.name, course=str(assignment.course.root),
                     seed=folder.seed(options.seed, options.force) if seed is None else seed,
                     limits={**assignment.limits, **(options.limits or {})}, isolation=isolation,
                     keep_notebook=keep_notebook, **_notebook_limit(options.max_notebook_mb))


def _notebook_limit(megabytes):
    return {} if megabytes is None else {"max_notebook_bytes": int(megabytes * 2**20)}


def _every_result(folder, graded):
    """Every finished result: the folder's (earlier runs' and, with result files, this run's),
    and this run's even where no output writes result files (Gradescope's)."""
    results = {result.student_id: result for result in folder.results()}
    results.update((result.student_id, result) for result in graded if result.finished)
    return sorted(results.values(), key=lambda result: result.student_id)


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


def _earlier_result(folder, submission):
    """The folder's finished result for this very file, or None."""
    try:
        submission.sha256 = sha256(submission.path)
    except OSError:
        return None
    return folder.earlier(submission.student_id, submission.sha256)
