"""What every command shares: the console, finding the course and its assignments, the
refusal to run student code without a sandbox, and the tables and problem lists they print."""
from rich.console import Console
from rich.table import Table

from autograder.course import Course, CourseError
from autograder.grading import cgroups
from autograder.grading.cluster.protocol import ClusterError
from autograder.grading.sandbox.isolation import require_sandbox, unsafe_warning
from autograder.grading.selfcheck import verify
from autograder.untrusted import for_terminal as shown

console = Console(width=None if Console().is_terminal else 140)  # no cramped tables in logs


def course_of(args):
    return Course.locate(args.course)


def assignment_of(args):
    return course_of(args).assignment(args.assignment)


def chosen(args):
    """The assignments a command names, or all of the course's."""
    course = course_of(args)
    chosen = [course.assignment(name) for name in args.assignments] if args.assignments else course.assignments()
    if not chosen:
        raise CourseError(f"the course {course.root} has no assignments yet: add one with `autograder new NAME`")
    return chosen


def may_run_student_code(unsafe_no_sandbox):
    """Refuse (NoSandbox, PoisonedInterpreter) before anything runs; warn loudly when unsafe."""
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
    notes = cgroups.bound_notes()
    return "\n".join(f"Note: {note}" for note in notes) if notes else None


def add_unsafe_flag(parser):
    parser.add_argument("--unsafe-no-sandbox", action="store_true",
                        help="without bubblewrap, run student code as a plain process (as another user when"
                             " run as root) instead of refusing; every result says it was graded this way")


def progress_bar(enabled):
    # rich.progress takes 17 ms, and grade alone shows a bar
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


def print_problems(problems, rest="everything else was graded and recorded"):
    """What a TA must look at (a file nobody's, a renamed submission, an unreadable submission
    time, a result that could not be recorded), one line each, after everything else."""
    if not problems:
        return
    count = "1 problem needs" if len(problems) == 1 else f"{len(problems)} problems need"
    console.print(f"[bold yellow]{count} your attention[/bold yellow] ({rest}):", highlight=False)
    for student, problem in problems:
        console.print(f"  [yellow]{shown(student) or 'the batch'}[/yellow]: {shown(problem, 600)}", highlight=False)


def dask_scheduler(args):
    from autograder.grading.cluster.client import DaskScheduler  # Dask (0.4 s): only with --cluster

    tls = [args.tls_ca_file, args.tls_cert, args.tls_key]
    security = None
    if any(tls):
        if not all(tls):
            raise ClusterError("TLS needs all three of --tls-ca-file, --tls-cert and --tls-key")
        from distributed.security import Security  # an optional extra, only for TLS

        security = Security(tls_ca_file=args.tls_ca_file, tls_client_cert=args.tls_cert,
                            tls_client_key=args.tls_key, require_encryption=True)
    return DaskScheduler(args.cluster, security=security, say=lambda text: console.print(text, highlight=False),
                         unsafe_no_sandbox=args.unsafe_no_sandbox)

