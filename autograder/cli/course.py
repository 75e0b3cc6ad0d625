"""A course's own commands: init (an empty course), new (a working assignment), and trusting this
machine's start-up files."""
from autograder.authoring.scaffold import init_course, new_assignment
from autograder.cli.common import console, course_of
from autograder.grading.selfcheck import trust_present_pth_files, trusted_list


def cmd_init(args):
    """An empty course folder, ready for `autograder new`."""
    course = init_course(args.folder)
    console.print(f"created the course {course.root}; add an assignment with"
                  f" `autograder new NAME --course {course.root}` (or from inside the folder)")
    return 0


def cmd_new(args):
    """A working assignment: one exercise, its solution, a check, a corpus mistake, two examples."""
    assignment = new_assignment(course_of(args), args.name, args.title)
    console.print(f"created {assignment.folder} and {assignment.solutions}. Next: `autograder release"
                  f" {assignment.name}`, then `autograder validate {assignment.name}`.")
    return 0


def cmd_trust(args):
    """Record this machine's own .pth start-up files (run on a fresh machine, as setup.sh does)."""
    found = trust_present_pth_files()
    for path in found:
        console.print(f"trusted as it is now: {path}")
    console.print(f"{len(found)} start-up file(s) recorded in {trusted_list()}" if found
                  else "no untrusted .pth start-up files here")
    return 0


def add_commands(sub):
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

