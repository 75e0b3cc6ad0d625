"""Benchmark: grading with the package in a virtual environment under /tmp, against this Python.

    python benchmarks/venv_under_tmp.py [--n 8] [--rounds 4]

CI runners and throw-away setups often install into `python -m venv /tmp/...`.
The sandbox has a /tmp of its own, so an interpreter under /tmp must be shown
elsewhere inside it; this checks that doing so costs nothing per notebook. Both
interpreters grade the same notebooks with `--jobs 1`, in alternating rounds
(this machine's speed drifts), and the medians per student kind are compared.
"""
import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import venv
from pathlib import Path

HERE = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(HERE / "benchmarks"))
sys.path.insert(0, str(HERE / "tests"))

from grade_vs_nbgrader import KINDS, make_course  # noqa: E402

from autograder.record import all_results  # noqa: E402


def make_venv(where):
    """A venv under /tmp that sees this Python's packages (torch is large) and has the
    package itself installed into it, as `pip install` in a fresh venv would."""
    venv.EnvBuilder(system_site_packages=True, with_pip=True).create(where)
    python = where / "bin" / "python"
    subprocess.run([python, "-m", "pip", "install", "-q", "--no-deps", str(HERE)],
                   check=True, capture_output=True)
    found = subprocess.run([python, "-c", "import autograder; print(autograder.__file__)"],
                           capture_output=True, text=True, check=True, cwd="/").stdout.strip()
    if not found.startswith(str(where)):
        raise SystemExit(f"the venv imports autograder from {found}, not from itself")
    return python


def grade(python, course, out):
    done = subprocess.run([str(python), "-m", "autograder.cli", "grade", "causal_attention", "submitted",
                           "--course", str(course), "--jobs", "1", "--seed", "1", "--out", str(out), "--force"],
                          cwd=course, capture_output=True, text=True, env={**os.environ, "PYTHONPATH": ""})
    if done.returncode != 0:
        raise SystemExit(f"grading with {python} failed:\n{done.stdout[-2000:]}{done.stderr[-2000:]}")
    times = {kind: [] for kind in KINDS}
    for result in all_results(out):
        times[result.student_id.split("_")[1]].append(result.execution_time)
    return times


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=4)
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="venv-bench-", dir="/tmp"))
    try:
        pythons = {"this Python": Path(sys.executable), "venv under /tmp": make_venv(tmp / "env")}
        course = make_course(tmp / "class", args.n)
        times = {name: {kind: [] for kind in KINDS} for name in pythons}
        for round_ in range(args.rounds):
            for name in (pythons if round_ % 2 == 0 else reversed(list(pythons))):
                for kind, seconds in grade(pythons[name], course, tmp / f"out-{round_}-{len(name)}").items():
                    times[name][kind] += seconds
        print(f"{args.n} notebooks x {args.rounds} rounds, --jobs 1")
        ratios = []
        for kind in KINDS:
            system, tmp_venv = (statistics.median(times[name][kind]) for name in pythons)
            ratios.append(tmp_venv / system)
            print(f"  {kind}: this Python {system * 1000:6.0f} ms, venv under /tmp {tmp_venv * 1000:6.0f} ms"
                  f" ({tmp_venv / system:.3f}x)")
        print(f"mean ratio per notebook, venv under /tmp against this Python: {statistics.mean(ratios):.3f}x")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
