"""The class report for TAs: one self-contained HTML page per graded assignment.

Score distribution (a matplotlib histogram, embedded as PNG), per-exercise means
and full-mark rates, the most common diagnostics (which mistake, how many
students), the submissions that need a human (not gradable, stopped, tampered
with, answer cells that crash), the hidden checks that broke (where and why, for TAs
only: students read only that a check could not run) and the last batch's wall time.
"""
import base64
import io
import re
import statistics
import threading
import sys
from collections import defaultdict
from pathlib import Path

from autograder.course import write_atomically
from autograder.outputs.base import IMPORTS, Output
from autograder.outputs.feedback import _css, environment
from autograder.record import GRADED, broken_checks, cell_in_words

# A number as Python or torch prints it: 3, -0.5, 2., 1e-3, -1.2340e+02, nan, -inf.
NUMBER = re.compile(r"[-+]?(?:(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?|\b(?:nan|inf)\b)")
# Numbers side by side, as a printed tensor, list, tuple or shape holds them, however torch
# aligned them (spaces, line breaks), with their brackets and any "..." of a long tensor.
NUMBERS = re.compile(r"[\s,.\[\]()]*#(?:[\s,.\[\]()]*#)*[\s,.\[\]()]*")
SHOWN_DIAGNOSTICS = 15
SHOWN_NAMES = 8
SHOWN_REASONS = 4


def warm_up_report():
    """Import the plotting library now (about 0.3 s), so that the report costs less later."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot  # noqa: F401
    except Exception:  # only a head start: the report itself will say what is wrong
        # A failed import leaves the submodules it finished in sys.modules, bound to a
        # matplotlib module that never finished; the report's own import would then reuse
        # them and fail ("module 'matplotlib' has no attribute ..."). It starts afresh.
        for name in [n for n in sys.modules if n == "matplotlib" or n.startswith("matplotlib.")]:
            del sys.modules[name]


def histogram_png(totals, max_score):
    """A histogram of total scores as base64 PNG."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(figsize=(7, 3.2), dpi=110)
    bins = min(20, max(5, int(max_score) + 1))
    axes.hist(totals, bins=bins, range=(0, max_score), color="#3465a4", edgecolor="white")
    axes.set_xlabel("total score")
    axes.set_ylabel("students")
    axes.set_xlim(0, max_score)
    axes.yaxis.get_major_locator().set_params(integer=True)
    axes.spines[["top", "right"]].set_visible(False)
    figure.tight_layout()
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png")
    plt.close(figure)
    return base64.b64encode(buffer.getvalue()).decode()


def without_numbers(message):
    """`message` with every number, and every run of numbers (a printed tensor), as one "#":
    messages that differ only in their numbers (each student's random inputs) are one mistake."""
    return " ".join(NUMBERS.sub(" # ", NUMBER.sub("#", message)).split())


def common_diagnostics(results, titles):
    """Failed-check messages grouped across students (numbers ignored), most frequent first."""
    groups = defaultdict(set)
    for result in results:
        for cell, check in result.failed_checks():
            groups[(cell, without_numbers(check.message))].add((result.student_id, check.message))
    rows = []
    for (cell, _), hits in groups.items():
        students = sorted({student for student, _ in hits})
        example = sorted(hits)[0][1]
        rows.append({"exercise": titles.get(cell, cell).split(":")[0], "message": example,
                     "count": len(students), "students": students[:SHOWN_NAMES],
                     "more": max(0, len(students) - SHOWN_NAMES)})
    rows.sort(key=lambda row: (-row["count"], row["exercise"], row["message"]))
    return rows[:SHOWN_DIAGNOSTICS]


def needs_attention(results):
    rows = []
    for result in results:
        reasons = list(result.notes)
        if result.status != GRADED and not reasons:
            reasons.append(result.output)
        if result.cells and all(cell.unanswered for cell in result.cells):
            reasons.append("nothing answered: every exercise is as the release handed it out")
        for error in result.cell_errors:
            if not error.cell.startswith("check-"):  # a failing visible check is ordinary feedback
                last = error.error.strip().splitlines()[-1] if error.error.strip() else "an error"
                reasons.append(f"{cell_in_words(error.cell)} raised {last}")
        if len(reasons) > SHOWN_REASONS:
            reasons = reasons[:SHOWN_REASONS - 1] + [f"and {len(reasons) - SHOWN_REASONS + 1} more"]
        if reasons:
            rows.append({"student": result.student_id, "status": result.status,
                         "score": result.score, "reasons": reasons})
    return sorted(rows, key=lambda row: (row["status"] == "graded", row["student"]))


def similar_pairs(path, shown=5):
    """The first rows of similarity.csv (at `path`), or None when `autograder similarity` has not run."""
    import csv

    if path is None or not Path(path).exists():
        return None
    with open(path, newline="") as handle:
        return [row for _, row in zip(range(shown), csv.DictReader(handle))]


def not_graded(intake_rows):
    """intake.csv's rows for files that were not graded as a student's notebook (another upload of
    theirs was, the file is not a notebook, nobody's name is on it), for the report."""
    return [row for row in intake_rows if not row.get("outcome", "").startswith("graded")]


def render_report(assignment, results, layout, wall_time=None, similarity_csv=None, intake_rows=(), late=""):
    """The page; `late`: the assignment's late policy in words ("" without one)."""
    graded = [r for r in results if r.status == GRADED]
    penalised = [r for r in graded if r.late_penalty]
    cells = [name for name in layout.titles]
    max_score = max((r.max_score for r in results), default=0.0)
    totals = [r.score for r in graded]
    exercises = []
    for cell in cells:
        scores = [(c.score, c.max_score) for r in graded for c in r.cells if c.name == cell]
        if not scores:
            continue
        exercises.append({
            "title": layout.titles[cell], "max_score": scores[0][1],
            "mean": statistics.fmean(s for s, _ in scores),
            "full": sum(s == m for s, m in scores), "full_rate": sum(s == m for s, m in scores) / len(scores),
            "zero": sum(s == 0 for s, _ in scores),
        })
    return environment().get_template("report.html.j2").render(
        css=_css(), title=layout.assignment_title or assignment, assignment=assignment,
        count=len(results), graded=len(graded), invalid=len(results) - len(graded),
        wall_time=wall_time, max_score=max_score,
        mean=round(statistics.fmean(totals), 2) if totals else 0.0,
        median=round(statistics.median(totals), 2) if totals else 0.0,
        histogram=histogram_png(totals, max_score or 1.0) if totals else "",
        histogram_alt=f"{len(totals)} students between {min(totals, default=0):g} and {max(totals, default=0):g} points",
        exercises=exercises, diagnostics=common_diagnostics(graded, layout.titles),
        attention=needs_attention(results), broken=[text[:1].upper() + text[1:] for _, text in broken_checks(results)],
        unsandboxed=sorted(r.student_id for r in results if r.unsandboxed), similar=similar_pairs(similarity_csv),
        not_graded=not_graded(intake_rows), late=late, late_count=len(penalised),
        late_points=round(sum(r.late_penalty for r in penalised), 2))


class ClassReport(Output):
    """report.html: the class's scores, the common diagnoses, who needs attention."""

    what = "the class report"

    def __init__(self, folder, assignment, layout, late=""):
        self.folder, self.assignment, self.layout, self.late = folder, assignment, layout, late
        self.warming = None

    def add(self, result):
        if self.warming is None:
            # The plotting library loads while the workers grade, not after them, when every
            # core but this process's would wait for it. Threads only now: the workers are
            # made (a forked pool copies this process).
            self.warming = threading.Thread(target=self._warm_up, name="report", daemon=True)
            self.warming.start()

    @staticmethod
    def _warm_up():
        with IMPORTS:
            warm_up_report()

    def finish(self, results):
        if self.warming is not None:
            self.warming.join()  # no thread is left importing when a caller forks again
        page = render_report(self.assignment, results, self.layout, self.folder.wall_time, self.folder.similarity_csv,
                             self.folder.intake(), self.late)
        write_atomically(self.folder.report, page)
        return []
