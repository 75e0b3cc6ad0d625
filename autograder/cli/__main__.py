"""`python -m autograder.cli`: the same as the `autograder` command."""
import sys

from autograder.cli import run

sys.exit(run())
