"""`autograder grade`: submissions in sandboxes to results, grade files and the gradebook; with
--dry-run, only whose each file is and what the run would do."""
import os
import tempfile
from pathlib import Path

from rich.table import Table

from autograder.cli.common import (add_unsafe_flag, assignment_of, console, dask_scheduler, may_run_student_code,
                                   print_problems, print_results, progress_bar)
from autograder.course.settings import LimitsSettings
from autograder.grading.sandbox.isolation import NoSandbox, require_sandbox
from autograder.outputs.lms import RosterError, read_roster
from autograder.record import ERROR, GRADED
from autograder.untrusted import for_terminal as shown, listed


def cmd_grade(args):
    """Grade submissions in sandboxes; results, grades.csv and the gradebook."""
    from autograder.runs.batch import grade_batch  # nbgrader's gradebook, SQLAlchemy (0.25 s)
    from autograder.runs.late import LateError, read_times  # 7 ms, only for grade itself
    from autograder.runs.recording import graded_folder, standard_outputs  # (as runs.batch)

    assignment = assignment_of(args)
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
        scheduler = dask_scheduler(args)  # each worker is asked whether it may run student code
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
    from autograder.runs.batch import BatchOptions, plan_batch  # nbgrader's gradebook, SQLAlchemy (0.25 s)
    from autograder.runs.recording import graded_folder  # (as runs.batch)

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
        self.bar, self.task = progress_bar(console.is_terminal), None

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


def add_commands(sub):
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
    add_unsafe_flag(p)
    p.set_defaults(func=cmd_grade)

