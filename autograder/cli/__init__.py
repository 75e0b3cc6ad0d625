"""`autograder` command line: build, release, validate, grade, demo; init and new for instructors.

Every command works on a course folder: --course DIR, else the nearest folder at
or above the current one that holds exercises/, else the course bundled with
this package.
"""
# One module per group of commands (as nbgrader keeps one app per command), each owning its
# options and what it prints; this one only assembles the parser and runs the command.
import argparse
import os
import shutil
import sys

from autograder.cli import course, grading, instructor, results, service
from autograder.cli.common import console
from autograder.course import CourseError
from autograder.grading.sandbox.isolation import NoSandbox
from autograder.grading.selfcheck import PoisonedInterpreter
from autograder.untrusted import for_terminal as shown

GROUPS = (instructor, grading, results, service, course)  # in the order `autograder --help` lists them


def main(argv=None):
    args = parser().parse_args(argv)
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
    """Every command and its options, each group's from its own module."""
    parser = argparse.ArgumentParser(prog="autograder", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    for group in GROUPS:
        group.add_commands(sub)
    for command in sub.choices.values():
        command.add_argument("--course", help="the course folder (default: the nearest folder at or above this"
                                              " one with exercises/, else the course bundled with this package)")
    return parser


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
    from multiprocessing import util  # 8 ms that only `grade` needs

    shutil.rmtree(util.get_temp_dir(), ignore_errors=True)

