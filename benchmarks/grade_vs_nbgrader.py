"""Benchmark: `autograder grade --jobs 2` against `nbgrader autograde` on the same notebooks.

    python benchmarks/grade_vs_nbgrader.py [--n 100] [--class demo|realistic|both] [--skip-nbgrader] [--shuffle SEED]

Two classes, each N submissions, each graded by both graders on its own copy of
the course:

* demo: the example students ada, ben, cy and dee in turn;
* realistic: every mistake and alternative of the assignment's corpus, one
  untouched release, a CPU-heavy slow answer, one that crashes its process and
  one that loops until the time limit (10 s here, for both graders), and copies
  of the reference solutions for the rest. The slow, crashing and looping answers
  come first unless `--shuffle SEED` shuffles the order: a long answer graded
  last leaves the other core idle, which no grader can know in advance.

No two notebooks are alike (copies carry a comment naming their student), so
every one is run. Ours runs before and after nbgrader and the ratio uses the
mean of the two, because this machine's speed drifts over the minutes nbgrader
takes. For the realistic class it also prints the physical limit: the
students' own compute (each notebook's cells in a fresh process, then its checks
in the measuring process, warm from the notebooks before, without a sandbox;
measured before our first run and after our last, and averaged) divided by the
cores, the fraction of it reached, and the overhead per notebook beyond that
compute over the whole run (start-up included); and the per-notebook overhead:
each notebook's grading time, as its result records it, beyond its own compute
(the measure the speed issue started from). That limit is a bound no grader that isolates students reaches, since
the student's code the checks call runs warm there. The compute is measured one
notebook at a time and also with one notebook per core side by side, as grading
runs them: that tells whether the cores slow each other down (shared caches and
memory), a cost no grader can avoid and so not overhead. Beside it, the simplest
isolating grader: each notebook's cells and checks in one fresh process, without
a sandbox; what ours takes beyond it is the price of the sandbox and of the
probes' round trips. Each measurement runs in a process of its own.
A separate run measures the
peak memory (PSS) of the demo class's grading; timed runs are not sampled.
For the demo class it prints the per-submission overhead of sandboxing measured
with one worker, per student.
"""
import argparse
import contextlib
import gc
import io
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

from autograder.record import all_results  # noqa: E402
from helpers import make_realistic_class  # noqa: E402

KINDS = ["ada", "ben", "cy", "dee"]


def make_course(tmp, n):
    from helpers import example, new_course, signed

    import nbformat

    course = new_course(tmp)
    notebooks = {kind: example(kind) for kind in KINDS}
    for index in range(n):
        kind = KINDS[index % len(KINDS)]
        path = course / "submitted" / f"s{index:03d}_{kind}" / "causal_attention" / "causal_attention.ipynb"
        path.parent.mkdir(parents=True)
        nbformat.write(signed(notebooks[kind], f"student {index}"), path)  # no two alike: every one runs
    return course


TIMEOUT = 10  # seconds a notebook may run, in both graders (the looping answer uses all of it)


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


def timed(command, cwd, sample_memory=False, check=True):
    """(wall seconds, peak PSS in bytes or 0, output) of one command; with `check`, stop the
    benchmark if it fails."""
    started = time.perf_counter()
    process = subprocess.Popen(command, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    peak = [0]

    def sample():
        while process.poll() is None:
            peak[0] = max(peak[0], tree_pss(process.pid))
            time.sleep(0.5)

    sampler = threading.Thread(target=sample, daemon=True)
    if sample_memory:
        sampler.start()
    output = process.communicate()[0]
    if sample_memory:
        sampler.join()
    if process.returncode and check:
        sys.exit(f"{command[2:4]} failed:\n{output[-3000:]}")
    return time.perf_counter() - started, peak[0], output


class InProcess:
    """The student's own compute, without a sandbox: the notebook's cells and the
    checks in this process, one thread, checks from one reused pytest session
    (as our workers have) and no traceback display (our sandbox skips it too)."""

    def __init__(self, course, notebooks, warm_up=()):
        """`notebooks`: {name: path}; `warm_up`: names to run once first (imports, caches)."""
        import nbformat
        import torch
        from IPython.core.interactiveshell import InteractiveShell

        from autograder.course import Course
        from autograder.checks.runner import CheckSession
        from autograder.grading.notebook import read_notebook, sanitize

        torch.set_num_threads(1)
        source = nbformat.read(course / "source/causal_attention/causal_attention.ipynb", as_version=4)
        release = nbformat.read(course / "release/causal_attention/causal_attention.ipynb", as_version=4)
        self.cells = {name: sanitize(read_notebook(path), source, release).cells for name, path in notebooks.items()}
        self.shell = InteractiveShell.instance()
        self.shell.showtraceback = lambda *args, **kwargs: None
        self.checks = CheckSession(Course(course).assignment("causal_attention"))
        for name in warm_up:
            self.warm(name)
        gc.freeze()  # as the sandbox does before it forks: children don't copy what GC would touch

    def _run_cells(self, kind):
        # Forget the last student's names; IPython's reset() would also run a full
        # garbage collection, which our sandbox never pays for.
        for name in [n for n in self.shell.user_ns if n not in self.shell.user_ns_hidden]:
            del self.shell.user_ns[name]
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            for _, code in self.cells[kind]:
                self.shell.run_cell(code, store_history=False)

    def warm(self, kind):
        """(cells, checks) seconds in this long-lived interpreter, as if students shared one."""
        from autograder.inside.student import NamespaceStudent

        started = time.perf_counter()
        self._run_cells(kind)
        cells = time.perf_counter() - started
        self.checks.run(NamespaceStudent(self.shell.user_ns), 1)
        return cells, time.perf_counter() - started - cells

    def fresh_cells(self, kind, timeout=None, checks=False):
        """(seconds, finished) to run the cells in a fresh process forked from this warm one,
        as any grader that gives each student a clean interpreter must (fork and exit
        included); with `checks`, the checks too, in that same process after the cells
        (skipped if the cells end the process). Stopped after `timeout` seconds.
        `finished`: the process ran to its end."""
        from autograder.inside.student import NamespaceStudent

        started = time.perf_counter()
        pid = os.fork()
        if pid == 0:
            try:
                self._run_cells(kind)
                if checks:
                    self.checks.run(NamespaceStudent(self.shell.user_ns), 1)
            finally:
                os._exit(0)
        while True:
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                return time.perf_counter() - started, os.waitstatus_to_exitcode(status) == 0
            if timeout and time.perf_counter() - started > timeout:
                os.kill(pid, 9)
                os.waitpid(pid, 0)
                return timeout, False
            time.sleep(0.002)


def notebook_path(course, index):
    return course / "submitted" / f"s{index:03d}_{KINDS[index % 4]}" / "causal_attention" / "causal_attention.ipynb"


def students_compute(course, kinds, at_once=1, fresh_checks=False):
    """{student: seconds} of `_students_compute`, measured in a process forked for it, so
    that no measurement inherits what an earlier one left in memory."""
    reader, writer = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(reader)
        code = 1
        try:
            seconds = _students_compute(course, kinds, at_once, fresh_checks)
            with os.fdopen(writer, "w") as out:
                json.dump(seconds, out)
            code = 0
        except BaseException:
            traceback.print_exc()
        finally:
            os._exit(code)
    os.close(writer)
    with os.fdopen(reader) as answer:
        data = answer.read()
    _, status = os.waitpid(pid, 0)
    if status != 0 or not data:
        sys.exit("measuring the students' compute failed (see above)")
    return json.loads(data)


def _students_compute(course, kinds, at_once=1, fresh_checks=False):
    """Seconds of the students' own compute for each notebook: its cells in a fresh process
    (stopped at the time limit) plus its checks, without a sandbox. The checks run in the
    measuring process, warm from the notebooks before (as our grading workers are), so a
    notebook that ends its process or hits the limit gets none (as in grading, where its
    checks then fail at once). The student's code the checks call also runs warm there,
    which no grader that isolates students can do: this is a bound, not a grader.

    `fresh_checks`: the checks run in the notebook's own fresh process, after its cells:
    the simplest grader that gives every student a clean interpreter, without a sandbox.
    Both halves of each check (the student's code it calls, and the comparisons) then
    start cold in every notebook.

    `at_once`: how many notebooks are measured side by side, each in its own measuring
    process taking the next notebook as soon as it is free. With one per core, the cores
    share their caches and memory bandwidth as they do in any grading that uses them all,
    which could make each notebook slower than with the other cores idle."""
    paths = {student: course / "submitted" / student / "causal_attention" / "causal_attention.ipynb"
             for student in kinds}
    global _MEASURER, _FRESH_CHECKS
    # Warmed on the untouched release and on the slow answer (the reference with extra work):
    # what the checks compute once and keep (the reference's values) is then computed, as in
    # a grading worker, which keeps it from one notebook to the next.
    warm_up = [next(s for s, kind in kinds.items() if not kind)] + [s for s, kind in kinds.items() if kind == "slow"][:1]
    _MEASURER = InProcess(course, paths, warm_up)
    _FRESH_CHECKS = fresh_checks
    if at_once == 1:
        return dict(_measure(item) for item in kinds.items())
    # Forked by hand: IPython's shell has replaced __main__, so a Pool could not find _measure.
    import multiprocessing

    context = multiprocessing.get_context("fork")
    todo, done = context.Queue(), context.Queue()
    for item in kinds.items():
        todo.put(item)
    measurers = []
    for _ in range(at_once):
        todo.put(None)
        pid = os.fork()
        if pid == 0:
            try:
                for item in iter(todo.get, None):
                    try:
                        done.put(_measure(item))
                    except Exception as error:  # one answer per item, or the parent waits forever
                        done.put((None, f"{item[0]}: {type(error).__name__}: {error}"))
            finally:
                done.close()
                done.join_thread()
                os._exit(0)
        measurers.append(pid)
    seconds = dict(done.get() for _ in kinds)
    for pid in measurers:
        os.waitpid(pid, 0)
    if None in seconds:
        sys.exit(f"measuring the students' compute failed: {seconds[None]}")
    return seconds


_MEASURER = None  # the warm InProcess that students_compute measures with (the measurers it forks inherit it)
_FRESH_CHECKS = False  # how it measures (see _students_compute)


def _measure(item):
    student, kind = item
    if _FRESH_CHECKS:
        return student, _MEASURER.fresh_cells(student, TIMEOUT, checks=True)[0]
    cells, finished = _MEASURER.fresh_cells(student, TIMEOUT)
    checks = 0.0
    if finished and kind in ("", "slow"):  # run the cells here too, then time the checks on them
        checks = _MEASURER.warm(student)[1]
    return student, cells + checks


def overhead_per_submission(python, course, tmp, rounds=5):
    """Per kind: seconds sandboxed (`--jobs 1`, no competition for the cores), and the
    student's own compute in a fresh process (cells and checks in a forked process) and
    in one shared warm process. Measured in alternating rounds so that
    drift in the machine's speed hits all alike; medians over the rounds."""
    in_process = InProcess(course, {kind: notebook_path(course, i) for i, kind in enumerate(KINDS)}, KINDS)
    sandboxed, fresh, warm = ({k: [] for k in KINDS} for _ in range(3))
    for round_ in range(rounds):
        out = tmp / f"single-{round_}"
        timed([python, "-m", "autograder.cli", "grade", "causal_attention",
               *[str(notebook_path(course, i).parents[1]) for i in range(min(8, len(list(course.glob("submitted/*")))))],
               "--course", str(course), "--jobs", "1", "--seed", "1", "--out", str(out)], course)
        for result in all_results(out):
            sandboxed[result.student_id.split("_")[1]].append(result.execution_time)
        for kind in KINDS:
            for _ in range(2):
                cells, checks = in_process.warm(kind)
                warm[kind].append(cells + checks)
                fresh[kind].append(in_process.fresh_cells(kind, checks=True)[0])
    return [{k: statistics.median(v) for k, v in d.items()} for d in (sandboxed, fresh, warm)]


def per_notebook_overhead(course, own):
    """Seconds each notebook's grading took beyond `own` (its compute measured alone), for
    every notebook of our runs of `course` (see compare). The grading time is the one the
    result records: from reading the notebook to its result, start-up not included. A result
    reused from an identical answer took no grading time of its own and is left out."""
    runs = [course / "graded" / "causal_attention", course.parent / f"{course.name}-second" / "graded" / "causal_attention"]
    return [result.execution_time - own[result.student_id]
            for run in runs if run.is_dir() for result in all_results(run) if not result.reused]


def compare(python, course, n, label, skip_nbgrader, sample_memory=False, timeout=None):
    """Grade `course`'s submissions with ours, nbgrader, ours again; returns ours' mean seconds."""
    limits = ["--timeout", str(timeout)] if timeout else []
    subprocess.run([python, "-m", "nbgrader", "generate_assignment", "causal_attention", "--force"],
                   cwd=course, check=True, capture_output=True)  # both graders start from the same release
    copies = {name: course.parent / f"{course.name}-{name}" for name in ("nbgrader", "second", "memory")}
    for copy in copies.values():
        shutil.copytree(course, copy)

    def ours(where, sample=False):
        return timed([python, "-m", "autograder.cli", "grade", "causal_attention", "submitted", *limits,
                      "--course", str(where), "--jobs", "2", "--seed", "1", "--verbose"], where, sample)

    print(f"\n== {label} class: {n} submissions, {os.cpu_count()} cores, course {course}")
    first, _, log = ours(course)
    print(f"autograder grade --jobs 2: {first:7.1f} s  ({first / n * 1000:.0f} ms per submission)")
    print("  " + " ".join(log.split("time spent:")[-1].split()))  # where the time went
    graded = all_results(course / "graded" / "causal_attention")
    for key, what in (("sandbox_cpu", "the student's sandboxed process"), ("grader_cpu", "the grader (checks, outputs)")):
        values = [v for v in (r.timings.get(key) for r in graded) if v is not None]
        if values:
            print(f"  CPU per submission, {what}: {statistics.mean(values) * 1000:.0f} ms")
    runs = [first]
    if not skip_nbgrader:
        nbgrader_limits = [f"--ExecutePreprocessor.timeout={timeout}"] if timeout else []
        # nbgrader exits non-zero when a notebook ends its kernel (the crashing answer), after
        # grading the others: that is its normal way of reporting it.
        theirs, _, log = timed([python, "-m", "nbgrader", "autograde", "causal_attention", "--create", "--force",
                                *nbgrader_limits], copies["nbgrader"], check=False)
        graded_by_nbgrader = len(list((copies["nbgrader"] / "autograded").glob("*/causal_attention/*.ipynb")))
        if graded_by_nbgrader < n - 3:
            sys.exit(f"nbgrader graded only {graded_by_nbgrader} of {n}:\n{log[-3000:]}")
        print(f"nbgrader autograde:        {theirs:7.1f} s  ({theirs / n * 1000:.0f} ms per submission;"
              f" {graded_by_nbgrader} notebooks written)")
        second, _, _ = ours(copies["second"])
        runs.append(second)
        print(f"autograder grade --jobs 2: {second:7.1f} s  (again, after nbgrader)")
        print(f"speed-up: {theirs / statistics.mean(runs):.1f}x"
              f"  (nbgrader against the mean of our two runs; {theirs / max(runs):.1f}x against the slower)")
    if sample_memory:
        _, pss, _ = ours(copies["memory"], sample=True)
        print(f"peak memory of autograder grade --jobs 2 (all its processes, PSS): {pss / 2**30:.2f} GiB")
    return statistics.mean(runs)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--n", type=int, default=100)
    parser.add_argument("--class", dest="kind", choices=["demo", "realistic", "both"], default="both")
    parser.add_argument("--skip-nbgrader", action="store_true")
    parser.add_argument("--shuffle", type=int, metavar="SEED",
                        help="grade the realistic class in an order shuffled with SEED (default: its slow,"
                             " crashing and looping answers first, where they cost a grader least)")
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="bench-"))
    python = sys.executable
    if args.kind in ("realistic", "both"):
        course, kinds = make_realistic_class(tmp / "realistic", args.n, order_seed=args.shuffle)
        order = sorted(kinds)
        print("realistic class order: " + ", ".join(f"{kind} answer {order.index(s) + 1}" for s, kind in kinds.items()
                                                     if kind) + f" of {args.n}"
              + (f" (shuffled with seed {args.shuffle})" if args.shuffle is not None else ""))
        # The compute is measured right before our first run and right after our last, and
        # their mean is used: like our runs around nbgrader's, so that the machine's drift
        # over the run (5% between runs minutes apart here) hits both sides alike. It is
        # measured one notebook at a time and with one per core side by side (see
        # students_compute): the second is what the cores can give when all of them work.
        # Beside it, the simplest isolating grader: a fresh process per notebook for its
        # cells and its checks, without a sandbox; what ours costs beyond that is what the
        # sandbox and the probes' round trips cost.
        cores = 2
        before_each = students_compute(course, kinds)
        before_busy = sum(students_compute(course, kinds, at_once=cores).values())
        before_fresh = sum(students_compute(course, kinds, fresh_checks=True).values())
        ours = compare(python, course, args.n, "realistic", args.skip_nbgrader, timeout=TIMEOUT)
        after_fresh = sum(students_compute(course, kinds, fresh_checks=True).values())
        after_busy = sum(students_compute(course, kinds, at_once=cores).values())
        after_each = students_compute(course, kinds)
        before, after = sum(before_each.values()), sum(after_each.values())
        total, busy, fresh = (before + after) / 2, (before_busy + after_busy) / 2, (before_fresh + after_fresh) / 2
        own = {student: (before_each[student] + after_each[student]) / 2 for student in kinds}

        def overhead(compute):
            return (cores * ours - compute) / args.n * 1000

        print(f"the students' own compute, one notebook at a time: {total:.1f} s in all"
              f" ({total / args.n * 1000:.0f} ms per notebook; {before:.1f} s before our first run,"
              f" {after:.1f} s after our last); the physical limit on {cores} cores: {total / cores:.1f} s")
        print(f"  measured {cores} side by side, every core busy as in grading: {busy:.1f} s"
              f" ({busy / total - 1:+.1%}; {before_busy:.1f} s before, {after_busy:.1f} s after);"
              f" the limit then: {busy / cores:.1f} s")
        print(f"fraction of the limit reached: {total / cores / ours:.0%} (with every core busy: {busy / cores / ours:.0%});"
              f" overhead per notebook beyond the students' compute: {overhead(total):.0f} ms"
              f" ({overhead(busy):.0f} ms beyond the compute with every core busy)")
        print("  (how much of it each notebook adds and how much a run pays once: benchmarks/fixed_vs_marginal.py)")
        beyond = per_notebook_overhead(course, own)
        print(f"per-notebook overhead, each notebook's grading time in our runs beyond its own compute:"
              f" {statistics.mean(beyond) * 1000:.0f} ms on average, median {statistics.median(beyond) * 1000:.0f} ms,"
              f" {len(beyond)} gradings (what the issue measured as 136 ms with one worker;"
              f" a run's start-up and its last results' writing are not in it, the whole-run figure above has them)")
        print(f"the simplest isolating grader, each notebook's cells and checks in one fresh process"
              f" without a sandbox: {fresh:.1f} s of compute ({before_fresh:.1f} s before, {after_fresh:.1f} s after),"
              f" {fresh / cores:.1f} s on {cores} cores; ours takes {ours / (fresh / cores):.2f}x that,"
              f" {overhead(fresh):.0f} ms per notebook beyond it")
    if args.kind in ("demo", "both"):
        course = make_course(tmp / "demo", args.n)
        compare(python, course, args.n, "demo", args.skip_nbgrader, sample_memory=True)
        graded, fresh, warm = overhead_per_submission(python, course, tmp)
        print("one worker (--jobs 1), per submission:")
        for kind in KINDS:
            print(f"  {kind}: {graded[kind] * 1000:6.0f} ms in the sandbox, {fresh[kind] * 1000:6.0f} ms in a fresh"
                  f" process without one, {warm[kind] * 1000:6.0f} ms in a warm shared process")
        print("per-submission overhead beyond the student's own compute in a fresh process:"
              f" {statistics.mean(graded[k] - fresh[k] for k in KINDS) * 1000:.0f} ms"
              f" (beyond a warm process shared by all students, which no isolating grader can use:"
              f" {statistics.mean(graded[k] - warm[k] for k in KINDS) * 1000:.0f} ms)")
    shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
