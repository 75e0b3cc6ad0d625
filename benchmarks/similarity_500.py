"""Benchmark: the similarity report for a class of N notebooks (default 500).

    python benchmarks/similarity_500.py [--n 500]

The class: the corpus's entries in turn, each copy signed with a comment of
its own (see tests/helpers.py), written to disk with a result record each, so
the timing covers reading the notebooks, fingerprinting and ranking all pairs
and writing similarity.csv and similarity.html.
"""
import argparse
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(HERE / "tests"))

import nbformat  # noqa: E402

from autograder.authoring.corpus import load, notebook  # noqa: E402
from autograder.grading.notebook import grade_cells  # noqa: E402
from autograder.outputs.folder import GradedFolder
from autograder.runs.similarity import write_report  # noqa: E402
from autograder.record import GRADED, CellScore, CheckOutcome, Result  # noqa: E402
from helpers import assignment_of, signed  # noqa: E402


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=500)
    args = parser.parse_args()
    assignment = assignment_of()
    release = nbformat.read(assignment.release_notebook, as_version=4)
    entries = load(assignment, list(grade_cells(nbformat.read(assignment.source_notebook, as_version=4))))
    made = [notebook(entry, release, assignment) for entry in entries]
    with tempfile.TemporaryDirectory() as tmp:
        results = []
        for index in range(args.n):
            path = Path(tmp) / f"s{index:04d}.ipynb"
            nbformat.write(signed(made[index % len(made)], f"student {index}"), path)
            failed = CheckOutcome("test_values", "values", False, 1.0, f"largest difference {index % 17}")
            results.append(Result(f"s{index:04d}", assignment.name, GRADED, 1.0,
                                  [CellScore("ex1", 1.0, 2.0, "", [failed])], path=str(path)))
        started = time.perf_counter()
        _, _, pairs, _ = write_report(GradedFolder(tmp), assignment.title, results, release)
        seconds = time.perf_counter() - started
    print(f"similarity report for {args.n} notebooks: {seconds:.1f} s ({len(pairs)} pairs share something rare)")


if __name__ == "__main__":
    main()
