"""Per-submission time of two versions of the grader, side by side in one run.

    python benchmarks/overhead_ab.py --base REV [--n 8] [--rounds 5] [--class demo|realistic]

Checks out REV in a temporary git worktree and grades the same notebooks with
`autograder grade --jobs 1` from that tree and from this one, alternating round
by round so that drift in the machine's speed hits both alike. Prints, per kind
of student (ada right, ben and cy wrong, dee the untouched release), the median
time per submission of each version and their difference. Used to show that a
change keeps the per-submission overhead within the machine's noise. With
`--class realistic` the notebooks are the realistic class (every corpus mistake and
alternative, slow, crashing and looping answers, the untouched release: see
tests/helpers.py; the time limit is 10 s, as in grade_vs_nbgrader.py), where nearly
every submission has a mistake to diagnose; it also prints, for the submissions that lose some
points (each a mistake to diagnose), each one's time in this tree over the base's.

`--whole-run` grades with `--jobs 2` instead and compares each run's wall time (median
over the rounds): with a few notebooks that is mostly what a run costs once (starting
the workers and sandboxes, the tail, the outputs at the end).

`--hide CELL::CHECK=WORD,...` grades this tree's course with those checks hidden (a
`[visibility]` table appended to its assignment.toml), the base's with nothing hidden: with
`--base HEAD` (this tree committed) it measures what hiding costs a submission (a fork for the
hidden checks' level, one more for the what-ifs of the levels below), side by side.
"""
import time
import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(HERE / "benchmarks"))

from grade_vs_nbgrader import KINDS, make_course  # noqa: E402

from autograder.record import all_results  # noqa: E402


def grade(tree, course, out, jobs=1, walls=None, timeout=None):
    """Median-ready {kind: [seconds]} from one run of the grader in `tree`; the run's wall
    time is appended to `walls`."""
    env = {**os.environ, "PYTHONPATH": str(tree)}
    limits = ["--timeout", str(timeout)] if timeout else []
    started = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "autograder.cli", "grade", "causal_attention", "submitted",
                           "--course", str(course), "--jobs", str(jobs), "--seed", "1", "--out", str(out),
                           "--force", *limits], cwd=course, env=env, capture_output=True, text=True)
    if walls is not None:
        walls.append(time.perf_counter() - started)
    if done.returncode != 0:
        raise SystemExit(f"grading with {tree} failed:\n{done.stdout[-2000:]}{done.stderr[-2000:]}")
    times = {}
    for result in all_results(out):  # the on-disk format has not changed since the base revisions
        kind = result.student_id.split("_", 1)[1]
        times.setdefault(kind if kind in KINDS else "realistic class", []).append(result.execution_time)
        if 0 < result.score < result.max_score and kind not in ("slow", "loop"):  # a mistake to diagnose
            times.setdefault("diagnosed", {})[result.student_id] = result.execution_time
        if result.timings.get("repair_runs"):  # the repair runs of issue 44 (part of the time above)
            times.setdefault("repair runs", []).append(result.timings["repair_runs"])
    return times


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base", required=True, help="the git revision to compare this tree with")
    parser.add_argument("--n", type=int, default=8, help="notebooks per round (default 8)")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--class", dest="kind", choices=["demo", "realistic"], default="demo")
    parser.add_argument("--whole-run", action="store_true", help="--jobs 2, and compare whole runs' wall time")
    parser.add_argument("--hide", default="", help='checks hidden in this tree\'s course: "ex3::test_x=after_due_date,'
                                                    'ex8_model=hidden" (the base grades with nothing hidden)')
    args = parser.parse_args()
    jobs = 2 if args.whole_run else 1
    timeout = 10 if args.kind == "realistic" else None  # the looping answer: as grade_vs_nbgrader.py
    tmp = Path(tempfile.mkdtemp(prefix="overhead-ab-"))
    base = tmp / "base"
    subprocess.run(["git", "worktree", "add", "--detach", str(base), args.base], cwd=HERE, check=True,
                   capture_output=True)
    try:
        trees = {"base": base, "this": HERE}
        if args.kind == "realistic":
            sys.path.insert(0, str(HERE / "tests"))
            from helpers import make_realistic_class

            courses = {"this": make_realistic_class(tmp / "this", args.n)[0]}
        else:
            courses = {"this": make_course(tmp / "this", args.n)}
        # The same notebooks, with the base's own checks (they follow the engine's API of their time).
        courses["base"] = tmp / "base-course"
        shutil.copytree(courses["this"], courses["base"])
        if (base / "exercises").is_dir():
            shutil.rmtree(courses["base"] / "exercises")
            shutil.copytree(base / "exercises", courses["base"] / "exercises")
        if args.hide:  # this tree only: the base, the same commit or not, grades with nothing hidden
            table = "".join(f'"{key}" = "{word}"\n' for key, word in (item.split("=") for item in args.hide.split(",")))
            settings = courses["this"] / "exercises" / "causal_attention" / "assignment.toml"
            settings.write_text(settings.read_text() + "\n[visibility]\n" + table)
        times = {name: {} for name in trees}
        walls = {name: [] for name in trees}
        for round_ in range(args.rounds):
            for name in (trees if round_ % 2 == 0 else reversed(list(trees))):
                for kind, seconds in grade(trees[name], courses[name], tmp / f"{name}-{round_}", jobs,
                                           walls[name], timeout).items():
                    if kind == "diagnosed":  # per student, to pair the two trees' times
                        for student, second in seconds.items():
                            times[name].setdefault(kind, {}).setdefault(student, []).append(second)
                    else:
                        times[name].setdefault(kind, []).extend(seconds)
        print(f"{args.n} notebooks ({args.kind} class) x {args.rounds} rounds, --jobs {jobs}; base = {args.base}"
              + (f"; hidden in this tree: {args.hide}" if args.hide else ""))
        if args.whole_run:
            before, after = (statistics.median(walls[name]) for name in trees)
            print(f"  whole run (median wall): base {before:.2f} s, this tree {after:.2f} s,"
                  f" difference {after - before:+.2f} s ({after / before:.3f}x)")
            print(f"  runs: base {', '.join(f'{w:.2f}' for w in walls['base'])};"
                  f" this tree {', '.join(f'{w:.2f}' for w in walls['this'])}")
            return
        diagnosed = {name: times[name].pop("diagnosed", {}) for name in trees}
        repairs = {name: times[name].pop("repair runs", []) for name in trees}
        paired = [student for student in diagnosed["this"] if student in diagnosed["base"]]
        if paired:  # each diagnosed student's median time in this tree over the base's
            ratios = [statistics.median(diagnosed["this"][s]) / statistics.median(diagnosed["base"][s]) for s in paired]
            print(f"  diagnosed submissions ({len(paired)}): per student, this tree / base: median"
                  f" {statistics.median(ratios):.3f}x, mean {statistics.mean(ratios):.3f}x, largest {max(ratios):.3f}x"
                  f" ({paired[ratios.index(max(ratios))]})")
        for name in trees:  # what the repair runs cost (issue 44), in the submissions that had them
            if repairs[name]:
                ms = [seconds * 1000 for seconds in repairs[name]]
                print(f"  repair runs ({name}): in {len(ms) / args.rounds:.0f} submissions a round, median"
                      f" {statistics.median(ms):.0f} ms, mean {statistics.mean(ms):.0f} ms, largest {max(ms):.0f} ms")
        differences = []
        for kind in times["this"]:
            before, after = (statistics.median(times[name][kind]) for name in trees)
            differences.append(after - before)
            total = sum(times["this"][kind]) / sum(times["base"][kind])
            print(f"  {kind}: median base {before * 1000:6.0f} ms, this tree {after * 1000:6.0f} ms,"
                  f" difference {(after - before) * 1000:+5.0f} ms ({after / before:.3f}x); sum {total:.3f}x")
        print(f"mean difference per submission: {statistics.mean(differences) * 1000:+.0f} ms")
    finally:
        subprocess.run(["git", "worktree", "remove", "--force", str(base)], cwd=HERE, capture_output=True)
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
