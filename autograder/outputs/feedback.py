"""Per-student feedback pages: one self-contained HTML file per result.

A page shows, per exercise, the score, every check's one-line description with
a pass or fail mark, the diagnostic of each failed check, and the errors the
student's own cells raised. It is built only from the result file, which holds
check descriptions and messages, never the code of a hidden check.
"""
import re
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

from jinja2 import Environment, PackageLoader, select_autoescape
from markupsafe import Markup, escape

from autograder.course import write_atomically
from autograder.outputs.base import Output
from autograder.record import cell_in_words, grouped_checks

EXERCISE = re.compile(r"\*\*(Exercise \w+)")
HEADING = re.compile(r"^##\s+(?:\d+\w*\s*(?:\([^)]*\))?\.\s*)?(.+)$", re.MULTILINE)


@dataclass
class Layout:
    """What the source notebook says about its graded cells."""

    titles: dict = field(default_factory=dict)  # grade id -> "Exercise 3: A causal attention module"
    owners: dict = field(default_factory=dict)  # cell label -> the graded cell that follows it
    assignment_title: str = ""


def layout_of(source_nb):
    layout, pending, heading, exercise = Layout(), [], "", ""
    for cell in source_nb.cells:
        meta = cell.metadata.get("nbgrader", {})
        if cell.cell_type == "markdown":
            if not layout.assignment_title and cell.source.startswith("# "):
                layout.assignment_title = cell.source.splitlines()[0][2:].strip()
            headings = HEADING.findall(cell.source)
            heading = headings[-1].strip() if headings else heading
            found = EXERCISE.findall(cell.source)
            exercise = found[-1] if found else exercise
        if meta.get("grade_id"):
            pending.append(meta["grade_id"])
        if cell.cell_type == "code" and meta.get("grade") and not meta.get("solution"):
            grade_id = meta["grade_id"]
            layout.titles[grade_id] = f"{exercise}: {heading}" if exercise and heading else grade_id
            layout.owners.update({label: grade_id for label in pending})
            pending, exercise = [], ""
    return layout


@lru_cache(maxsize=None)
def environment():
    env = Environment(loader=PackageLoader("autograder.outputs", "templates"),
                      autoescape=select_autoescape(["html", "j2"]), trim_blocks=True, lstrip_blocks=True)
    env.filters["points"] = lambda value: f"{value:g}"
    env.filters["code"] = inline_code
    env.filters["cell"] = cell_in_words  # "cell ex5_answer", "cell 4" (never "cell cell 4")
    return env


@lru_cache(maxsize=None)
def _css():
    # Trusted, and inside <style> entities are not decoded: never escape it.
    return Markup((Path(__file__).parent / "templates" / "base.css").read_text())


def render_feedback(result, layout):
    """The HTML page for one `record.Result`."""
    errors = {}
    other_errors = []
    for error in result.cell_errors:
        owner = layout.owners.get(error.cell)
        (errors.setdefault(owner, []) if owner else other_errors).append(error)
    exercises = [{
        "name": cell.name,
        "title": layout.titles.get(cell.name, cell.name),
        "score": cell.score,
        "max_score": cell.max_score,
        "checks": grouped(cell.checks),
        "output": cell.output,
        "errors": [] if cell.unanswered else errors.get(cell.name, []),
        "unanswered": cell.unanswered,
    } for cell in result.cells]
    return environment().get_template("feedback.html.j2").render(
        css=_css(), title=layout.assignment_title or result.assignment, student=result.student_id,
        status=result.status, output=result.output, score=result.score,
        max_score=result.max_score, notes=result.notes, exercises=exercises,
        other_errors=other_errors, unsandboxed=result.unsandboxed, raw_score=result.raw_score,
        late_penalty=result.late_penalty, late_note=result.late_note)


def grouped(checks):
    """One line per check (record.grouped_checks), as the page template wants them."""
    return [{**group, "passed": group["failed"] == 0, "messages": [group["message"]] if group["message"] else []}
            for group in grouped_checks(checks)]


def inline_code(text):
    """Escape `text` and show `backticked` words as code."""
    return Markup(re.sub(r"`([^`]+)`", r"<code>\1</code>", str(escape(text))))


class FeedbackPages(Output):
    """feedback/<student>.html, written the moment each result is graded."""

    what = "its feedback page"

    def __init__(self, folder, layout):
        self.folder, self.layout = folder, layout

    def add(self, result):
        self.folder.feedback.mkdir(parents=True, exist_ok=True)
        return write_atomically(self.folder.feedback_page(result.student_id), render_feedback(result, self.layout))


def write_feedback(folder, results, layout):
    """feedback/<student>.html for every result in the GradedFolder `folder`; returns the paths."""
    pages = FeedbackPages(folder, layout)
    return [pages.add(result) for result in results]
