"""Benchmark: the same class graded by the local pool and through Dask, side by side.

    python benchmarks/cluster_vs_local.py [--n 100]

One realistic class of N submissions (the corpus's mistakes and alternatives, the
untouched release, slow, crashing and looping answers, copies of the reference;
see tests/helpers.make_realistic_class), graded four times with the same seed:

1. `grade --jobs 2` (the local warm pool);
2. `grade --cluster local:2` (a LocalCluster started by the command, start-up included);
3. `grade --cluster ADDRESS` on an external cluster of `dask scheduler` and two
   `dask worker` processes started beforehand (as a deployment would have them);
4. `grade --jobs 2` again: the local time is the mean of 1 and 4 (this machine drifts).

It prints each wall time, the cluster/local ratios and the overhead per submission
the cluster adds, checks that all results are identical (timings aside), and measures
the scheduler's cost per task (empty tasks, and tasks that also do the attempt
bookkeeping grade_task does) to say how throughput grows with workers.
"""
import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

from dask_cluster import dask_cluster  # noqa: E402
from helpers import make_realistic_class  # noqa: E402

SEED, LIMITS = 5, {"timeout": 10.0}


def grade(course, out, scheduler=None, jobs=2):
    from autograder.course import Course
    from autograder.runs.batch import grade_batch

    started = time.perf_counter()
    report = grade_batch(Course(course).assignment("causal_attention"), [course / "submitted"], out_dir=out,
                         jobs=jobs, seed=SEED, limits=LIMITS, force=True, scheduler=scheduler)
    return time.perf_counter() - started, {r.student_id: r.without_timings() for r in report.results}


def _noop(index):
    return index


def _with_bookkeeping(index):
    """What grade_task does around grading: read the attempts, log its start and its end on the scheduler."""
    from distributed import get_client, get_worker

    from autograder.grading.cluster.protocol import ATTEMPTS_TOPIC

    topic = ATTEMPTS_TOPIC + "benchmark-" + str(get_worker().get_current_task())
    client = get_client()
    client.get_events(topic)
    client.log_event(topic, "start")
    client.log_event(topic, "done")
    return index


def per_task_cost(cluster, count=2000):
    """Seconds per task the scheduler and workers spend on (empty, bookkept) tasks."""
    costs = {}
    with cluster.client() as client:
        for name, function in (("empty", _noop), ("with attempt bookkeeping", _with_bookkeeping)):
            client.gather(client.map(function, range(50), key=[f"warm-{name}-{i}" for i in range(50)]))
            started = time.perf_counter()
            client.gather(client.map(function, range(count), key=[f"{name}-{i}" for i in range(count)]))
            costs[name] = (time.perf_counter() - started) / count
    return costs


def main():
    from autograder.grading.cluster.client import DaskScheduler

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=100)
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="cluster-bench-"))
    course, kinds = make_realistic_class(tmp / "class", args.n)
    print(f"{args.n} realistic submissions ({sum(1 for k in kinds.values() if k)} slow, crashing or looping),"
          f" {os.cpu_count()} cores")
    times, results = {}, {}
    times["local 1"], results["local"] = grade(course, tmp / "local1")
    print(f"  local --jobs 2            {times['local 1']:6.1f} s")
    times["local:2"], results["local:2"] = grade(course, tmp / "localcluster", DaskScheduler("local:2"))
    print(f"  --cluster local:2         {times['local:2']:6.1f} s (cluster start-up included)")
    with dask_cluster(tmp / "external", workers=2) as cluster:
        times["external"], results["external"] = grade(course, tmp / "external-out", DaskScheduler(cluster.address))
        print(f"  --cluster tcp:// (2 workers started beforehand) {times['external']:6.1f} s")
        costs = per_task_cost(cluster)
    times["local 2"], _ = grade(course, tmp / "local2")
    print(f"  local --jobs 2 again      {times['local 2']:6.1f} s")
    local = statistics.mean([times["local 1"], times["local 2"]])
    same = all(results[name] == results["local"] for name in ("local:2", "external"))
    print(f"results identical to local grading (timings aside): {'yes' if same else 'NO'}")
    for name in ("local:2", "external"):
        print(f"{name:>9}: cluster/local = {times[name] / local:.3f}; overhead per submission"
              f" {(times[name] - local) / args.n * 1000:+.0f} ms")
    per_submission = local / args.n * 2  # seconds of one worker per submission
    print(f"scheduler cost per task: {costs['empty'] * 1000:.2f} ms empty,"
          f" {costs['with attempt bookkeeping'] * 1000:.2f} ms with the attempt bookkeeping")
    limit = per_submission / costs["with attempt bookkeeping"]
    print(f"one submission takes a worker about {per_submission:.2f} s here, so one scheduler keeps up with"
          f" about {limit:.0f} such workers before its per-task cost, not the workers, bounds throughput")


if __name__ == "__main__":
    main()
