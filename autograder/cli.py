"""`autograder` command line: build, release, validate, grade, demo; init and new for instructors.

Every command works on a course folder: --course DIR, else the nearest folder at
or above the current one that holds exercises/, else the course bundled with
this package.
"""
import argparse
import os
import sys
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

from autograder.course import Course, CourseError, write_atomically
from autograder.course.settings import LimitsSettings
from autograder.record import ERROR, GRADED
from autograder.untrusted import for_terminal as shown

console = Console(width=None if Console().is_terminal else 140)  # no cramped tables in logs


def _course(args):
    return Course.locate(args.course)


def _assignment(args):
    return _course(args).assignment(args.assignment)


def _chosen(args):
    """The assignments a command names, or all of the course's."""
    course = _course(args)
    chosen = [course.assignment(name) for name in args.assignments] if args.assignments else course.assignments()
    if not chosen:
        raise CourseError(f"the course {course.root} has no assignments yet: add one with `autograder new NAME`")
    return chosen


def cmd_build(args):
    from autograder.authoring.build import write_source

    for assignment in _chosen(args):
        console.print(f"wrote {write_source(assignment)}")


def cmd_release(args):
    from autograder.authoring.build import write_source
    from autograder.authoring.nbgrader_steps import generate_assignment

    for assignment in _chosen(args):
        write_source(assignment)
        console.print(f"released {generate_assignment(assignment)}")


def cmd_validate(args):
    from autograder.authoring.validate import release_if_new, validate

    assignment = _assignment(args)
    may_run_student_code(args.unsafe_no_sandbox)
    released = release_if_new(assignment)
    if released is not None:
        console.print(f"{args.assignment} had no release yet: released it first, as `autograder release"
                      f" {args.assignment}` does ({released}).", highlight=False)
    console.print(f"Grading the solutions, the release and the corpus of {args.assignment} ...")
    report = validate(assignment, seed=args.seed, jobs=args.jobs, out_dir=args.out,
                      unsafe_no_sandbox=args.unsafe_no_sandbox)
    _print_validation_table(args, report)
    _print_validation_problems(report)
    _print_release_warm_up(report.release_warm_up)
    if not report.clean:
        console.print("[red]Not clean.[/red] Each red line above is a check that misses a mistake, rejects a"
                      " correct answer, crashes, or gives feedback that does not name the mistake; a cell that"
                      " fails on the reference solutions; or a stale release; or the diagnoses are below the"
                      " assignment's floor.")
        return 1
    console.print(f"Clean ({report.seconds:.0f} s): the release is up to date, the solutions pass (visible"
                  " checks too), the release fails, every corpus mistake is caught (and named, where it was"
                  " written for the corpus), every alternative gets full marks, and the diagnoses are above"
                  " the assignment's floor.")
    return 0


def _print_validation_table(args, report):
    """validate's table: per graded cell, its checks and what they catch."""
    table = Table(title=f"Hidden checks of {args.assignment} (seed {args.seed})")
    for column in ("grade cell", "checks", "pass on solutions", "fail on stubs", "mistakes caught",
                   "alternatives accepted", "checks that caught no mistake"):
        table.add_column(column)
    for cell in report.cells.values():
        table.add_row(cell.grade_id, str(cell.checks), f"{cell.solutions_pass}/{cell.checks}",
                      f"{cell.stubs_fail}/{cell.checks}", f"{cell.caught}/{cell.mistakes}",
                      f"{cell.accepted}/{cell.alternatives}", ", ".join(cell.idle_checks) or "-")
    cells = report.cells.values()
    table.add_row("all", str(sum(c.checks for c in cells)), str(sum(c.solutions_pass for c in cells)),
                  str(sum(c.stubs_fail for c in cells)),
                  f"{sum(c.caught for c in cells)}/{sum(c.mistakes for c in cells)}",
                  f"{sum(c.accepted for c in cells)}/{sum(c.alternatives for c in cells)}", "")
    console.print(table)


def _print_validation_problems(report):
    """One red line per problem, then the error model's and the diagnoses' summaries."""
    from rich.markup import escape

    for name, problems in report.problems.items():
        for problem in problems:  # may quote a traceback or a check's name with [brackets]: never markup
            console.print(f"[red]{escape(name)}[/red]: {escape(problem)}", highlight=False)
    model = report.error_model
    if model is not None and model.mutants:
        console.print(f"Error model: {model.mutants} known mistakes, each seen by its exercise's probe and named as"
                      f" itself{'' if 'error model' not in report.problems else ' except as listed above'};"
                      f" {model.pairs_named} of {model.pairs} pairs that run to the end are named as both"
                      + (f" ({len(model.pairs_misnamed)} behave exactly like another known mistake)." if model.pairs_misnamed
                         else "."))
    if report.diagnoses:
        named = sum(not found for found in report.diagnoses.values())
        public = [name for name in report.diagnoses if name in report.from_public_code]
        console.print(f"Diagnoses: {named} of {len(report.diagnoses)} mistakes ({report.named:.0%}) named with"
                      f" nothing misleading (floor {report.diagnoses_min:.0%}); of the {len(public)} from public"
                      f" code, {sum(not report.diagnoses[name] for name in public)}."
                      + "".join(f" Held out from {label} (written before it): {done} of {total} ({done / total:.0%})."
                                for label, (done, total) in sorted(report.held_out_named().items()))
                      + (" The others read:" if named < len(report.diagnoses) else ""))
        for name, found in report.diagnoses.items():
            for problem in found:
                console.print(f"  [yellow]{name}[/yellow]: {problem}", highlight=False)
    repairs = report.repairs
    if repairs is not None and repairs.promising:
        held = repairs.lines - sum(map(len, repairs.contradicted.values()))
        untested = repairs.promising - len(repairs.tested)
        console.print(f"Repairs: {repairs.promising} mistakes get feedback that says a check fails because of another"
                      " mistake. Validate repaired those causes in the student's code and graded it again:"
                      f" {held} of {repairs.lines} such lines held"
                      + (f"; {untested} of the mistakes have lines it could not test (their cause is named in"
                         " other words than the error model's)" if untested else "")
                      + (". Still failing once repaired:" if repairs.contradicted else "."), highlight=False)
        for name, wrong in repairs.contradicted.items():
            console.print(f"  [yellow]{name}[/yellow]: {', '.join(wrong)}", highlight=False)


def _print_release_warm_up(what):
    """One line on the sandbox's warm-up on the release (see validate.release_warm_up)."""
    from rich.markup import escape

    what = escape(what)  # the sandbox's words: printed as they are, never read as markup
    if what.startswith("ok: "):
        console.print(f"Sandbox: warmed up on the untouched release ({what[4:]}), so no student pays"
                      " the first-call costs of its given cells.", highlight=False)
    elif what == "no release cells":
        console.print("Sandbox: no warm-up on the release (it has no code cells, or assignment.toml"
                      " says \\[sandbox] warm_up_on_release = false).", highlight=False)
    elif what.startswith("skipped: "):
        reason = what.removeprefix("skipped: ")
        hint = (" \\[sandbox] warm_up_seconds in assignment.toml allows it more time." if "took more than" in reason
                else " A release that leaves threads or processes running cannot be warmed up on safely."
                if "threads or processes" in reason else "")
        console.print(f"[yellow]Sandbox: no warm-up on the release[/yellow]: {reason}. Scores are the same, but"
                      " every student's process pays the first-call costs of the given cells (imports, first"
                      f" use of a library) again.{hint}", highlight=False)
    elif what:
        console.print(f"[yellow]Sandbox: whether it warmed up on the release is not known[/yellow]"
                      f" ({what.removeprefix('unknown: ')}).", highlight=False)


def cmd_demo(args):
    """Build and release, then grade the example submissions with `autograder grade`, in the
    course's demo/ copy: the example students never join the real class."""
    from autograder.runs.batch import grade_batch
    from autograder.runs.recording import graded_folder, standard_outputs
    from autograder.authoring.build import write_source
    from autograder.authoring.examples import demo_course, write_examples
    from autograder.authoring.nbgrader_steps import generate_assignment

    course = _course(args)
    started = time.perf_counter()
    may_run_student_code(args.unsafe_no_sandbox)  # before anything is built or written
    console.print(f"Course: {course.root}")
    for assignment in course.assignments():
        write_source(assignment)
        console.print(f"Releasing {assignment.name} with nbgrader generate_assignment ...")
        generate_assignment(assignment)
    demo = demo_course(course)
    for assignment in demo.assignments():
        students = write_examples(assignment, demo.submitted)
        console.print(f"Grading {len(students)} example submissions of {assignment.name} in sandboxes ...")
        folder = graded_folder(assignment)
        report = grade_batch(assignment, [demo.submitted], standard_outputs(assignment, folder), out_dir=folder,
                             force=True, jobs=os.cpu_count() or 1, unsafe_no_sandbox=args.unsafe_no_sandbox)
        print_results(report.results, assignment.name)
        console.print(f"Class report: {folder.report}; feedback pages: {folder.feedback}")
    console.print(f"Done in {time.perf_counter() - started:.1f} s. The example students are graded in {demo.root}, a"
                  f" copy of the course, never in its own gradebook: results in {demo.root / 'graded'}; gradebook"
                  f" {demo.gradebook} (try `cd {demo.root} && nbgrader export`).")
    return 0


def cmd_grade(args):
    """Grade submissions in sandboxes; results, grades.csv and the gradebook."""
    from autograder.outputs.lms import RosterError, read_roster
    from autograder.runs.batch import grade_batch
    from autograder.runs.recording import graded_folder, standard_outputs
    from autograder.runs.late import LateError, read_times

    assignment = _assignment(args)
    try:
        times = read_times(args.submitted_at) if args.submitted_at else None
        roster = read_roster(args.roster) if args.roster else None
    except (LateError, RosterError) as error:
        console.print(f"[red]autograder grade: {shown(error, None)}[/red]", highlight=False)
        return 2
    if args.dry_run:
        return _print_intake(assignment, args, roster)
    scheduler = None
    if args.cluster:
        scheduler = _dask_scheduler(args)  # each worker is asked whether it may run student code
    else:
        may_run_student_code(args.unsafe_no_sandbox)
    limits = _limits(args)
    progress = _Progress()
    folder = graded_folder(assignment, args.out or (Path(args.scratch) / "graded" / assignment.name if args.scratch
                                                    else None))
    try:
        report = grade_batch(assignment, args.paths, standard_outputs(assignment, folder, args.scratch), out_dir=folder,
                             jobs=args.jobs or os.cpu_count() or 1, limits=limits, force=args.force,
                             seed=args.seed, on_result=progress.advance, unsafe_no_sandbox=args.unsafe_no_sandbox,
                             submitted_at=times, roster=roster, scheduler=scheduler,
                             max_notebook_mb=args.max_notebook_mb, pattern=args.pattern)
    finally:
        progress.stop()
        if scheduler is not None:
            scheduler.close()
    _print_batch(report, args, folder)
    return 1 if report.problems or any(r.status == ERROR for r in report.graded) else 0


def _limits(args):
    """The limits `grade` gives over the assignment's, from --timeout and --memory-mb."""
    return LimitsSettings(timeout=args.timeout or None, memory_mb=args.memory_mb or None).sandbox_limits()


def _print_intake(assignment, args, roster):
    """`grade --dry-run`: whose each file is and what the run would do with it (grade, grade again,
    keep, leave out), decided as the run decides it (`plan_batch`); nothing runs or is written."""
    import tempfile

    from autograder.grading.sandbox import NoSandbox, require_sandbox
    from autograder.runs.batch import BatchOptions, plan_batch
    from autograder.runs.recording import graded_folder

    try:
        isolation = require_sandbox(args.unsafe_no_sandbox)
    except NoSandbox as refusal:
        console.print(f"[red]The run would refuse to grade: {shown(refusal, None)}[/red]", highlight=False)
        isolation = "none"
    folder = graded_folder(assignment, args.out or (Path(args.scratch) / "graded" / assignment.name if args.scratch
                                                    else None))
    options = BatchOptions(roster=roster, pattern=args.pattern, force=args.force, limits=_limits(args),
                           max_notebook_mb=args.max_notebook_mb)
    with tempfile.TemporaryDirectory(prefix="autograder-dry-run-") as scratch:  # zips are unpacked, then gone
        plan = plan_batch(assignment, args.paths, options, isolation=isolation, unpack_to=scratch, folder=folder)
    intake = plan.intake
    table = Table(title=f"What `autograder grade {shown(args.assignment)}` would do (nothing was run or written)")
    for column in ("student", "file", "from", "LMS id", "LMS name", "what happens"):
        table.add_column(column)
    for row in sorted(intake.rows, key=lambda row: (row.student_id == "", row.student_id, row.file)):
        table.add_row(shown(row.student_id) or "-", shown(row.file, 120), row.layout or "-", shown(row.lms_id) or "-",
                      shown(row.name, 60) or "-", shown(row.outcome, 300))
    console.print(table)
    console.print(dry_run_summary(plan), highlight=False)
    print_problems(intake.problems, rest="a dry run: nothing was graded")
    return 1 if intake.problems else 0


def dry_run_summary(plan):
    """One line: how many students the run would grade (again), keep and leave out, and who."""
    from autograder.untrusted import listed

    def who(ids):
        return f" ({listed(sorted(ids), 8)})" if ids else ""

    fresh = [s.student_id for s in plan.todo if s.student_id not in plan.again]
    return (f"Would grade {len(fresh)}{who(fresh)}, grade again {len(plan.again)}{who(plan.again)}, keep"
            f" {len(plan.kept)} already graded{who([r.student_id for r in plan.kept])}, and leave out"
            f" {len(plan.removed)} removed{who(plan.removed)}.")


class _Progress:
    """The progress bar, started with the first result: the workers are forked by then, with
    no display thread around."""

    def __init__(self):
        self.bar, self.task = _progress(console.is_terminal), None

    def advance(self, result):
        if self.task is None:
            self.bar.start()
            self.task = self.bar.add_task("grading", total=None)
        self.bar.update(self.task, advance=1, description=shown(result.student_id, 60))

    def stop(self):
        self.bar.stop()


def _print_batch(report, args, folder):
    print_results(report.results, args.assignment)
    for result in report.graded:
        if result.status == ERROR:
            console.print(f"[red]{shown(result.student_id)} not graded[/red] (will be retried): "
                          + shown("; ".join(result.notes), 1000), highlight=False)
    graded = [r for r in report.graded if r.status == GRADED]
    failed = len(report.graded) - len(graded)
    mean = sum(r.score for r in report.results) / len(report.results) if report.results else 0.0
    reused = sum(r.reused for r in graded)
    console.print(f"graded {len(graded)}"
                  + (f" ({reused} with answers identical to another submission's, graded once)" if reused else "")
                  + f", failed {failed}, skipped {report.skipped} (already graded), "
                  + (f"regraded {report.regraded} (their earlier results were made with other checks,"
                     " settings or grader), " if report.regraded else "")
                  + (f"late penalty updated for {len(report.late_updated)} skipped (the late policy,"
                     " a submission time or an extension changed), " if report.late_updated else "")
                  + f"mean score {mean:.2f}, wall time {report.seconds:.1f} s; results in {folder.root}")
    if report.changes:
        console.print(f"{len(report.changes)} students' scores changed since their last grading: see"
                      f" {folder.changes_csv} (the previous results are in {folder.root / 'history'})")
    if any(r.unsandboxed for r in report.graded):
        console.print("[bold red]These results were graded WITHOUT a sandbox (--unsafe-no-sandbox);"
                      " grades.csv, the report and the feedback pages say so.[/bold red]")
    console.print(f"class report: {folder.report}; feedback pages: {folder.feedback}")
    if args.verbose:
        console.print("time spent: " + ", ".join(f"{name} {seconds:.1f} s" for name, seconds in report.phases.items()))
    print_problems(report.problems)


def print_problems(problems, rest="everything else was graded and recorded"):
    """What a TA must look at (a file nobody's, a renamed submission, an unreadable submission
    time, a result that could not be recorded), one line each, after everything else."""
    if not problems:
        return
    count = "1 problem needs" if len(problems) == 1 else f"{len(problems)} problems need"
    console.print(f"[bold yellow]{count} your attention[/bold yellow] ({rest}):", highlight=False)
    for student, problem in problems:
        console.print(f"  [yellow]{shown(student) or 'the batch'}[/yellow]: {shown(problem, 600)}", highlight=False)


def _dask_scheduler(args):
    from autograder.grading.cluster import ClusterError, DaskScheduler

    tls = [args.tls_ca_file, args.tls_cert, args.tls_key]
    security = None
    if any(tls):
        if not all(tls):
            raise ClusterError("TLS needs all three of --tls-ca-file, --tls-cert and --tls-key")
        from distributed.security import Security

        security = Security(tls_ca_file=args.tls_ca_file, tls_client_cert=args.tls_cert,
                            tls_client_key=args.tls_key, require_encryption=True)
    return DaskScheduler(args.cluster, security=security, say=lambda text: console.print(text, highlight=False),
                         unsafe_no_sandbox=args.unsafe_no_sandbox)


def _graded(args, out_dir):
    """(assignment, its GradedFolder, its results); says how to get results when there are none."""
    from autograder.runs.recording import graded_folder

    assignment = _assignment(args)
    folder = graded_folder(assignment, out_dir)
    results = folder.results()
    if not results:
        console.print(f"[red]No results in {folder.root}[/red]: grade first with `autograder grade {args.assignment} PATH`.")
    return assignment, folder, results


def _pages(assignment, folder, feedback=True):
    """The class report, and each student's feedback page unless `feedback` is false."""
    from autograder.outputs.feedback import FeedbackPages, layout_of
    from autograder.runs.recording import class_report, read_source

    source = read_source(assignment)
    return [*([FeedbackPages(folder, layout_of(source))] if feedback else []), class_report(assignment, folder, source)]


def cmd_feedback(args):
    """(Re)write feedback/<student>.html and report.html from the results of earlier runs."""
    from autograder.runs.recording import write_outputs

    assignment, folder, results = _graded(args, args.out)
    if not results:
        return 1
    only_report = args.command == "report"
    problems = write_outputs(_pages(assignment, folder, feedback=not only_report), results)
    if not only_report:
        console.print(f"wrote {len(results)} feedback pages to {folder.feedback}")
    console.print(f"wrote the class report {folder.report}")
    print_problems(problems)
    return 1 if problems else 0


def cmd_gradescope(args):
    """Write the Gradescope autograder zip for an assignment."""
    from autograder.runs.gradescope import build_bundle

    assignment = _assignment(args)
    target = build_bundle(assignment, args.out or assignment.course.root / "dist" / f"{args.assignment}-gradescope.zip",
                          unsafe_no_sandbox=args.unsafe_no_sandbox)
    console.print(f"wrote {target}: upload it as the assignment's autograder on Gradescope"
                  " (Configure Autograder, zip file upload). Students submit their notebook.")
    return 0


def cmd_export(args):
    """The final grade file: autograded + written (formgrader) + extra credit - late, for an
    assignment or the course, as a plain CSV or Canvas's or Moodle's import."""
    from autograder.outputs import final, lms
    from autograder.runs.finalgrades import NO_NOTEBOOK, NOTHING, REMOVED, export

    try:
        roster = lms.read_roster(args.roster) if args.roster else None
        report = export(_course(args), args.assignments, args.format, roster=roster, key=args.key, out=args.out,
                        results_dir=args.results, column=args.column)
    except lms.RosterError as error:
        console.print(f"[red]autograder export: {shown(error, 2000)}[/red]", highlight=False)
        return 2
    graded = report.students(final.GRADED) + report.students(final.NOT_GRADABLE)
    what = "the final grades" if args.format == "csv" else lms.BY_NAME[args.format].title
    console.print(f"wrote {report.target}: {what} of {', '.join(a.name for a in report.assignments)}"
                  f" (autograded + written answers from formgrader + extra credit - late penalty),"
                  f" {len(graded)} {'student' if len(graded) == 1 else 'students'} with a final grade", highlight=False)
    export_found = report.export or lms.Export("")
    waiting = report.students(final.NEEDS_GRADING)
    lines = [("written answers still to grade in formgrader (no final grade yet)", waiting),
             ("not graded yet because of a grader error: run `autograder grade` again", report.students(final.NOT_YET)),
             ("could not be graded (not a notebook, or damaged: 0 points, and their page asks for a new file)",
              report.students(final.NOT_GRADABLE)),
             ("on the roster with nothing handed in (left empty)", report.without_grade(NOTHING)),
             ("handed in no notebook (left empty; ask them for the .ipynb)", report.without_grade(NO_NOTEBOOK)),
             ("removed (left empty)", report.without_grade(REMOVED)),
             ("graded but not on the roster (not in the file)", export_found.not_on_roster),
             ("late penalty differs under the current late policy or roster: run `autograder grade` again",
              [f"{student} ({name})" for name, student in report.stale_penalties])]
    for label, students in lines:
        if students:
            joined = ("; " if any(": " in student for student in students) else ", ").join(students)  # with reasons
            console.print(f"[yellow]{len(students)} {label}:[/yellow] {shown(joined, 2000)}",
                          highlight=False)
    for name in report.empty:
        console.print(f"[yellow]{name} has no results yet[/yellow]: grade it with `autograder grade {name} PATH`.",
                      highlight=False)
    unfinished = waiting or report.students(final.NOT_YET) or report.stale_penalties or report.empty
    return 1 if unfinished or export_found.not_on_roster else 0


def cmd_remove(args):
    """Take students (a test folder, a stray file, a dropped student) out of an assignment's grading."""
    from autograder.runs.remove import put_back, remove

    assignment = _assignment(args)
    if args.undo:
        back = put_back(assignment, args.students, args.out)
        for student in back:
            console.print(f"{shown(student)}: will be graded again by the next `autograder grade`", highlight=False)
        missing = [s for s in args.students if s not in back]
        for student in missing:
            console.print(f"[yellow]{shown(student)}[/yellow]: was not removed", highlight=False)
        return 1 if missing else 0
    done, problems = remove(assignment, args.students, force=args.force, results_dir=args.out)
    for removal in done:
        if removal.problem:
            problems.append((removal.student, removal.problem))
        else:
            console.print(f"{shown(removal.student)}: " + shown("; ".join(removal.done), 1000)
                          + "; the next runs leave them out", highlight=False)
    print_problems(problems, rest="the others were removed")
    return 1 if problems else 0


def cmd_similarity(args):
    """Rank pairs of students by similar answers and shared wrong results (evidence, not a verdict)."""
    from autograder.runs.recording import read_release, write_outputs
    from autograder.runs.similarity import write_report

    assignment, folder, results = _graded(args, args.results)
    if not results:
        return 1
    import importlib.util

    if importlib.util.find_spec("copydetect") is None:
        console.print("[red]autograder similarity needs copydetect[/red]: pip install copydetect"
                      " (or this package's `similarity` extra).")
        return 2
    table, page, pairs, unreadable = write_report(folder, assignment.title, results, read_release(assignment))
    print_problems(write_outputs(_pages(assignment, folder, feedback=False), results))  # the report's section
    console.print(f"{len(pairs)} pairs share something rare; wrote {page} and {table} (evidence for a person to"
                  " weigh, never a penalty)")
    for pair in pairs[:5]:
        console.print(f"  {shown(pair.a)} and {shown(pair.b)}: code {pair.code:.2f}, shared wrong results"
                      f" {pair.wrong:.2f}")
    if unreadable:
        console.print(f"[yellow]{len(unreadable)} left out: their notebook is no longer where it was graded"
                      f" from:[/yellow] {shown(', '.join(unreadable), 2000)}", highlight=False)
    return 0


def cmd_serve(args):
    """Grade notebooks as students submit them: web pages and a JSON API (service/app.py)."""
    import importlib.util

    if any(importlib.util.find_spec(name) is None for name in ("starlette", "uvicorn", "multipart")):
        console.print("[red]autograder serve needs the service extra[/red]: pip install -e \".[service]\""
                      " (Starlette, uvicorn and python-multipart).", highlight=False)
        return 2
    import uvicorn

    from autograder.service import limits
    from autograder.grading.sandbox import require_sandbox
    from autograder.outputs.lms import RosterError, read_roster
    from autograder.service.app import make_app
    from autograder.service.core import Service

    course = _course(args)
    if args.demo:
        course, links = _demo_service_course(course, args)
    chosen = [course.assignment(name) for name in args.assignments] if args.assignments else course.assignments()
    unreleased = [a.name for a in chosen if not a.release_notebook.is_file()]
    if unreleased:
        raise CourseError(f"release {', '.join(unreleased)} first (`autograder release`): the service grades"
                          " against the release")
    try:
        roster = read_roster(args.roster) if args.roster else None
    except RosterError as error:
        console.print(f"[red]autograder serve: {shown(error, None)}[/red]", highlight=False)
        return 2
    cluster = None
    if args.cluster:
        cluster = _dask_scheduler(args)
        isolation = cluster.require_sandbox(args.unsafe_no_sandbox)  # each worker is asked
    else:
        may_run_student_code(args.unsafe_no_sandbox)
        isolation = require_sandbox(args.unsafe_no_sandbox)
    service = Service(course, chosen, jobs=args.jobs or os.cpu_count() or 1, roster=roster, isolation=isolation,
                      cluster=cluster).start()
    base = f"http://{args.host}:{args.port}" if not args.uds else f"http://unix:{args.uds}:"
    console.print(f"Grading {', '.join(a.name for a in chosen)} on submit at {base} (course {course.root});"
                  " Ctrl-C stops it, and whatever is queued is graded when it starts again.", highlight=False)
    if args.demo:
        for student, token in links:
            console.print(f"  {student}: {base}/login/{token}", highlight=False)
    before, after = limits.raise_descriptor_limit()
    if after < 4096:
        console.print(f"Note: this process may open {after} files (raised from {before}); each connection takes one."
                      " Run it behind nginx (deploy/nginx/, docs/service.md) or raise LimitNOFILE.", style="yellow",
                      highlight=False)
    where = {"uds": args.uds} if args.uds else {"host": args.host, "port": args.port}
    try:
        uvicorn.run(make_app(service, secure_cookies=args.secure_cookies), **where, log_level="warning",
                    proxy_headers=bool(args.forwarded_allow_ips), forwarded_allow_ips=args.forwarded_allow_ips or None,
                    limit_concurrency=args.limit_concurrency, timeout_keep_alive=limits.KEEP_ALIVE,
                    log_config=limits.log_config())
    finally:
        service.close()
    return 0


def _demo_service_course(course, args):
    """`serve --demo`: the course's demo copy (as `autograder demo` makes it), with a token for each
    example student and a TA; returns (the demo course, [(who, token)])."""
    from autograder.authoring.examples import DEMO, DEMO_MARK, demo_course, examples, give_demo_due_date
    from autograder.course import Course
    from autograder.service.store import TA, Store

    demo = Course(course.root / DEMO) if (course.root / DEMO / DEMO_MARK).is_file() else demo_course(course)
    store = Store(demo.root / "service" / "service.db")
    links = []
    for assignment in demo.assignments():
        if args.assignments and assignment.name not in args.assignments:
            continue
        due = give_demo_due_date(assignment)
        if due:
            console.print(f"{assignment.name} hides checks until its due date: the demo's copy is due"
                          f" {due:%Y-%m-%d %H:%M} UTC, so its pages are those students see before it.",
                          highlight=False)
        for student, role in [*((s, "student") for s in examples(assignment)), ("ta", TA)]:
            store.revoke(assignment.name, student)  # the last demo's links stop working: one set at a time
            links.append((f"{'a TA' if role == TA else student} ({assignment.name})",
                          store.issue(student, assignment.name, role)))
    return demo, links


def cmd_tokens(args):
    """Issue, list and revoke the tokens students (and TAs) use with `autograder serve`: for one
    assignment, or without one, a single token per student for every assignment of the course."""
    import csv
    import io

    from autograder.outputs.lms import RosterError, read_roster
    from autograder.service.store import COURSE, TA, Store

    course = _course(args)
    name = course.assignment(args.assignment).name if args.assignment else COURSE
    where = name if args.assignment else "the course (every assignment)"
    store = Store(course.root / "service" / "service.db")
    for student in args.revoke or []:
        count = store.revoke(name, student)
        console.print(f"{shown(student)}: {count} token(s) revoked" if count else
                      f"[yellow]{shown(student)} has no token for {where}[/yellow]", highlight=False)
    students = []
    if args.roster:
        try:
            students = list(read_roster(args.roster))
        except RosterError as error:
            console.print(f"[red]autograder tokens: {shown(error, None)}[/red]", highlight=False)
            return 2
    active = {row["student_id"] for row in store.active_tokens(name) if row["assignment"] == name}
    issued, kept = [], []
    for student, role in [*((s, "student") for s in students), *((t, TA) for t in args.ta or [])]:
        if student in active and not args.new:
            kept.append(student)
            continue
        if args.new:
            store.revoke(name, student)
        issued.append((student, store.issue(student, name, role)))
    if issued:
        if not args.out:
            raise CourseError("give --out FILE: the new tokens are written there (and shown nowhere else)")
        handle = io.StringIO(newline="")
        writer = csv.writer(handle)
        writer.writerow(["student_id", "token", "link"])
        base = (args.url or "https://YOUR-SERVICE").rstrip("/")
        for student, token in issued:
            writer.writerow([student, token, f"{base}/login/{token}"])
        out = write_atomically(Path(args.out), handle.getvalue(), mode=0o600)  # never readable by others
        console.print(f"wrote {len(issued)} new tokens for {where} to {out} (readable by you alone: each is a"
                      " student's password, send each only to its student)", highlight=False)
    if kept:
        console.print(f"{len(kept)} already had a token (kept; --new replaces them): {shown(', '.join(kept), 600)}",
                      highlight=False)
    if args.list:
        for row in store.active_tokens(name):
            scope = "every assignment" if row["assignment"] == COURSE else row["assignment"]
            console.print(f"  {shown(row['student_id'])} ({row['role']}, {scope}), issued {row['created_at'][:16]}",
                          highlight=False)
    return 0


def cmd_prune(args):
    """Delete the uploads of finished attempts that do not count (service/prune.py)."""
    from autograder.service.prune import prune

    assignment = _assignment(args)
    root = assignment.course.root / "service"
    if not (root / "service.db").exists():
        console.print(f"[red]autograder prune: no service has run in {shown(str(assignment.course.root))}"
                      " (no service/service.db): nothing to prune[/red]", highlight=False)
        return 2
    found = prune(root, assignment.name, args.older_than, args.dry_run)
    verb = "would delete" if args.dry_run else "deleted"
    console.print(f"{assignment.name}: {verb} {found.files} uploads of attempts that do not count"
                  f" ({found.bytes / 2**20:.1f} MB); kept {found.kept} (the attempts that count, those not"
                  " graded yet" + (f", those from the last {args.older_than:g} days" if args.older_than else "") + ")",
                  highlight=False)
    for path, why in found.problems:
        console.print(f"[yellow]  {shown(path, 300)}: {shown(why, 300)}[/yellow]", highlight=False)
    return 1 if found.problems else 0


def may_run_student_code(unsafe_no_sandbox):
    """Refuse (NoSandbox, PoisonedInterpreter) before anything runs; warn loudly when unsafe."""
    from autograder.grading.sandbox import require_sandbox, unsafe_warning
    from autograder.grading.selfcheck import verify

    require_sandbox(unsafe_no_sandbox)
    verify(comparisons=False)
    warning = unsafe_warning()
    if warning:
        console.print(f"[bold red]{warning}[/bold red]")
    memory = memory_bound_warning()
    if memory:
        console.print(memory, style="yellow", markup=False)


def memory_bound_warning():
    """Where no cgroup per submission can be made, or no CPU bound: what goes unbounded, and why
    (else None)."""
    from autograder.grading import cgroups

    notes = cgroups.bound_notes()
    return "\n".join(f"Note: {note}" for note in notes) if notes else None


def _add_unsafe_flag(parser):
    parser.add_argument("--unsafe-no-sandbox", action="store_true",
                        help="without bubblewrap, run student code as a plain process (as another user when"
                             " run as root) instead of refusing; every result says it was graded this way")


def cmd_init(args):
    """An empty course folder, ready for `autograder new`."""
    from autograder.authoring.scaffold import init_course

    course = init_course(args.folder)
    console.print(f"created the course {course.root}; add an assignment with"
                  f" `autograder new NAME --course {course.root}` (or from inside the folder)")
    return 0


def cmd_new(args):
    """A working assignment: one exercise, its solution, a check, a corpus mistake, two examples."""
    from autograder.authoring.scaffold import new_assignment

    assignment = new_assignment(_course(args), args.name, args.title)
    console.print(f"created {assignment.folder} and {assignment.solutions}. Next: `autograder release"
                  f" {assignment.name}`, then `autograder validate {assignment.name}`.")
    return 0


def cmd_trust(args):
    """Record this machine's own .pth start-up files (run on a fresh machine, as setup.sh does)."""
    from autograder.grading.selfcheck import trust_present_pth_files, trusted_list

    found = trust_present_pth_files()
    for path in found:
        console.print(f"trusted as it is now: {path}")
    console.print(f"{len(found)} start-up file(s) recorded in {trusted_list()}" if found
                  else "no untrusted .pth start-up files here")
    return 0


def _progress(enabled):
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    return Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                    TimeElapsedColumn(), console=console, disable=not enabled, transient=True)


def print_results(results, assignment=""):
    scores = {}
    for result in results:
        scores[result.student_id] = {**result.scores, "total": result.score}
    print_grades(scores, title=f"Grades{' for ' + assignment if assignment else ''} (autograded cells;"
                               " written answers are graded in formgrader)")
    problems = [(r.student_id, note) for r in results for note in r.notes]
    for student, note in problems:
        console.print(f"[yellow]{shown(student)}[/yellow]: {shown(note, 600)}", highlight=False)


def print_grades(scores, title="Grades (- : a concept answer waiting for manual grading)"):
    cells = sorted({name for row in scores.values() for name in row} - {"total"},
                   key=lambda n: (not n.startswith("ex"), n))
    table = Table(title=shown(title))
    table.add_column("student")
    for cell in cells:
        table.add_column(shown(cell, 60), justify="right")
    table.add_column("total", justify="right")
    for student, row in sorted(scores.items()):
        table.add_row(shown(student), *[_fmt(row.get(c)) for c in cells], _fmt(row["total"]))
    console.print(table)


def _fmt(value):
    return "-" if value is None else f"{value:g}"


def main(argv=None):
    args = parser().parse_args(argv)
    from autograder.grading.sandbox import NoSandbox
    from autograder.grading.selfcheck import PoisonedInterpreter

    try:
        return args.func(args) or 0
    except CourseError as error:
        console.print(f"[red]autograder {args.command}: {shown(error, None, newlines=True)}[/red]", highlight=False)
        return 2
    except (NoSandbox, PoisonedInterpreter) as refusal:  # nothing ran; say why, in words
        console.print(f"[bold red]autograder {args.command}: {shown(refusal, None, newlines=True)}[/bold red]",
                      highlight=False)
        return 2
    except Exception as error:  # a clear one-line message, not a traceback
        console.print(f"[red]autograder {args.command} failed:[/red] {shown(error, 2000, newlines=True)}")
        return 1




def parser():
    """Every command and its options (each group of commands in a function of its own)."""
    parser = argparse.ArgumentParser(prog="autograder", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    for add in (_instructor_commands, _grade_command, _results_commands, _service_commands, _course_commands):
        add(sub)
    for command in sub.choices.values():
        command.add_argument("--course", help="the course folder (default: the nearest folder at or above this"
                                              " one with exercises/, else the course bundled with this package)")
    return parser


def _instructor_commands(sub):
    p = sub.add_parser("build", help="exercises/ + solutions/ -> source/ notebooks")
    p.add_argument("assignments", nargs="*")
    p.set_defaults(func=cmd_build)
    p = sub.add_parser("release", help="build, then nbgrader generate_assignment -> release/")
    p.add_argument("assignments", nargs="*")
    p.set_defaults(func=cmd_release)
    p = sub.add_parser("validate", help="grade solutions, stubs and the mistakes corpus; report what the checks catch")
    p.add_argument("assignment")
    p.add_argument("--seed", type=int, default=0, help="input seed (default 0)")
    p.add_argument("--jobs", type=int, default=0, help="parallel workers (default: number of cores)")
    p.add_argument("--out", help="keep the result files in this folder")
    _add_unsafe_flag(p)
    p.set_defaults(func=cmd_validate)
    p = sub.add_parser("demo", help="release, grade the example submissions in sandboxes, print grades")
    _add_unsafe_flag(p)
    p.set_defaults(func=cmd_demo)


def _grade_command(sub):
    p = sub.add_parser("grade", help="grade submitted notebooks in sandboxes (trusted, parallel)")
    p.add_argument("assignment")
    p.add_argument("paths", nargs="+", metavar="PATH",
                   help="notebooks, folders or zips: nbgrader's submitted/ tree, a Canvas or Moodle download"
                        " (zipped or unpacked), or a folder of <student id>.ipynb")
    p.add_argument("--out", help="results folder (default: COURSE/graded/ASSIGNMENT)")
    p.add_argument("--scratch", metavar="DIR",
                   help="a trial run: results, nbgrader gradebook and autograded notebooks all go under DIR, never"
                        " into the course's (formgrader and `nbgrader export` do not see it)")
    p.add_argument("--jobs", type=int, default=0, help="parallel workers (default: number of cores)")
    p.add_argument("--timeout", type=float, default=0,
                   help="seconds per submission (default: the assignment's, else 120)")
    p.add_argument("--memory-mb", type=int, default=0,
                   help="memory per submission on top of the warm interpreter (default: the assignment's, else 4096)")
    p.add_argument("--force", action="store_true", help="grade again what is already graded")
    p.add_argument("--seed", type=int, help="input seed (default: random, kept for the batch)")
    p.add_argument("--max-notebook-mb", type=float, metavar="MB",
                   help="largest notebook graded, counted without its outputs, which are never used"
                        " (default: 20; a file over 512 MB or this limit is not read at all)")
    p.add_argument("--verbose", action="store_true", help="also print where the time went")
    p.add_argument("--submitted-at", metavar="FILE",
                   help="CSV of student_id,submitted_at for the late policy (default: nbgrader's timestamp.txt)")
    p.add_argument("--roster", metavar="FILE",
                   help="roster CSV: maps Canvas user ids (canvas_id) and Moodle names (name) to student ids, and"
                        " its extension_hours column grants extensions")
    p.add_argument("--pattern", metavar="REGEX",
                   help="read other file names with this regular expression, as nbgrader's FileNameCollector does:"
                        " (?P<student_id>...) says whose a file is; (?P<timestamp>...) when it was handed in")
    p.add_argument("--dry-run", action="store_true",
                   help="only show whose each file is and what would be graded, then stop (nothing runs)")
    p.add_argument("--cluster", metavar="ADDRESS",
                   help="grade on a Dask cluster: a scheduler's address (tcp://host:8786, tls://...) or local:N"
                        " for N local worker processes (needs the [cluster] extra)")
    p.add_argument("--tls-ca-file", help="with --cluster tls://...: the certificate authority's file")
    p.add_argument("--tls-cert", help="with --cluster tls://...: this client's certificate")
    p.add_argument("--tls-key", help="with --cluster tls://...: this client's private key")
    _add_unsafe_flag(p)
    p.set_defaults(func=cmd_grade)


def _results_commands(sub):
    from autograder.outputs.lms import BY_NAME, formats  # each LMS's format and --key choices (57 ms)

    for name, text in (("feedback", "write each student's feedback page and the class report from graded results"),
                       ("report", "write only the class report (report.html) from graded results")):
        p = sub.add_parser(name, help=text)
        p.add_argument("assignment")
        p.add_argument("--out", help="results folder (default: COURSE/graded/ASSIGNMENT)")
        p.set_defaults(func=cmd_feedback)
    p = sub.add_parser("gradescope", help="write a Gradescope autograder zip (setup.sh, run_autograder)")
    p.add_argument("assignment")
    p.add_argument("--out", help="zip file to write (default: dist/ASSIGNMENT-gradescope.zip)")
    p.add_argument("--unsafe-no-sandbox", action="store_true",
                   help="let the bundle grade without bubblewrap where Gradescope's image cannot run it"
                        " (student code then runs as a separate user, not in a sandbox)")
    p.set_defaults(func=cmd_gradescope)
    p = sub.add_parser("export", help="the final grade file (autograded + formgrader's points - late) as a CSV, or"
                                      " Canvas's or Moodle's import; for assignments or the course")
    p.add_argument("format", choices=formats())
    p.add_argument("assignments", nargs="*", metavar="ASSIGNMENT",
                   help="the assignments in the file (default: every assignment of the course, a column each)")
    p.add_argument("--roster", help="CSV mapping student_id to the LMS's identities (see docs/tas.md)")
    p.add_argument("--out", help="file to write (default: RESULTS/FORMAT-ASSIGNMENT.csv for one assignment,"
                                 " COURSE/graded/FORMAT-course.csv for the course; FORMAT csv writes final-)")
    p.add_argument("--results", help="one assignment's results folder (default: COURSE/graded/ASSIGNMENT)")
    p.add_argument("--column", help="one assignment's grade column name (default: the assignment's title)")
    p.add_argument("--key", choices=[key for lms in BY_NAME.values() for key in lms.keys],
                   help="Moodle: match students by ID number (the default with a roster), email, or the"
                        " participant numbers of its download (the grading worksheet; the default without a roster"
                        " when every notebook came from a Moodle download)")
    p.set_defaults(func=cmd_export)
    p = sub.add_parser("remove", help="take students (a test folder, a stray file) out of an assignment's results,"
                                      " gradebook and grade files; the next runs leave them out")
    p.add_argument("assignment")
    p.add_argument("students", nargs="+", metavar="STUDENT")
    p.add_argument("--force", action="store_true", help="also when a TA entered points for them in formgrader")
    p.add_argument("--undo", action="store_true", help="put them back: the next `autograder grade` grades them")
    p.add_argument("--out", help="results folder (default: COURSE/graded/ASSIGNMENT)")
    p.set_defaults(func=cmd_remove)
    p = sub.add_parser("similarity", help="rank pairs of students by similar answers (similarity.html, .csv)")
    p.add_argument("assignment")
    p.add_argument("--results", help="results folder (default: COURSE/graded/ASSIGNMENT)")
    p.set_defaults(func=cmd_similarity)


def _service_commands(sub):
    p = sub.add_parser("serve", help="grade notebooks as students submit them: web pages and a JSON API")
    p.add_argument("assignments", nargs="*", metavar="ASSIGNMENT", help="the assignments to take (default: all)")
    p.add_argument("--host", default="127.0.0.1", help="the address to listen on (default 127.0.0.1: put a TLS"
                                                       " reverse proxy in front for students, see docs/service.md)")
    p.add_argument("--port", type=int, default=8000)
    p.add_argument("--uds", metavar="SOCKET", help="listen on this unix socket instead of --host/--port: only the"
                                                  " reverse proxy (and this machine's processes that may open the"
                                                  " file) reach the service (deploy/nginx/site.conf)")
    p.add_argument("--limit-concurrency", type=int, default=500, metavar="N",
                   help="connections or requests at once before the service answers 503 (default 500)")
    p.add_argument("--jobs", type=int, default=0, help="warm grading workers (default: number of cores)")
    p.add_argument("--roster", metavar="FILE", help="roster CSV: extensions for the late policy")
    p.add_argument("--secure-cookies", action="store_true", help="mark the sign-in cookie Secure (behind HTTPS)")
    p.add_argument("--forwarded-allow-ips", default="", metavar="ADDRESSES",
                   help="the reverse proxies whose X-Forwarded-For and X-Forwarded-Proto are believed (comma"
                        " separated; default none: a client's own headers never change its address)")
    p.add_argument("--demo", action="store_true", help="serve the course's demo/ copy, with a token for each example"
                                                       " student and a TA, printed as links")
    p.add_argument("--cluster", metavar="ADDRESS",
                   help="grade on a Dask cluster (tcp://host:8786, tls://..., or local:N), as grade --cluster does")
    p.add_argument("--tls-ca-file", help="with --cluster tls://...: the certificate authority's file")
    p.add_argument("--tls-cert", help="with --cluster tls://...: this client's certificate")
    p.add_argument("--tls-key", help="with --cluster tls://...: this client's private key")
    _add_unsafe_flag(p)
    p.set_defaults(func=cmd_serve)
    p = sub.add_parser("tokens", help="issue, list or revoke the tokens students hand in with (autograder serve)")
    p.add_argument("assignment", nargs="?", help="tokens for this assignment only (default: one token per student"
                                                 " for every assignment of the course, each with its own rules)")
    p.add_argument("--roster", metavar="FILE", help="a token for each student_id on it that has none yet")
    p.add_argument("--ta", nargs="+", metavar="NAME", help="a TA token (sees every student, can regrade)")
    p.add_argument("--out", metavar="FILE", help="CSV of the new tokens: student_id,token,link (mode 600)")
    p.add_argument("--url", help="the service's public address, for the personal links")
    p.add_argument("--new", action="store_true", help="replace existing tokens (the old ones stop working)")
    p.add_argument("--revoke", nargs="+", metavar="STUDENT", help="revoke every token of these students")
    p.add_argument("--list", action="store_true", help="list the active tokens (never their secrets)")
    p.set_defaults(func=cmd_tokens)
    p = sub.add_parser("prune", help="delete the service's stored uploads of attempts that no longer count")
    p.add_argument("assignment")
    p.add_argument("--older-than", type=float, default=0.0, metavar="DAYS",
                   help="only uploads handed in more than DAYS days ago (default: any finished one)")
    p.add_argument("--dry-run", action="store_true", help="say what would be deleted, delete nothing")
    p.set_defaults(func=cmd_prune)


def _course_commands(sub):
    p = sub.add_parser("init", help="create an empty course folder (nbgrader config, exercises/, solutions/)")
    p.add_argument("folder")
    p.set_defaults(func=cmd_init)
    p = sub.add_parser("new", help="add a working assignment to the course: edit it from there")
    p.add_argument("name", help="lower-case letters, digits and _ (it names a Python package)")
    p.add_argument("--title", help="the assignment's title (default: from its name)")
    p.set_defaults(func=cmd_new)
    p = sub.add_parser("trust-startup-files",
                       help="trust this machine's .pth start-up files as they are now (fresh machines only)")
    p.set_defaults(func=cmd_trust)


def run():
    """The command's entry point: `main()`, and after `grade` an exit without Python's tear-down.

    Unloading nbgrader, SQLAlchemy and matplotlib takes about 0.3 s, while every core
    waits for this process. By the time `grade` returns, every output is written and
    closed, and the local workers have closed their sandboxes (see LocalScheduler)."""
    code = main()
    on_a_cluster = any(arg == "--cluster" or arg.startswith("--cluster=") for arg in sys.argv)
    if sys.argv[1:2] == ["grade"] and not on_a_cluster:  # a Dask client may still be closing
        sys.stdout.flush()
        sys.stderr.flush()
        _remove_multiprocessing_folder()
        os._exit(code or 0)
    return code


def _remove_multiprocessing_folder():
    """The one clean-up os._exit would skip: multiprocessing's temporary folder (pymp-*),
    which holds the workers' fork server's socket. Python removes it at a normal exit; left
    there, every `grade` would leave one behind in /tmp. The fork server ends by itself when
    this process does."""
    import shutil
    from multiprocessing import util

    shutil.rmtree(util.get_temp_dir(), ignore_errors=True)


if __name__ == "__main__":
    sys.exit(run())
