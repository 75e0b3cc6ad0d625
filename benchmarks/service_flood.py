"""One student floods `autograder serve`; the other students' feedback, side by side with no flood.

    python benchmarks/service_flood.py [--n 30] [--flood 60] [--spread 10] [--jobs 2]

The realistic class (tests/helpers.py make_realistic_class: slow, crashing and looping answers,
the untouched release, corpus mistakes and alternatives, signed copies of the reference; a 10 s
time limit) of `--n` students hands in over `--spread` seconds, each one notebook, to a fresh
`autograder serve` with the assignment's default settings (20 attempts a day), twice:

1. alone;
2. while one more student sends `--flood` different notebooks (the reference with a comment of
   its own each: no identical answers) within the same seconds, starting first.

It prints, for the class, p50 and p95 of the time from handing in to feedback (the service's
own clock: received and graded) in both runs and their ratio (the issue's target: p95 within
1.25x); submissions lost (acknowledged but never graded) and server errors, which must be 0;
and what the flood got: acknowledged, refused, graded, and the bytes its stored uploads take.
"""
import argparse
import json
import shutil
import sqlite3
import statistics
import sys
import tempfile
import threading
import time
from datetime import datetime
from pathlib import Path

HERE = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(HERE / "tests"), str(HERE)]

from helpers import append_to_first_answer, make_gradebook, make_realistic_class  # noqa: E402
from service_helpers import issue_tokens, notebook_bytes, serve, submit  # noqa: E402

ASSIGNMENT = "causal_attention"
SEED = 2026
FLOODER = "zz_flood"


def setup(tmp, n):
    """(a course to serve, {student: notebook bytes}) of the realistic class, nothing graded."""
    course, _ = make_realistic_class(tmp / "class", n)
    settings = course / "exercises" / ASSIGNMENT / "assignment.toml"
    settings.write_text(settings.read_text() + "\n[limits]\ntimeout = 10\n\n[service]\nrequests_per_minute = 600\n")
    make_gradebook(course)
    notebooks = {p.parent.parent.name: p.read_bytes() for p in (course / "submitted").glob(f"*/{ASSIGNMENT}/*.ipynb")}
    shutil.rmtree(course / "submitted")
    (course / "graded" / ASSIGNMENT).mkdir(parents=True, exist_ok=True)
    (course / "graded" / ASSIGNMENT / ".batch.json").write_text(json.dumps({"seed": SEED}))
    return course, notebooks


def flood_notebooks(course, count):
    import nbformat

    from autograder.authoring.examples import filled_notebook
    from autograder.course import Course

    assignment = Course(course).assignment(ASSIGNMENT)
    reference = filled_notebook(nbformat.read(assignment.release_notebook, as_version=4), assignment, {})
    return [notebook_bytes(append_to_first_answer(reference, f"# flood {i}\n")) for i in range(count)]


def run(tmp, name, course, notebooks, flood, spread, jobs):
    """Serve a fresh copy of `course`; the class hands in over `spread` s while the flood (bytes of
    notebooks, maybe none) goes in first. Returns the measurements."""
    copy = tmp / name
    shutil.copytree(course, copy)
    students = sorted(notebooks)
    tokens = issue_tokens(copy, ASSIGNMENT, [*students, FLOODER], tas=())
    served = serve(copy, ASSIGNMENT, jobs=jobs)
    served.tokens = tokens
    acknowledged, errors, refused, lock = {}, [], [], threading.Lock()
    start = time.perf_counter()

    def hand_in(student, notebook, moment):
        time.sleep(max(0.0, moment - (time.perf_counter() - start)))
        status, answer = submit(served, student, notebook)
        with lock:
            if status == 202:
                acknowledged.setdefault(student, []).append(answer["id"])
            elif status >= 500:
                errors.append((student, status, answer))
            else:
                refused.append((student, status))

    threads = [threading.Thread(target=hand_in, args=(FLOODER, notebook, spread * i / max(1, len(flood)) / 2))
               for i, notebook in enumerate(flood)]
    threads += [threading.Thread(target=hand_in, args=(student, notebooks[student], 0.5 + spread * i / len(students)))
                for i, student in enumerate(students)]
    try:
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        database = sqlite3.connect(copy / "service" / "service.db")
        deadline = time.monotonic() + 1800
        while database.execute("SELECT COUNT(*) FROM submissions WHERE status IN ('queued', 'running')").fetchone()[0]:
            if time.monotonic() > deadline:
                break
            time.sleep(0.5)
        rows = database.execute("SELECT student_id, id, status, received_at, graded_at FROM submissions").fetchall()
        errors += [(FLOODER, "log", "Traceback")] if "Traceback" in served.log.read_text() else []
    finally:
        served.stop()
    waits = [(datetime.fromisoformat(graded) - datetime.fromisoformat(received)).total_seconds()
             for student, _, status, received, graded in rows if student != FLOODER and status == "graded"]
    graded_ids = {row[1] for row in rows if row[2] in ("graded", "error", "replaced")}  # replaced: told, not lost
    lost = [i for ids in acknowledged.values() for i in ids if i not in graded_ids]
    flood_rows = [row for row in rows if row[0] == FLOODER]
    stored = sum((copy / "service" / "uploads" / ASSIGNMENT / f"{row[1]}.ipynb").stat().st_size for row in flood_rows
                 if (copy / "service" / "uploads" / ASSIGNMENT / f"{row[1]}.ipynb").exists())
    return {"waits": waits, "lost": lost, "errors": errors, "class": len(waits),
            "flood_acknowledged": len(acknowledged.get(FLOODER, [])),
            "flood_refused": sum(1 for student, _ in refused if student == FLOODER),
            "flood_graded": sum(1 for row in flood_rows if row[2] == "graded"),
            "flood_replaced": sum(1 for row in flood_rows if row[2] == "replaced"), "flood_bytes": stored}


def p95(values):
    return statistics.quantiles(values, n=20, method="inclusive")[18] if len(values) > 1 else values[0]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=30)
    parser.add_argument("--flood", type=int, default=60)
    parser.add_argument("--spread", type=float, default=10.0)
    parser.add_argument("--jobs", type=int, default=2)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        tmp = Path(scratch)
        course, notebooks = setup(tmp, args.n)
        flood = flood_notebooks(course, args.flood)
        print(f"{len(notebooks)} students (realistic class) over {args.spread:g} s, --jobs {args.jobs}; the flood:"
              f" {len(flood)} different notebooks from one student in the first {args.spread / 2:g} s")
        alone = run(tmp, "alone", course, notebooks, [], args.spread, args.jobs)
        flooded = run(tmp, "flooded", course, notebooks, flood, args.spread, args.jobs)
    for name, found in (("alone", alone), ("with the flood", flooded)):
        print(f"{name:>15}: the class's time to feedback p50 {statistics.median(found['waits']):.1f} s,"
              f" p95 {p95(found['waits']):.1f} s ({found['class']} graded); lost {len(found['lost'])},"
              f" server errors {len(found['errors'])}")
    print(f"p95 with the flood / alone: {p95(flooded['waits']) / p95(alone['waits']):.2f}x (target: at most 1.25x)")
    print(f"the flood: {flooded['flood_acknowledged']} acknowledged, {flooded['flood_refused']} refused,"
          f" {flooded['flood_graded']} graded, {flooded['flood_replaced']} replaced by a newer one; its stored uploads"
          f" take {flooded['flood_bytes'] / 2**20:.1f} MB")
    return 1 if alone["lost"] or flooded["lost"] or alone["errors"] or flooded["errors"] else 0


if __name__ == "__main__":
    sys.exit(main())
