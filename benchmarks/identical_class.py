"""Benchmark: a class where many hand in the same thing, graded with identical answers once
against the same class with every notebook run.

    python benchmarks/identical_class.py [--n 100] [--untouched 30] [--copies 20] [--rounds 2]

The class: `--untouched` students hand in the release as it is, `--copies` hand in the
same filled answer (one student's work passed around), and the rest each hand in a
different answer from the assignment's mistake corpus. The same 100 notebooks are also
graded "signed" (a comment naming the student at the end of the first answer cell: the
same behaviour, but no two answers alike), which makes the grader run every one, as a
grader without identical answers would. Rounds alternate (this machine's speed drifts)
and each grades a fresh copy of the course with `--jobs 2`. It prints both wall times,
their ratio, how many notebooks each run sent to a sandbox, and whether every
student's result is the same both ways (scores, and every check's outcome and message).
"""
import argparse
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

from autograder.record import all_results  # noqa: E402
from helpers import new_course, signed  # noqa: E402

ASSIGNMENT = "causal_attention"


def make_class(tmp, n, untouched, copies, sign):
    """A course whose submitted/ holds the class; with `sign`, no two notebooks alike."""
    import nbformat

    from autograder.authoring import corpus
    from autograder.authoring.examples import filled_notebook
    from autograder.course import Course
    from autograder.grading.notebook import grade_cells

    course = new_course(tmp)
    assignment = Course(course).assignment(ASSIGNMENT)
    release = nbformat.read(assignment.release_notebook, as_version=4)
    cells = list(grade_cells(nbformat.read(assignment.source_notebook, as_version=4)))
    passed_around = filled_notebook(release, assignment, {})
    entries = [e for e in corpus.load(assignment, cells)][:n - untouched - copies]
    if len(entries) < n - untouched - copies:
        sys.exit(f"the corpus has only {len(entries)} entries; ask for a smaller --n")
    notebooks = [(f"untouched{i}", release) for i in range(untouched)]
    notebooks += [(f"copy{i}", passed_around) for i in range(copies)]
    notebooks += [(entry.name, corpus.notebook(entry, release, assignment)) for entry in entries]
    for index, (label, notebook) in enumerate(notebooks):
        student = f"s{index:03d}_{label}"
        path = course / "submitted" / student / ASSIGNMENT / f"{ASSIGNMENT}.ipynb"
        path.parent.mkdir(parents=True)
        nbformat.write(signed(notebook, f"student {student}") if sign else notebook, path)
    return course


def grade(course):
    """(wall seconds, {student: result}) of `autograder grade --jobs 2` on `course`."""
    started = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "autograder.cli", "grade", ASSIGNMENT, "submitted",
                           "--course", str(course), "--jobs", "2", "--seed", "1"],
                          cwd=course, capture_output=True, text=True)
    seconds = time.perf_counter() - started
    if done.returncode != 0:
        sys.exit(f"grading failed:\n{done.stdout[-2000:]}{done.stderr[-2000:]}")
    return seconds, {r.student_id: r for r in all_results(course / "graded" / ASSIGNMENT)}


def outcome(result):
    """What a student sees and gets: the scores and every check's outcome and message."""
    return (result.status, result.score,
            [(c.name, c.score, [(k.name, k.passed, k.message) for k in c.checks]) for c in result.cells])


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=100)
    parser.add_argument("--untouched", type=int, default=30)
    parser.add_argument("--copies", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="bench-identical-"))
    templates = {sign: make_class(tmp / ("signed" if sign else "as-handed-in"), args.n, args.untouched,
                                  args.copies, sign) for sign in (False, True)}
    seconds = {False: [], True: []}
    results = {}
    for round_ in range(args.rounds):
        for sign in (False, True) if round_ % 2 == 0 else (True, False):
            course = tmp / f"run-{round_}-{'signed' if sign else 'as-handed-in'}"
            shutil.copytree(templates[sign], course)
            wall, results[sign] = grade(course)
            seconds[sign].append(wall)
            shutil.rmtree(course)
    once, every = statistics.median(seconds[False]), statistics.median(seconds[True])
    ran = {sign: sum(not r.reused for r in results[sign].values()) for sign in (False, True)}
    print(f"class of {args.n}: {args.untouched} untouched releases, {args.copies} copies of one answer,"
          f" {args.n - args.untouched - args.copies} different answers; {args.rounds} alternating rounds")
    print(f"identical answers graded once: {once:6.1f} s ({ran[False]} notebooks run)"
          f"   runs: {', '.join(f'{s:.1f}' for s in seconds[False])}")
    print(f"every notebook graded:         {every:6.1f} s ({ran[True]} notebooks run)"
          f"   runs: {', '.join(f'{s:.1f}' for s in seconds[True])}")
    print(f"speed-up: {every / once:.2f}x")
    differ = sorted(s for s in results[True] if outcome(results[True][s]) != outcome(results[False].get(s, results[True][s]))
                    or s not in results[False])
    print(f"same result for every student both ways: {'yes' if not differ else 'NO: ' + ', '.join(differ[:10])}"
          f" ({len(results[False])} and {len(results[True])} results)")
    shutil.rmtree(tmp, ignore_errors=True)
    if differ:
        sys.exit(1)


if __name__ == "__main__":
    main()
