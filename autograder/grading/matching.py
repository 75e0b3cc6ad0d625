"""Answers recognised by where they sit: for notebooks whose cells lost nbgrader's metadata.

A student who copies their work into a new notebook (another editor, Colab, a fresh file)
hands in cells without nbgrader's grade ids. Going by ids alone, every answer looks
deleted: restored unanswered, the written answers lost to formgrader. But the release's
own cells are still there, word for word (the prose, the given code, the visible checks,
the graded placeholders), so they fix where everything is. Between two such anchors, a
cell of the student's in the place of one of the release's answer cells is that answer:
of several, the one closest to the reference solution (the names it defines, its text).

`recognise` gives each recognised cell the release cell's metadata, so sanitize() then
treats the notebook like any other. It looks only for graded cells missing by id, and
takes only cells without metadata, so a notebook with its metadata is left as it is.
"""
import copy
import difflib
import keyword
import re
from dataclasses import dataclass, field

IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
STUB_WORDS = {"YOUR", "CODE", "HERE", "ANSWER", "raise", "NotImplementedError", "Not", "answered", "yet"}
MIN_LOCKED_SIMILARITY = 0.6  # an edited read-only cell is still that cell when this much of it is the same


@dataclass
class Recognised:
    found: dict = field(default_factory=dict)  # grade id -> index of the student's cell it was found in
    missing: list = field(default_factory=list)  # answers (grade ids) looked for and not found
    copied: bool = False  # no cell had its metadata: the whole notebook was copied into a new one

    def __bool__(self):
        return bool(self.found)


def _grade_id(cell):
    meta = cell.get("metadata", {}).get("nbgrader")
    return meta.get("grade_id") if isinstance(meta, dict) and isinstance(meta.get("grade_id"), str) else None


def _is_answer(cell):
    return bool(cell.metadata.get("nbgrader", {}).get("solution"))


def _text(cell):
    """A cell as compared: its type and its lines without trailing spaces (editors differ there)."""
    source = cell.source if isinstance(cell.source, str) else "".join(cell.source)
    return cell.cell_type, "\n".join(line.rstrip() for line in source.strip().splitlines())


def _names(text):
    return {word for word in IDENTIFIER.findall(text) if not keyword.iskeyword(word)} - STUB_WORDS


def recognise(notebook, source, release):
    """(a copy of `notebook` whose recognised cells carry their release cell's metadata, Recognised).

    `notebook` is returned unchanged (with an empty Recognised) when no graded cell is missing
    by id or no cell lacks metadata."""
    present = {_grade_id(cell) for cell in notebook.cells} - {None}
    wanted = [i for i, cell in enumerate(release.cells) if _grade_id(cell) and _grade_id(cell) not in present]
    loose = {j for j, cell in enumerate(notebook.cells) if _grade_id(cell) is None}
    if not wanted or not loose:
        return notebook, Recognised()
    solutions = {_grade_id(cell): cell for cell in source.cells if _grade_id(cell)}
    pairs = _align(release.cells, notebook.cells, set(wanted), loose, solutions)
    found = copy.deepcopy(notebook)
    recognised = Recognised(copied=not present)
    for i, j in sorted(pairs.items()):
        meta = copy.deepcopy(release.cells[i].metadata["nbgrader"])
        found.cells[j].metadata["nbgrader"] = meta
        recognised.found[meta["grade_id"]] = j
    recognised.missing = [_grade_id(release.cells[i]) for i in wanted
                          if i not in pairs and _is_answer(release.cells[i])]
    return found, recognised


def _align(release, notebook, wanted, loose, solutions):
    """{release index: notebook index} for the wanted release cells found among the loose cells."""
    matcher = difflib.SequenceMatcher(None, [_text(c) for c in release], [_text(c) for c in notebook], autojunk=False)
    pairs = {}
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        if tag == "equal":  # the same text: an untouched read-only cell, or an answer left as the stub
            pairs.update((i, j) for i, j in zip(range(i1, i2), range(j1, j2)) if i in wanted and j in loose)
            continue
        targets = [i for i in range(i1, i2) if i in wanted]
        cells = [j for j in range(j1, j2) if j in loose]
        if targets and cells:
            pairs.update(_best(targets, cells, release, notebook, solutions))
    return pairs


def _best(targets, cells, release, notebook, solutions):
    """The matching of `targets` (release indices) to `cells` (notebook indices) in order, each
    used once, of the greatest total likeness (a sequence alignment where skipping costs nothing)."""
    n, m = len(targets), len(cells)
    like = [[_likeness(release[t], notebook[c], solutions) for c in cells] for t in targets]  # each pair once
    score = [[0.0] * (m + 1) for _ in range(n + 1)]
    for a in range(n - 1, -1, -1):
        for b in range(m - 1, -1, -1):
            take = score[a + 1][b + 1] + like[a][b] if like[a][b] > 0 else float("-inf")
            score[a][b] = max(score[a + 1][b], score[a][b + 1], take)
    pairs, a, b = {}, 0, 0
    while a < n and b < m:
        if like[a][b] > 0 and score[a][b] == score[a + 1][b + 1] + like[a][b]:
            pairs[targets[a]] = cells[b]
            a, b = a + 1, b + 1
        elif score[a][b] == score[a + 1][b]:
            a += 1
        else:
            b += 1
    return pairs


def _likeness(wanted, cell, solutions):
    """How well `cell` (the student's) fits the release cell `wanted`; 0 when it cannot be it.

    An answer fits any cell of its type (a student's answer differs from the stub by nature),
    better the more it shares with the reference solution; a read-only cell fits only a cell
    that is still mostly its text."""
    if wanted.cell_type != cell.cell_type:
        return 0.0
    text = _text(cell)[1]
    if not _is_answer(wanted):
        ratio = difflib.SequenceMatcher(None, _text(wanted)[1], text, autojunk=False).ratio()
        return ratio if ratio >= MIN_LOCKED_SIMILARITY else 0.0
    reference = _text(solutions.get(_grade_id(wanted), wanted))[1]
    names, theirs = _names(reference), _names(text)
    shared = len(names & theirs) / len(names | theirs) if names | theirs else 0.0
    return 1.0 + shared + 0.5 * difflib.SequenceMatcher(None, reference, text, autojunk=False).ratio()
