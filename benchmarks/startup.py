"""How long the commands take to start, this tree beside another version, measured in one run.

    python benchmarks/startup.py --base REV [--rounds 9]

Every `autograder` command, every `python -m autograder.cli` a test starts and every warm
sandbox pays the imports before it does anything. A refactoring of where modules live
(issue 48: the commands as a package, the sandbox by facility) must not make that slower.
Checks out REV in a temporary git worktree and, alternating the two trees round by round,
times a few start-ups in fresh interpreters: the parser (`--help`), one command's options
(`export --help`), a dry run of `grade` on an empty folder (it reads the course and asks
whether a sandbox works) and the imports a grading worker makes. Prints each one's least
time with each tree and their ratio (this tree / REV); exits 1 when any ratio is above 1.2.
"""
import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent.parent
BOUND = 1.2


def starts(empty):
    """(what, arguments to python) for each start-up measured."""
    cli = ["-m", "autograder.cli"]
    return [("autograder --help", [*cli, "--help"]),
            ("autograder export --help", [*cli, "export", "--help"]),
            ("autograder grade --dry-run (nothing to grade)", [*cli, "grade", "causal_attention", str(empty),
                                                               "--dry-run"]),
            ("a grading worker's imports", ["-c", "import autograder.grading.submission"])]


def timed(tree, args):
    env = {**os.environ, "PYTHONPATH": str(tree)}
    started = time.perf_counter()
    done = subprocess.run([sys.executable, *args], cwd=tree, env=env, capture_output=True, text=True)
    seconds = time.perf_counter() - started
    if done.returncode not in (0, 1):
        raise SystemExit(f"{' '.join(args)} with {tree} failed:\n{done.stdout[-1000:]}{done.stderr[-1000:]}")
    return seconds


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base", required=True, help="the git revision to compare this tree with")
    parser.add_argument("--rounds", type=int, default=9, help="start-ups of each kind with each tree (default 9)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="startup-") as scratch:
        base = Path(scratch) / "base"
        subprocess.run(["git", "-C", str(HERE), "worktree", "add", "--detach", "-q", str(base), args.base], check=True)
        try:
            empty = Path(scratch) / "nothing"
            empty.mkdir()
            best = {}
            for _ in range(args.rounds):  # alternating, so a busy moment costs both trees alike
                for what, command in starts(empty):
                    for label, tree in (("base", base), ("this", HERE)):
                        seconds = timed(tree, command)
                        best[what, label] = min(best.get((what, label), seconds), seconds)
        finally:
            subprocess.run(["git", "-C", str(HERE), "worktree", "remove", "--force", str(base)], check=False)
    worst = 0.0
    print(f"least of {args.rounds} start-ups each, {args.base} beside this tree:")
    for what, _ in starts(Path(".")):
        ratio = best[what, "this"] / best[what, "base"]
        worst = max(worst, ratio)
        print(f"  {what}: {best[what, 'base']:.3f} s -> {best[what, 'this']:.3f} s ({ratio:.2f}x)")
    print("no slower" if worst <= BOUND else f"slower: {worst:.2f}x is above {BOUND}x")
    return 0 if worst <= BOUND else 1


if __name__ == "__main__":
    sys.exit(main())
