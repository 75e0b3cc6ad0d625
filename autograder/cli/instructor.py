"""The instructor's commands: build, release, validate (what the hidden checks catch) and demo."""
import os
import time

from rich.markup import escape
from rich.table import Table

from autograder.authoring.nbgrader_steps import generate_assignment
from autograder.cli.common import (add_unsafe_flag, assignment_of, chosen, console, course_of,
                                   may_run_student_code, print_results)


def cmd_build(args):
    from autograder.authoring.build import write_source  # nbconvert (0.2 s)

    for assignment in chosen(args):
        console.print(f"wrote {write_source(assignment)}")


def cmd_release(args):
    from autograder.authoring.build import write_source  # nbconvert (0.2 s)

    for assignment in chosen(args):
        write_source(assignment)
        console.print(f"released {generate_assignment(assignment)}")


def cmd_validate(args):
    from autograder.authoring.validate import release_if_new, validate  # torch (2 s)

    assignment = assignment_of(args)
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
    from autograder.authoring.build import write_source  # nbconvert (0.2 s)
    from autograder.authoring.examples import demo_course, write_examples  # nbformat's validator (0.1 s)
    from autograder.runs.batch import grade_batch  # nbgrader's gradebook, SQLAlchemy (0.25 s)
    from autograder.runs.recording import graded_folder, standard_outputs  # (as runs.batch)

    course = course_of(args)
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


def add_commands(sub):
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
    add_unsafe_flag(p)
    p.set_defaults(func=cmd_validate)
    p = sub.add_parser("demo", help="release, grade the example submissions in sandboxes, print grades")
    add_unsafe_flag(p)
    p.set_defaults(func=cmd_demo)

