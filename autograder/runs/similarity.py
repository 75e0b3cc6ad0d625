"""Which students' answers look copied: evidence for a person, never a penalty.

Two signals, per pair of students:

* **code**: copydetect's winnowing fingerprints of every code cell the grader
  runs (the sanitized notebook: answer cells and cells the student added, so an
  answer moved into a cell of its own still counts), leaving out cells that are
  the release's own code, with the release's code as boilerplate. Names,
  comments and layout do not count (copydetect's filter), so renaming and
  re-commenting do not hide a copy. Only fingerprints few students have count (at most 2, or a twentieth
  of the class), weighed by how rare they are (log N/df): code that many
  students share, such as the textbook way to write a line, is no evidence.
* **shared wrong results**: the failed checks whose messages (with their
  numbers) two students share, counted the same way. Different code rarely
  gives the same wrong numbers; a mistake many students make is no evidence.

Pairs are ranked by `combined` = code + shared-wrong-results / 2 (both in
0..1). The page and similarity.csv say in words that a high rank is a reason
to look, not a finding.
"""
import csv
import io
import math
from collections import Counter, defaultdict
from dataclasses import dataclass, field

from autograder.course import write_atomically
from autograder.untrusted import for_spreadsheet

K, WINDOW = 12, 4  # fingerprints of 12 filtered characters (copydetect's tokens), one kept per 4
SHOWN_PAIRS = 25
START, END = "\ue000", "\ue001"
# Rare fingerprints two answers must share for a code score of 1. One line changed the same
# way (two students who made the same small edit) leaves about 8 to 10 after winnowing,
# and which of them survive depends on Python's per-process string hashing, which
# copydetect uses: with 8 such a pair scored 0.47-0.99 from run to run, at times above a
# disguised copy (0.82-0.87). With 16 it stays at or below 0.49; copies share far more.
ENOUGH_FINGERPRINTS = 16


@dataclass
class Pair:
    a: str
    b: str
    code: float
    wrong: float
    shared_wrong: list = field(default_factory=list)  # the failed-check messages both got

    @property
    def combined(self):
        return round(self.code + self.wrong / 2, 4)


def answer_code(notebook):
    """The code of a notebook's answer cells, in order (what the student wrote)."""
    return "\n\n".join(cell.source for cell in notebook.cells
                       if cell.cell_type == "code" and cell.metadata.get("nbgrader", {}).get("solution"))


def release_code(release):
    """The code of every code cell of the release (given code, answer stubs, visible checks):
    what every student starts with, so no evidence of anything."""
    return "\n\n".join(cell.source for cell in release.cells if cell.cell_type == "code")


def graded_code(notebook, release):
    """The code the grader runs for `notebook`, in order: its cells as grading sanitizes them
    (read-only cells restored from the release, answer cells and cells the student added as
    written), without the cells that are the release's own code. A copy moved out of the answer
    cells into an added cell counts; an edit of a read-only cell, which never runs, does not."""
    from autograder.grading.notebook import sanitize

    given = {cell.source.strip() for cell in release.cells if cell.cell_type == "code"}
    cells = sanitize(notebook, release, release).cells  # the release as source: hidden checks never run
    return "\n\n".join(source for _, source in cells if source.strip() and source.strip() not in given)


def _fingerprint(code, boilerplate=None):
    from copydetect import CodeFingerprint

    return CodeFingerprint("answers.py", K, WINDOW, boilerplate=boilerplate, language="python",
                           fp=io.StringIO(code))


def rare_weights(sets):
    """{item: weight} for the items few students have (at most 2, or a twentieth of the class),
    weighted log(N / holders): what two students share and almost nobody else does."""
    counts = Counter(item for items in sets.values() for item in set(items))
    n, limit = len(sets), max(2, len(sets) // 20)
    return {item: math.log(n / count) for item, count in counts.items() if count <= limit}


def _overlap(mine, theirs, weight, enough):
    """The weight of what two share, over the smaller one's rare weight (at least `enough`,
    so that two answers with one rare line in common do not score 1)."""
    shared = sum(weight.get(h, 0.0) for h in mine & theirs)
    smaller = min(sum(weight.get(h, 0.0) for h in mine), sum(weight.get(h, 0.0) for h in theirs))
    return shared / max(smaller, enough) if shared else 0.0


def rank_pairs(codes, failures, boilerplate_code=""):
    """Pairs of students, most similar first. `codes`: {student: answer code};
    `failures`: {student: set of failed-check messages}."""
    import numpy as np

    boilerplate = np.array(list(_fingerprint(boilerplate_code).hashes)) if boilerplate_code.strip() else None
    prints = {student: _fingerprint(code, boilerplate) for student, code in codes.items()}
    hashes = {student: fp.hashes for student, fp in prints.items()}
    failures = {student: set(failures.get(student, ())) for student in codes}
    code_weight, wrong_weight = rare_weights(hashes), rare_weights(failures)
    top = math.log(max(len(codes), 2) / 2)  # the weight of an item only two students have
    # Only pairs that share a rare fingerprint or failure can score: find them through an
    # index rather than comparing all N^2 pairs.
    candidates = set()
    for weights, sets in ((code_weight, hashes), (wrong_weight, failures)):
        holders = defaultdict(list)
        for student, items in sets.items():
            for item in items:
                if item in weights:
                    holders[item].append(student)
        for students in holders.values():
            students = sorted(students)
            candidates.update((a, b) for i, a in enumerate(students) for b in students[i + 1:])
    pairs = []
    for a, b in candidates:
        pairs.append(Pair(a, b, round(_overlap(hashes[a], hashes[b], code_weight, ENOUGH_FINGERPRINTS * top), 4),
                          round(_overlap(failures[a], failures[b], wrong_weight, top), 4),
                          sorted(failures[a] & failures[b])))
    pairs.sort(key=lambda p: (-p.combined, p.a, p.b))
    return pairs, prints, code_weight


def _highlighted(fp, shared):
    """The answer code with the fingerprints in `shared` marked (<mark>), HTML-escaped."""
    from copydetect.utils import get_copied_slices, highlight_overlap
    from markupsafe import Markup, escape

    import numpy as np

    idx = [i for h in shared for i in fp.hash_idx.get(h, [])]
    if not idx:
        return Markup(escape(fp.raw_code))
    slices = get_copied_slices(np.array(idx), fp.k)
    if len(fp.offsets) > 0:  # filtered positions back to the student's own text
        slices = slices + fp.offsets[:, 1][np.clip(np.searchsorted(fp.offsets[:, 0], slices), 0,
                                                   fp.offsets.shape[0] - 1)]
    # Private-use characters mark the start and end; the student's own copies of them become
    # "?" first (same length, so the slices still fit): student text can never open a tag.
    code = fp.raw_code.replace(START, "?").replace(END, "?")
    text, _ = highlight_overlap(code, slices.astype(int), START, END, escape_html=True)
    return Markup(text.replace(START, "<mark>").replace(END, "</mark>"))


def class_answers(results, release_notebook):
    """({student: the code graded for them}, {student: failed-check messages}, boilerplate,
    [students whose notebook can no longer be read]) for the graded results."""
    from autograder.grading.notebook import InvalidNotebook, read_notebook

    codes, failures, unreadable = {}, {}, []
    for result in results:
        if result.status != "graded":
            continue
        try:
            codes[result.student_id] = graded_code(read_notebook(result.path), release_notebook)
        except (OSError, ValueError, AttributeError, InvalidNotebook):
            unreadable.append(result.student_id)
            continue
        failures[result.student_id] = {f"{cell}: {check.message}" for cell, check in result.failed_checks()}
    return codes, failures, release_code(release_notebook), unreadable


def write_report(folder, assignment_title, results, release_notebook):
    """similarity.csv and similarity.html in the GradedFolder `folder`; returns (csv path, html path, pairs,
    students left out because their notebook can no longer be read)."""
    from autograder.outputs.feedback import _css, environment

    codes, failures, boilerplate, unreadable = class_answers(results, release_notebook)
    pairs, prints, weight = rank_pairs(codes, failures, boilerplate)
    handle = io.StringIO(newline="")
    writer = csv.writer(handle)
    writer.writerow(["rank", "student_a", "student_b", "code_score", "shared_wrong_results_score", "combined"])
    for rank, pair in enumerate(pairs, start=1):
        writer.writerow([rank, for_spreadsheet(pair.a), for_spreadsheet(pair.b), pair.code, pair.wrong, pair.combined])
    table = write_atomically(folder.similarity_csv, handle.getvalue())
    shown = []
    for pair in pairs[:SHOWN_PAIRS]:
        shared = {h for h in prints[pair.a].hashes & prints[pair.b].hashes if h in weight}
        shown.append({"pair": pair, "left": _highlighted(prints[pair.a], shared),
                      "right": _highlighted(prints[pair.b], shared)})
    page = environment().get_template("similarity.html.j2").render(
        css=_css(), title=assignment_title, students=len(codes), pairs=shown, total=len(pairs), unreadable=unreadable)
    return table, write_atomically(folder.similarity_html, page), pairs, unreadable
