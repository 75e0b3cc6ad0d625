"""What graded results become: feedback pages and the class report, Gradescope's bundle, the final
grade file (a CSV, Canvas's or Moodle's import), removing students, and the similarity report."""
import importlib.util

from autograder.cli.common import assignment_of, console, course_of, print_problems
from autograder.outputs import final, lms
from autograder.outputs.lms import BY_NAME, formats
from autograder.runs.similarity import write_report
from autograder.untrusted import for_terminal as shown


def _graded(args, out_dir):
    """(assignment, its GradedFolder, its results); says how to get results when there are none."""
    from autograder.runs.recording import graded_folder  # nbgrader's gradebook, SQLAlchemy (0.25 s)

    assignment = assignment_of(args)
    folder = graded_folder(assignment, out_dir)
    results = folder.results()
    if not results:
        console.print(f"[red]No results in {folder.root}[/red]: grade first with `autograder grade {args.assignment} PATH`.")
    return assignment, folder, results


def _pages(assignment, folder, feedback=True):
    """The class report, and each student's feedback page unless `feedback` is false."""
    from autograder.outputs.feedback import FeedbackPages, layout_of  # Jinja (33 ms)
    from autograder.runs.recording import class_report, read_source  # nbgrader's gradebook, SQLAlchemy (0.25 s)

    source = read_source(assignment)
    return [*([FeedbackPages(folder, layout_of(source))] if feedback else []), class_report(assignment, folder, source)]


def cmd_feedback(args):
    """(Re)write feedback/<student>.html and report.html from the results of earlier runs."""
    from autograder.runs.recording import write_outputs  # nbgrader's gradebook, SQLAlchemy (0.25 s)

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
    from autograder.runs.gradescope import build_bundle  # nbconvert (0.2 s)

    assignment = assignment_of(args)
    target = build_bundle(assignment, args.out or assignment.course.root / "dist" / f"{args.assignment}-gradescope.zip",
                          unsafe_no_sandbox=args.unsafe_no_sandbox)
    console.print(f"wrote {target}: upload it as the assignment's autograder on Gradescope"
                  " (Configure Autograder, zip file upload). Students submit their notebook.")
    return 0


def cmd_export(args):
    """The final grade file: autograded + written (formgrader) + extra credit - late, for an
    assignment or the course, as a plain CSV or Canvas's or Moodle's import."""
    from autograder.runs.finalgrades import NO_NOTEBOOK, NOTHING, REMOVED, export  # nbgrader's gradebook (0.2 s)

    try:
        roster = lms.read_roster(args.roster) if args.roster else None
        report = export(course_of(args), args.assignments, args.format, roster=roster, key=args.key, out=args.out,
                        results_dir=args.results, column=args.column)
    except lms.RosterError as error:
        console.print(f"[red]autograder export: {shown(error, 2000)}[/red]", highlight=False)
        return 2
    graded = report.students(final.GRADED) + report.students(final.NOT_GRADABLE)
    what = "the final grades" if args.format == "csv" else BY_NAME[args.format].title
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
    from autograder.runs.remove import put_back, remove  # nbgrader's gradebook (0.2 s)

    assignment = assignment_of(args)
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
    from autograder.runs.recording import read_release, write_outputs  # nbgrader's gradebook, SQLAlchemy (0.25 s)

    assignment, folder, results = _graded(args, args.results)
    if not results:
        return 1

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


def add_commands(sub):
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
    p.add_argument("--key", choices=[key for each in BY_NAME.values() for key in each.keys],
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

