"""Whether two versions of the grader give the same grades, check by check.

    python benchmarks/same_grades.py --base REV [--seed 0]

Checks out REV in a temporary git worktree and, with that tree and with this one, grades
the demo's example students and every corpus entry of every assignment (`autograder demo`
and `autograder validate --out`, each in a copy of the course of its own tree). Prints, per
assignment, how many results were compared and every student or corpus entry whose score,
status or any check's outcome differs. A refactoring that changes no grade prints
"no differences" and exits 0; any difference exits 1.
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent.parent


def autograder(tree, *args):
    env = {**os.environ, "PYTHONPATH": str(tree)}
    done = subprocess.run([sys.executable, "-m", "autograder.cli", *args], cwd=tree, env=env,
                          capture_output=True, text=True)
    if done.returncode not in (0, 1):  # validate says 1 when its floors are not met; grades are still there
        raise SystemExit(f"`autograder {' '.join(args)}` with {tree} failed:\n{done.stdout[-2000:]}{done.stderr[-2000:]}")
    return done


def course_copy(tree, target):
    """The tree's own course (exercises, solutions, config), nothing generated or graded."""
    target.mkdir(parents=True)
    for part in ("exercises", "solutions"):
        shutil.copytree(tree / part, target / part, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(tree / "nbgrader_config.py", target)
    return target


def outcomes(folder):
    """{student: (status, score, {(cell, check): passed})} of every result file in `folder`."""
    found = {}
    for path in sorted(Path(folder).glob("*.json")):
        if path.name.startswith("."):
            continue
        data = json.loads(path.read_text())
        checks = {(test.get("extra_data", {}).get("grade_id", test["name"]), check["name"]): check["passed"]
                  for test in data["tests"] for check in test.get("extra_data", {}).get("checks", [])}
        found[data["extra_data"]["student_id"]] = (data["extra_data"]["status"], data["score"], checks)
    return found


def grades(tree, scratch, seed):
    """{(what, assignment): outcomes} for the demo and the corpus of every assignment."""
    course = course_copy(tree, scratch / "course")
    autograder(tree, "demo", "--course", str(course))
    found = {}
    demo = course / "demo" if (course / "demo" / "graded").is_dir() else course  # the demo's own copy, since issue 35
    for assignment in sorted(p.name for p in (demo / "graded").iterdir()):
        found[("demo", assignment)] = outcomes(demo / "graded" / assignment)
        out = scratch / f"corpus-{assignment}"
        autograder(tree, "validate", assignment, "--course", str(course), "--seed", str(seed), "--out", str(out))
        found[("corpus", assignment)] = outcomes(out)
    return found


def differences(before, after):
    lines = []
    for key in sorted(set(before) | set(after)):
        old, new = before.get(key, {}), after.get(key, {})
        for student in sorted(set(old) | set(new)):
            if old.get(student) != new.get(student):
                a, b = old.get(student), new.get(student)
                flipped = sorted(c for c in set(a[2] if a else {}) | set(b[2] if b else {})
                                 if (a and a[2].get(c)) != (b and b[2].get(c)))
                lines.append(f"{key[0]} {key[1]} {student}: {a and a[:2]} -> {b and b[:2]}"
                             + (f"; checks flipped: {flipped[:5]}" if flipped else ""))
    return lines


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base", required=True, help="the git revision to compare this tree with")
    parser.add_argument("--seed", type=int, default=0, help="the corpus's input seed (default 0)")
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="same-grades-"))
    base = tmp / "base"
    subprocess.run(["git", "worktree", "add", "--detach", str(base), args.base], cwd=HERE, check=True,
                   capture_output=True)
    try:
        before = grades(base, tmp / "run-base", args.seed)
        after = grades(HERE, tmp / "run-this", args.seed)
    finally:
        subprocess.run(["git", "worktree", "remove", "--force", str(base)], cwd=HERE, capture_output=True)
        shutil.rmtree(tmp, ignore_errors=True)
    for key in sorted(after):
        print(f"{key[0]} {key[1]}: {len(after[key])} results (base {len(before.get(key, {}))})")
    found = differences(before, after)
    print("\n".join(found) if found else f"no differences from {args.base}: every score, status and check outcome")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
