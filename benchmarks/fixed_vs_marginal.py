"""What a grading run costs once, and what each more notebook adds, from two class sizes.

    python benchmarks/fixed_vs_marginal.py [--n 100] [--rounds 2]

grade_vs_nbgrader.py prints the overhead per notebook of one class of N: everything
the cores do beyond the students' own compute, divided by N. Part of it is paid once
per run whatever N is (starting the sandboxes and the workers, the outputs at the
end, the last notebook alone on a core), part by each notebook. This benchmark
separates the two by grading two classes:

* the realistic class of N (tests/helpers.py: every corpus mistake and alternative,
  the untouched release, a slow answer, one that kills its process, one that loops
  to the 10 s limit, copies of the reference);
* the same N plus a signed copy of each (the same code with a comment naming its
  student: the same compute, but answers of their own, so none is graded once for two).

Each round grades both with `autograder grade --jobs 2`, in alternating order, and the
students' own compute of the N is measured as grade_vs_nbgrader.py does (cells in a
fresh process, then the checks warm, no sandbox), before the first round and after the last.
With wall times W(N), W(2N) on C cores and compute T of the N (the copies' is T too):

    each more notebook:  (C * (W(2N) - W(N)) - T) / N     beyond its own compute
    once per run:        C * W(N) - T - N * (each more notebook)    core-seconds

The first is what grading a bigger class tends to per notebook; the second, divided
by N, is how far above it a class of N is.
"""
import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "benchmarks"))

from grade_vs_nbgrader import TIMEOUT, students_compute  # noqa: E402
from overhead_ab import grade  # noqa: E402
from helpers import make_realistic_class, signed  # noqa: E402

CORES = 2


def doubled(course, double):
    """A copy of `course` whose submitted/ also holds a signed copy of every submission."""
    shutil.copytree(course, double)
    for folder in sorted((course / "submitted").iterdir()):
        path = folder / "causal_attention" / "causal_attention.ipynb"
        copy = double / "submitted" / f"copy-{folder.name}" / "causal_attention" / "causal_attention.ipynb"
        copy.parent.mkdir(parents=True)
        nbformat.write(signed(nbformat.read(path, as_version=4), f"copy of {folder.name}"), copy)
    return double


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    if (os.cpu_count() or 1) < CORES:
        sys.exit(f"this benchmark grades with --jobs {CORES} and needs {CORES} cores")
    tmp = Path(tempfile.mkdtemp(prefix="fixed-marginal-"))
    try:
        course, kinds = make_realistic_class(tmp / "single", args.n)
        subprocess.run([sys.executable, "-m", "nbgrader", "generate_assignment", "causal_attention", "--force"],
                       cwd=course, check=True, capture_output=True)  # the gradebook both classes write to
        double = doubled(course, tmp / "double")
        before = sum(students_compute(course, kinds).values())
        walls = {"single": [], "double": []}
        for round_ in range(args.rounds):
            order = ("single", "double") if round_ % 2 == 0 else ("double", "single")
            for name in order:
                times = grade(ROOT, course if name == "single" else double, tmp / f"{name}-{round_}",
                              jobs=CORES, walls=walls[name], timeout=TIMEOUT)
                graded, expected = sum(len(seconds) for seconds in times.values()), args.n * (1 + (name == "double"))
                if graded != expected:
                    sys.exit(f"{name}: {graded} results, expected {expected}")
        after = sum(students_compute(course, kinds).values())
        compute = (before + after) / 2
        single, twice = statistics.mean(walls["single"]), statistics.mean(walls["double"])
        each_more = (CORES * (twice - single) - compute) / args.n
        once = CORES * single - compute - args.n * each_more
        print(f"realistic class of {args.n} and of {2 * args.n} (the same plus a signed copy of each),"
              f" --jobs {CORES}, {args.rounds} rounds")
        print(f"  wall: {args.n} notebooks {single:.1f} s ({', '.join(f'{w:.1f}' for w in walls['single'])}),"
              f" {2 * args.n} notebooks {twice:.1f} s ({', '.join(f'{w:.1f}' for w in walls['double'])})")
        print(f"  students' own compute of the {args.n}: {compute:.1f} s ({before:.1f} s before, {after:.1f} s after)")
        print(f"  overhead per notebook, whole run: {(CORES * single - compute) / args.n * 1000:.0f} ms at"
              f" {args.n}, {(CORES * twice - 2 * compute) / (2 * args.n) * 1000:.0f} ms at {2 * args.n}")
        print(f"  each more notebook adds {each_more * 1000:.0f} ms beyond its own compute;"
              f" once per run: {once:.1f} core-seconds ({once / args.n * 1000:.0f} ms per notebook at {args.n},"
              f" {once / (2 * args.n) * 1000:.0f} ms at {2 * args.n})")
        print(f"  fraction of the limit: {compute / CORES / single:.0%} at {args.n},"
              f" {2 * compute / CORES / twice:.0%} at {2 * args.n}")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
