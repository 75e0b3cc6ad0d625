"""`autograder serve` for a term: its resident memory after 1,000 submissions against after 100.

    python benchmarks/service_memory.py [--n 1000] [--first 100] [--distinct 20] [--jobs 2]

A fresh service grades `--n` students' notebooks, one each, handed in 8 at a time: `--distinct`
different notebooks (the reference with a comment of its own each), so most are answered from
another student's result after that grading's time, and every one is recorded as the batch
records it (result file, feedback page, gradebook, autograded notebook; grades.csv, the class
report and changes.csv when the queue is quiet). It reads the service process's resident
memory (VmRSS; its grading workers are processes of their own) once the first `--first` are
recorded and the queue has been quiet, and again after all `--n`, and prints both and their
ratio (the bound this project holds the service to: 1.25x).
"""
import argparse
import concurrent.futures
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(HERE / "tests"), str(HERE)]

from helpers import append_to_first_answer, make_gradebook, new_course  # noqa: E402
from service_helpers import issue_tokens, notebook_bytes, serve, submit, wait_graded  # noqa: E402

ASSIGNMENT = "causal_attention"


def resident_mb(pid):
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS")


def notebooks(course, count):
    import nbformat

    from autograder.authoring.examples import filled_notebook
    from autograder.course import Course

    assignment = Course(course).assignment(ASSIGNMENT)
    reference = filled_notebook(nbformat.read(assignment.release_notebook, as_version=4), assignment, {})
    return [notebook_bytes(append_to_first_answer(reference, f"# version {i}\n")) for i in range(count)]


def hand_in(served, students, files):
    def one(index_student):
        index, student = index_student
        status, answer = submit(served, student, files[index % len(files)])
        if status != 202:
            raise RuntimeError(f"{student}: {status} {answer}")
        return wait_graded(served, student, answer["id"], timeout=1800)["status"]

    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        return list(pool.map(one, students))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=1000)
    parser.add_argument("--first", type=int, default=100)
    parser.add_argument("--distinct", type=int, default=20)
    parser.add_argument("--jobs", type=int, default=2)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        course = make_gradebook(new_course(Path(scratch)))
        settings = course / "exercises" / ASSIGNMENT / "assignment.toml"
        settings.write_text(settings.read_text() + "\n[service]\nrequests_per_minute = 100000\n")
        students = [f"s{k:04d}" for k in range(args.n)]
        tokens = issue_tokens(course, ASSIGNMENT, students, tas=())
        files = notebooks(course, args.distinct)
        served = serve(course, ASSIGNMENT, jobs=args.jobs)
        served.tokens = tokens
        try:
            started = time.monotonic()
            statuses = hand_in(served, list(enumerate(students[:args.first])), files)
            time.sleep(5)  # the queue is quiet: every output finishes
            after_first = resident_mb(served.process.pid)
            statuses += hand_in(served, list(enumerate(students))[args.first:], files)
            time.sleep(5)
            after_all = resident_mb(served.process.pid)
            seconds = time.monotonic() - started
            graded = len(list((course / "graded" / ASSIGNMENT).glob("s*.json")))
        finally:
            served.stop()
    print(f"{args.n} students, {args.distinct} different notebooks, --jobs {args.jobs}: {seconds:.0f} s;"
          f" {statuses.count('graded')} graded, {graded} result files")
    print(f"service resident memory after {args.first}: {after_first:.0f} MB; after {args.n}: {after_all:.0f} MB"
          f" ({after_all / after_first:.2f}x, +{after_all - after_first:.0f} MB; the bound: 1.25x)")
    return 0 if statuses.count("graded") == args.n == graded else 1


if __name__ == "__main__":
    sys.exit(main())
