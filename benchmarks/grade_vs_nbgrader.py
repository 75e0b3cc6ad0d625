"""Benchmark: `autograder grade --jobs 2` against `nbgrader autograde` on the same notebooks.

    python benchmarks/grade_vs_nbgrader.py [--n 100] [--skip-nbgrader]

Both run here, one after the other, on copies of the same N submissions (the
example students ada, ben, cy and dee in turn). Prints wall times and their
ratio, the per-submission overhead of sandboxing beyond the student's own
compute, and the peak memory (PSS) of the whole grading process tree.
"""
import argparse
import contextlib
import io
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

KINDS = ["ada", "ben", "cy", "dee"]


def make_course(tmp, n):
    from helpers import example, new_course

    import nbformat

    course = new_course(tmp)
    notebooks = {kind: example(kind) for kind in KINDS}
    for index in range(n):
        kind = KINDS[index % len(KINDS)]
        path = course / "submitted" / f"s{index:03d}_{kind}" / "causal_attention" / "causal_attention.ipynb"
        path.parent.mkdir(parents=True)
        nbformat.write(notebooks[kind], path)
    return course


def tree_pss(root_pid):
    """Proportional set size of a process and all its descendants, in bytes."""
    parents = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                parents[int(entry)] = int(open(f"/proc/{entry}/stat").read().rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                pass
    members, frontier = {root_pid}, {root_pid}
    while frontier:
        frontier = {p for p, parent in parents.items() if parent in frontier} - members
        members |= frontier
    total = 0
    for pid in members:
        try:
            for line in open(f"/proc/{pid}/smaps_rollup"):
                if line.startswith("Pss:"):
                    total += int(line.split()[1]) * 1024
        except OSError:
            pass
    return total


def timed(command, cwd):
    started = time.perf_counter()
    process = subprocess.Popen(command, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    peak = [0]

    def sample():
        while process.poll() is None:
            peak[0] = max(peak[0], tree_pss(process.pid))
            time.sleep(0.2)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    output = process.communicate()[0]
    sampler.join()
    if process.returncode:
        sys.exit(f"{command[2:4]} failed:\n{output[-3000:]}")
    return time.perf_counter() - started, peak[0], output


def in_process_seconds(course):
    """The student's own compute: cells and checks in one warm process, no sandbox, 1 thread."""
    import nbformat
    import torch
    from IPython.core.interactiveshell import InteractiveShell

    from autograder.runner import run_checks
    from autograder.student import NamespaceStudent
    from autograder.submissions import read_notebook, sanitize

    torch.set_num_threads(1)
    source = nbformat.read(course / "source/causal_attention/causal_attention.ipynb", as_version=4)
    release = nbformat.read(course / "release/causal_attention/causal_attention.ipynb", as_version=4)
    shell = InteractiveShell.instance()
    seconds = {}
    for index, kind in enumerate(KINDS):
        path = course / "submitted" / f"s{index:03d}_{kind}" / "causal_attention" / "causal_attention.ipynb"
        clean = sanitize(read_notebook(path), source, release)
        runs = []
        for _ in range(4):
            shell.reset()
            started = time.perf_counter()
            with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
                for _, code in clean.cells:
                    shell.run_cell(code, store_history=False)
                run_checks("causal_attention", NamespaceStudent(shell.user_ns), seed=1)
            runs.append(time.perf_counter() - started)
        seconds[kind] = statistics.median(runs[1:])  # warm
    return seconds


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--n", type=int, default=100)
    parser.add_argument("--skip-nbgrader", action="store_true")
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="bench-"))
    course = make_course(tmp, args.n)
    python = sys.executable
    # Both graders start from the same released course (gradebook and assignment in it).
    subprocess.run([python, "-m", "nbgrader", "generate_assignment", "causal_attention", "--force"],
                   cwd=course, check=True, capture_output=True)
    nbgrader_course = tmp / "nbgrader_course"
    shutil.copytree(course, nbgrader_course)
    print(f"{args.n} submissions, {os.cpu_count()} cores, course {course}")

    ours, ours_pss, log = timed([python, "-m", "autograder.cli", "grade", "causal_attention", "submitted",
                                 "--course", str(course), "--jobs", "2", "--seed", "1", "--verbose"], course)
    print(f"autograder grade --jobs 2: {ours:7.1f} s  ({ours / args.n * 1000:.0f} ms per submission),"
          f" peak memory {ours_pss / 2**30:.2f} GiB")
    print("  " + log.strip().splitlines()[-1])  # where the time went

    # Overhead: one worker (no competition for the cores), against the same cells and
    # checks run in one warm process without a sandbox.
    import json

    single = tmp / "single"
    timed([python, "-m", "autograder.cli", "grade", "causal_attention", *[
        str(course / "submitted" / f"s{i:03d}_{KINDS[i % 4]}") for i in range(min(args.n, 12))],
        "--course", str(course), "--jobs", "1", "--seed", "1", "--out", str(single)], course)
    results = [json.loads(p.read_text()) for p in single.glob("s*.json")]
    graded = {kind: statistics.median(r["execution_time"] for r in results
                                      if r["extra_data"]["student_id"].endswith(kind)) for kind in KINDS}
    baseline = in_process_seconds(course)
    overhead = statistics.mean(graded[k] - baseline[k] for k in KINDS)
    for kind in KINDS:
        print(f"  {kind}: {graded[kind] * 1000:6.0f} ms per submission in the sandbox,"
              f" {baseline[kind] * 1000:6.0f} ms in process")
    print(f"per-submission overhead beyond the student's own compute (--jobs 1): {overhead * 1000:.0f} ms")

    if not args.skip_nbgrader:
        theirs, _, _ = timed([python, "-m", "nbgrader", "autograde", "causal_attention", "--create", "--force"],
                             nbgrader_course)
        print(f"nbgrader autograde:        {theirs:7.1f} s  ({theirs / args.n * 1000:.0f} ms per submission)")
        print(f"speed-up: {theirs / ours:.1f}x")
    shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
