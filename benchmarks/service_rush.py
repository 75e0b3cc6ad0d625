"""A deadline rush on `autograder serve`, side by side with `autograder grade` on the same notebooks.

    python benchmarks/service_rush.py [--n 200] [--spread 60] [--jobs 2]

The realistic class (tests/helpers.py make_realistic_class: every corpus mistake and
alternative style, slow, crashing and looping answers, the untouched release, signed copies
of the reference; a 10 s time limit) is graded twice, in two copies of one course, with the
same seed:

1. `autograder grade --jobs N` over submitted/, timed (the batch's wall time);
2. a fresh `autograder serve --jobs N`, to which N concurrent clients (one thread per student)
   hand in their notebooks at moments spread evenly over `--spread` seconds, then ask for
   their result once a second until it is graded.

It prints: submissions lost (acknowledged but never graded) and server errors (5xx), which
must both be 0; results that differ from the batch's (status, score, every check's outcome
and message, the cells' errors), which must be 0; the time from the first notebook handed in
to the last one graded, against the batch's wall time (the ratio); and p50 and p95 of each
submission's time from being handed in to its feedback (the service's own clock: received
and graded).

Then, on the idle service, one lone submission: its time to feedback as a client polling
every 10 ms sees it, against its own grading time (the result's execution_time), and an
identical resubmission's.
"""
import argparse
import json
import random
import shutil
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from datetime import datetime
from pathlib import Path

HERE = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(HERE / "tests"), str(HERE)]

from helpers import example, make_gradebook, make_realistic_class  # noqa: E402
from service_helpers import issue_tokens, notebook_bytes, request, serve, submit  # noqa: E402

ASSIGNMENT = "causal_attention"
SEED = 2026
# Due long after the rush, with one check shown only after the due date and one exercise never:
# every answer the students read is scanned for them.
SERVICE_SETTINGS = """
[late]
due = 2099-01-01T00:00:00Z

[service]
requests_per_minute = 600

[visibility]
"ex3::test_reference_values" = "after_due_date"
"ex8_model" = "hidden"
"""


def hidden_texts(result):
    """Descriptions and messages (and the numbers in them) of the checks hidden by SERVICE_SETTINGS."""
    shown, hidden = set(), set()
    for test in result["tests"]:
        cell = test.get("extra_data", {}).get("grade_id", test["name"])
        for check in test["extra_data"]["checks"]:
            secret = cell == "ex8_model" or (cell == "ex3" and check["name"].split("[")[0] == "test_reference_values")
            (hidden if secret else shown).update(t for t in (check["description"], check["message"]) if t)
    return hidden - shown


def setup(tmp, n):
    course, _ = make_realistic_class(tmp / "class", n)
    settings = course / "exercises" / ASSIGNMENT / "assignment.toml"
    settings.write_text(settings.read_text() + "\n[limits]\ntimeout = 10\n"
                        if "[limits]" not in settings.read_text() else settings.read_text())
    make_gradebook(course)
    service = tmp / "service-course"
    shutil.copytree(course, service)
    shutil.rmtree(service / "submitted")
    (service / "graded" / ASSIGNMENT).mkdir(parents=True)
    (service / "graded" / ASSIGNMENT / ".batch.json").write_text(json.dumps({"seed": SEED}))  # the batch's seed
    with open(service / "exercises" / ASSIGNMENT / "assignment.toml", "a") as handle:
        handle.write(SERVICE_SETTINGS)
    students = sorted(p.name for p in (course / "submitted").iterdir())
    return course, service, students


def outcome(result):
    """What must be equal between the two ways of grading: all but timings, paths and ids."""
    return (result["extra_data"]["status"], result["score"],
            [(t["name"], t["score"], [(c["name"], c["passed"], c["message"]) for c in t["extra_data"]["checks"]])
             for t in result["tests"]],
            [(e["cell"], e["error"]) for e in result["extra_data"]["cell_errors"]])


def batch(course, jobs):
    started = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "autograder.cli", "grade", ASSIGNMENT, "submitted", "--course",
                           str(course), "--jobs", str(jobs), "--seed", str(SEED)], cwd=course, capture_output=True,
                          text=True)
    wall = time.perf_counter() - started
    if "Traceback" in done.stdout + done.stderr:
        raise SystemExit(done.stdout[-3000:] + done.stderr[-3000:])
    results = {p.stem: json.loads(p.read_text()) for p in (course / "graded" / ASSIGNMENT).glob("[!.]*.json")}
    return wall, results


def rush(served, course, students, spread):
    """Every student hands in at their moment; returns (acknowledged {student: id}, 5xx count)."""
    moments = sorted(random.Random(SEED).uniform(0, spread) for _ in students)
    acknowledged, errors, seen, lock = {}, [], {}, threading.Lock()
    start = time.perf_counter()

    def client(student, moment):
        time.sleep(max(0.0, moment - (time.perf_counter() - start)))
        notebook = course / "submitted" / student / ASSIGNMENT / f"{ASSIGNMENT}.ipynb"
        status, answer = submit(served, student, notebook)
        if status >= 500 or status != 202:
            with lock:
                errors.append((student, status, answer))
            return
        with lock:
            acknowledged[student] = answer["id"]
        while True:
            time.sleep(1.0)
            code, answer, _ = request(f"{served.base}/api/submissions/{answer['id']}", served.tokens[student])
            if code >= 500:
                with lock:
                    errors.append((student, code, answer))
                return
            if code == 200 and answer["status"] in ("graded", "error"):
                cookie = request(f"{served.base}/login/{served.tokens[student]}")[2]["set-cookie"].split(";")[0]
                page = request(answer["feedback_url"], cookie=cookie)[1]
                with lock:
                    seen[student] = json.dumps(answer) + page
                return

    threads = [threading.Thread(target=client, args=(s, m)) for s, m in zip(students, moments)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return acknowledged, errors, seen


def lone(served, course):
    """(time to feedback a client polling every 10 ms sees, its grading time, the identical resubmission's)."""
    served.tokens.update(issue_tokens(course, ASSIGNMENT, ["lone"], tas=()))
    time.sleep(5)  # idle: the rush's last grades.csv and class report are written
    times = []
    for attempt in range(2):
        started = time.perf_counter()
        status, answer = submit(served, "lone", notebook_bytes(example("ada")))
        assert status == 202, answer
        while answer["status"] not in ("graded", "error"):
            time.sleep(0.01)
            _, answer, _ = request(f"{served.base}/api/submissions/{answer['id']}", served.tokens["lone"])
        times.append(time.perf_counter() - started)
        if attempt == 0:
            result = json.loads((course / "service" / "results" / ASSIGNMENT / f"{answer['id']}.json").read_text())
            own = result["execution_time"]
            time.sleep(3)  # idle again: the recorder has written the class report and grades.csv
    return times[0], own, times[1]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=200)
    parser.add_argument("--spread", type=float, default=60.0, help="seconds over which the clients hand in")
    parser.add_argument("--jobs", type=int, default=2)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        tmp = Path(scratch)
        course, service_course, students = setup(tmp, args.n)
        print(f"{len(students)} notebooks (realistic class), --jobs {args.jobs}, clients spread over {args.spread:g} s")
        batch_wall, batch_results = batch(course, args.jobs)
        print(f"autograder grade --jobs {args.jobs}: {batch_wall:.1f} s")
        tokens = issue_tokens(service_course, ASSIGNMENT, students, tas=())
        served = serve(service_course, ASSIGNMENT, jobs=args.jobs)
        served.tokens = tokens
        try:
            acknowledged, errors, seen = rush(served, course, students, args.spread)
            deadline = time.monotonic() + 600
            database = sqlite3.connect(service_course / "service" / "service.db")
            while database.execute("SELECT COUNT(*) FROM submissions WHERE status IN ('queued', 'running')").fetchone()[0]:
                if time.monotonic() > deadline:
                    break
                time.sleep(0.5)
            rows = database.execute("SELECT student_id, id, status, received_at, graded_at FROM submissions").fetchall()
            lone_feedback, lone_own, identical = lone(served, service_course)
        finally:
            served.stop()
        leaks = [student for student, text in seen.items() if student in batch_results
                 and any(secret in text or json.dumps(secret)[1:-1] in text
                         for secret in hidden_texts(batch_results[student]))]
        fewest = min((len(hidden_texts(batch_results[s])) for s in seen if s in batch_results), default=0)
        print(f"answers and pages scanned for the checks hidden before the due date: {len(seen)} (each for at least"
              f" {fewest} hidden texts); with a trace of one: {len(leaks)}" + (f" ({', '.join(leaks[:5])})" if leaks else ""))
        code = report(students, acknowledged, errors, rows, service_course, batch_results, batch_wall,
                      served.log.read_text(), (lone_feedback, lone_own, identical))
        return code or (1 if leaks or len(seen) != len(acknowledged) else 0)


def report(students, acknowledged, errors, rows, service_course, batch_results, batch_wall, log, lone_times):
    """Print the figures; 1 when anything was lost, failed or differs from the batch."""
    lone_feedback, lone_own, identical = lone_times
    graded = {student: (sid, status, received, done) for student, sid, status, received, done in rows}
    lost = [s for s, sid in acknowledged.items() if graded.get(s, (None, None))[1] != "graded"]
    differ = []
    for student in students:
        if student in graded and graded[student][1] == "graded":
            path = service_course / "service" / "results" / ASSIGNMENT / f"{graded[student][0]}.json"
            if outcome(json.loads(path.read_text())) != outcome(batch_results[student]):
                differ.append(student)
    received = [datetime.fromisoformat(r) for _, r, d in [v[1:] for v in graded.values()] if d]
    finished = [datetime.fromisoformat(d) for _, r, d in [v[1:] for v in graded.values()] if d]
    latency = sorted((datetime.fromisoformat(d) - datetime.fromisoformat(r)).total_seconds()
                     for _, r, d in [v[1:] for v in graded.values()] if d)
    makespan = (max(finished) - min(received)).total_seconds()
    print(f"acknowledged {len(acknowledged)}, lost {len(lost)}, server errors {len(errors)}"
          f"{', Traceback in the log' if 'Traceback' in log else ''}; results that differ from the batch: {len(differ)}"
          + (f" ({', '.join(differ[:5])})" if differ else ""))
    print(f"first handed in to last graded: {makespan:.1f} s; the batch: {batch_wall:.1f} s;"
          f" ratio {makespan / batch_wall:.2f}x")
    print(f"handed in to feedback: p50 {statistics.median(latency):.1f} s,"
          f" p95 {latency[int(0.95 * (len(latency) - 1))]:.1f} s, max {latency[-1]:.1f} s")
    print(f"a lone submission on the idle service: feedback after {lone_feedback * 1000:.0f} ms, its own grading"
          f" {lone_own * 1000:.0f} ms (+{(lone_feedback - lone_own) * 1000:.0f} ms); an identical resubmission"
          f" {identical * 1000:.0f} ms")
    return 1 if lost or errors or differ else 0


if __name__ == "__main__":
    sys.exit(main())
