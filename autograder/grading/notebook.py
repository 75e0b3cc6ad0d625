"""Read submitted notebooks safely and restore what students may not change.

`sanitize` follows nbgrader's rules: locked cells (given code, visible checks,
graded cells) come back from the source notebook by grade_id, answer cells keep
the student's code, and cells the student added stay where they were. Every
difference from the release (an edited or deleted locked cell, changed points or
metadata, a duplicated grade id) is recorded as tampering.
"""
import errno
import hashlib
import json
import os
import re
import stat
from dataclasses import dataclass, field
from pathlib import Path

import nbformat

from autograder.untrusted import listed, visible

# The default limit on what runs: a notebook without its outputs (`autograder grade --max-notebook-mb`).
# Outputs do not count: grading runs the cells again and never uses them.
MAX_NOTEBOOK_BYTES = 20 * 2**20
# A file larger than this (or than the limit, if that is larger) is not read at all: parsing it
# takes two to three times its size in memory, in every worker at once.
MAX_FILE_BYTES = 512 * 2**20
# A release has tens of cells (this course's about 50), and a student who tries things out
# adds tens more. 150,000 cells in a 15 MB notebook cost the grader 1.6 GiB without this bound.
MAX_CELLS = 2000
MAX_TAMPERING_NOTES = 20  # then one line says how many more
MAX_DELETED_NAMED = 3  # more deleted cells than this are one note, not one each
STUB_RAISE = re.compile(r"""raise NotImplementedError\((["'])(.*?)\1\)""")  # nbgrader's stub, as the release has it


class InvalidNotebook(Exception):
    """A file that cannot be graded; the message is for the student and the TA."""


@dataclass
class Submission:
    student_id: str
    path: Path
    ignored: list = field(default_factory=list)  # other notebooks of the same student (not graded)
    sha256: str = ""  # the file's hash, once the batch has computed it (saves reading it again)
    renamed: str = ""  # why `student_id` is not the file's or folder's own name (see untrusted.py)
    replaced: list = field(default_factory=list)  # older uploads of the same file (names), not graded
    lms: dict = field(default_factory=dict)  # the LMS's identities of the student ({"canvas_id": ...})
    submitted_at: str = ""  # a submission time the intake read from where it came (not timestamp.txt)
    layout: str = ""  # where it came from: "nbgrader", "canvas", "moodle", "pattern", "files"
    from_zip: str = ""  # "<zip>: <member>" when the notebook was in a zip the student handed in
    # The batch's own reading of the file (a Sanitized), when it worked out the answers key
    # from it: a local worker grades that instead of reading and sanitizing the file again.
    clean: object = field(default=None, repr=False, compare=False)


@dataclass
class Sanitized:
    notebook: nbformat.NotebookNode  # what gets run and written to autograded/
    cells: list  # [(cell name, source)] to run in the sandbox, in order
    tampering: list = field(default_factory=list)


def sha256(path):
    """The file's SHA-256; OSError for anything but a plain file (a named pipe called
    *.ipynb, as a tar extraction can leave, would otherwise block the batch forever)."""
    digest = hashlib.sha256()
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    with open(fd, "rb") as handle:  # in chunks: a multi-GB upload must not fill memory
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(errno.EINVAL, "not a plain file", str(path))
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


# -- reading ------------------------------------------------------------------------------
def read_notebook(path, max_bytes=MAX_NOTEBOOK_BYTES):
    """A validated nbformat-4 notebook, or InvalidNotebook with a message that says why."""
    return read_notebook_and_sha(path, max_bytes)[0]


def read_notebook_and_sha(path, max_bytes=MAX_NOTEBOOK_BYTES):
    """(`read_notebook(path)`, the SHA-256 of the very bytes it was read from).

    The limit `max_bytes` is on what runs: the notebook without its outputs, attachments and
    execution counts, which grading never uses (it runs the cells again) and which are cleared
    here. A file is read at all only up to max(MAX_FILE_BYTES, max_bytes)."""
    path = Path(path)
    hard = max(MAX_FILE_BYTES, max_bytes)
    too_big = (f"over the {hard / 2**20:.0f} MB the grader reads (clear the outputs: Restart & Clear Output,"
               " save, and resubmit)")
    size = path.stat().st_size
    if size == 0:
        raise InvalidNotebook("the file is empty")
    if size > hard:
        raise InvalidNotebook(f"the file is {size / 2**20:.0f} MB, {too_big}")
    with open(path, "rb") as handle:
        raw = handle.read(hard + 1)  # never more, even if the file grew since
    if len(raw) > hard:
        raise InvalidNotebook(f"the file is {too_big}")
    digest, small = hashlib.sha256(raw).hexdigest(), len(raw) <= max_bytes
    try:
        text = raw.decode("utf-8")
        del raw  # each form of a large file is let go once the next one exists
        data = json.loads(text)
        del text
    except RecursionError:
        raise InvalidNotebook("the file is JSON nested too deeply to be a notebook") from None
    except (UnicodeDecodeError, ValueError) as error:
        raise InvalidNotebook(f"the file is not valid JSON, so it is not a notebook ({error})") from None
    _check_cell_count(data)
    _clear_outputs(data)
    if not small:
        _check_size(data, max_bytes)
    return _notebook(data), digest


def _check_cell_count(data):
    cells = data.get("cells") if isinstance(data, dict) else None
    if isinstance(cells, list) and len(cells) > MAX_CELLS:
        raise InvalidNotebook(f"the notebook has {len(cells):,} cells, more than the {MAX_CELLS:,} the grader reads"
                              ": delete the cells you added to try things out, keep your answers, and submit again")


def _clear_outputs(data):
    """What grading never uses, out of the parsed JSON (as Jupyter's Clear Output does)."""
    cells = data.get("cells") if isinstance(data, dict) else None
    for cell in cells if isinstance(cells, list) else ():
        if isinstance(cell, dict):
            if cell.get("cell_type") == "code":
                cell["outputs"], cell["execution_count"] = [], None
            cell.pop("attachments", None)


def _check_size(data, max_bytes):
    """InvalidNotebook when the notebook without outputs is still over `max_bytes`."""
    try:
        size = len(json.dumps(data, ensure_ascii=False, separators=(",", ":")).encode("utf-8", "surrogatepass"))
    except (RecursionError, ValueError):  # nested too deeply to write back: not a notebook either
        size = max_bytes + 1
    if size > max_bytes:
        raise InvalidNotebook(f"the notebook is {size / 2**20:.0f} MB even without its outputs, over the"
                              f" {max_bytes / 2**20:g} MB limit on what the grader runs (remove large data pasted"
                              " into cells, or ask your instructor; then resubmit)")


def _notebook(data):
    """The parsed JSON as a validated nbformat-4 notebook, or InvalidNotebook."""
    if not isinstance(data, dict) or "cells" not in data and "worksheets" not in data:
        raise InvalidNotebook("the file is JSON but not a Jupyter notebook")
    major = data.get("nbformat")
    if not isinstance(major, int) or major < 4:
        raise InvalidNotebook(f"the notebook uses format version {visible(major, 40)}; please save it with a"
                              " current Jupyter")
    try:
        # nbformat.reads() would parse the text again and validate, only to log what it finds.
        notebook = nbformat.convert(_from_dict(data), 4)  # joins multi-line sources
        nbformat.validate(notebook)
    except nbformat.ValidationError as error:
        message = str(error.message if hasattr(error, "message") else error).splitlines()[0]
        raise InvalidNotebook(f"the notebook is damaged: {message[:200]}") from None
    except (Exception, RecursionError) as error:  # anything else nbformat rejects
        raise InvalidNotebook(f"the notebook is damaged ({type(error).__name__})") from None
    return notebook


def _from_dict(data):
    """What nbformat.reader.reads() makes of the parsed JSON `data`."""
    major, minor = nbformat.reader.get_version(data)
    if major not in nbformat.versions:
        raise nbformat.NBFormatError(f"Unsupported nbformat version {major}")
    try:
        return nbformat.versions[major].to_notebook_json(data, minor=minor)
    except AttributeError as error:
        raise nbformat.ValidationError(f"The notebook is invalid and is missing an expected key: {error}") from None


# -- restoring locked cells ------------------------------------------------------------
def _meta(cell):
    meta = cell.get("metadata", {}).get("nbgrader")
    return meta if isinstance(meta, dict) and isinstance(meta.get("grade_id"), str) else None


def _is_hidden_test(meta):
    return bool(meta.get("grade")) and not meta.get("solution")


def _same_meta(a, b):
    keys = ("grade", "solution", "locked", "points", "task")
    return all(a.get(k) == b.get(k) for k in keys)


def sanitize(notebook, source, release):
    """Restore locked cells from `source` by grade id and say what the student changed. Cells
    that lost their grade ids are first recognised by where they sit (grading/matching.py)."""
    from autograder.grading.matching import recognise

    notebook, recognised = recognise(notebook, source, release)
    source_cells = {m["grade_id"]: c for c in source.cells if (m := _meta(c))}
    release_cells = {m["grade_id"]: c for c in release.cells if (m := _meta(c))}
    tampering, used, cells = [], set(), []
    for cell in notebook.cells:
        meta = _meta(cell)
        grade_id = meta["grade_id"] if meta else None
        if grade_id is None or grade_id not in source_cells:
            if grade_id is not None:
                tampering.append(f"a cell claims grade id '{visible(grade_id, 60)}', which the assignment does"
                                 " not have")
            cells.append(_plain_copy(cell))
            continue
        if grade_id in used:
            tampering.append(f"cell {grade_id} appears twice; the copy is run as an ordinary cell")
            cells.append(_plain_copy(cell))
            continue
        used.add(grade_id)
        released = release_cells.get(grade_id, source_cells[grade_id])
        cells.append(_restored(cell, meta, source_cells[grade_id], released, tampering))
    order = [m["grade_id"] for c in source.cells if (m := _meta(c))]
    deleted = _restore_deleted(cells, order, used, source_cells, release_cells)
    if recognised:
        tampering.insert(0, _recognised_note(recognised))
    elif len(deleted) > MAX_DELETED_NAMED:
        tampering.append(f"{len(deleted)} of the exercise's cells were missing from your notebook and were put back"
                         f" from the release (answers among them count as unanswered): {listed(deleted, 8)}")
    else:
        tampering += [f"cell {grade_id} was deleted (restored from the release)" for grade_id in deleted]
    clean = nbformat.v4.new_notebook(metadata=source.metadata)
    clean.cells = cells
    to_run = [(_name(c, i), c.source) for i, c in enumerate(cells)
              if c.cell_type == "code" and not (_meta(c) and _is_hidden_test(_meta(c)))]
    return Sanitized(clean, to_run, _capped(tampering))


def _restored(cell, meta, original, released, tampering):
    """The student's cell with grade id `meta`'s: the source's cell, with the student's source
    if it is an answer; what was changed that should not be goes in `tampering`."""
    grade_id = meta["grade_id"]
    if not _same_meta(meta, _meta(released)) or cell.cell_type != released.cell_type:
        tampering.append(f"the grading metadata of cell {grade_id} was changed (restored)")
    if _meta(original).get("locked") or _is_hidden_test(_meta(original)):
        if cell.source != released.source:
            tampering.append(f"the read-only cell {grade_id} was edited (restored)")
        return _copy(original)
    answer = _copy(original)
    answer.source = cell.source
    if answer.cell_type == "code":  # markdown cells have no outputs (nbformat rejects the key)
        answer.outputs = []
    return answer


def _recognised_note(recognised):
    """The one note for a notebook whose cells had lost their grade ids (grading/matching.py)."""
    if recognised.copied:
        note = ("your notebook's cells had lost the grader's markers (as happens when work is copied into a new"
                " notebook), so your answers were found by where they sit among the exercise's cells")
    else:
        note = (f"{listed(recognised.found, 8)} had lost the grader's marker, so the cell in its place was"
                " taken for it")
    if recognised.missing:
        note += f"; these answers could not be found and count as unanswered: {listed(recognised.missing, 8)}"
    return note


def _restore_deleted(cells, order, used, source_cells, release_cells):
    """Put back, in `cells`, each graded cell of the source (grade ids in `order`) the student
    deleted: after the cell that comes before it in the source. Returns their grade ids."""
    deleted = []
    for index, grade_id in enumerate(order):
        if grade_id in used:
            continue
        released = release_cells.get(grade_id, source_cells[grade_id])
        deleted.append(grade_id)
        restored = _copy(source_cells[grade_id])
        if not (_meta(restored).get("locked") or _is_hidden_test(_meta(restored))):
            restored.source = released.source  # a deleted answer counts as unanswered
        before = next((g for g in reversed(order[:index]) if g in used), None)
        position = 0 if before is None else 1 + next(i for i, c in enumerate(cells) if _grade_id(c) == before)
        cells.insert(position, restored)
        used.add(grade_id)
    return deleted


def _capped(tampering):
    """At most MAX_TAMPERING_NOTES notes, the last one saying how many more there were."""
    if len(tampering) > MAX_TAMPERING_NOTES:
        more = len(tampering) - MAX_TAMPERING_NOTES + 1
        tampering = [*tampering[:MAX_TAMPERING_NOTES - 1], f"and {more:,} more changes like these"]
    return tampering


def _grade_id(cell):
    meta = _meta(cell)
    return meta["grade_id"] if meta else None


def _name(cell, index):
    return _grade_id(cell) or cell.get("id") or f"cell {index + 1}"


def _copy(cell):
    return nbformat.from_dict(json.loads(json.dumps(cell)))


def _plain_copy(cell):
    """A student's own cell: kept, but without any grading metadata."""
    copy = _copy(cell)
    copy.metadata.pop("nbgrader", None)
    if copy.cell_type == "code":
        copy.outputs, copy.execution_count = [], None
    return copy


def grade_cells(source):
    """{grade id: points} of the autograded cells, in notebook order."""
    return {m["grade_id"]: float(m.get("points", 0)) for c in source.cells
            if (m := _meta(c)) and _is_hidden_test(m)}


def owners(source):
    """{cell grade id: the autograded cell it leads up to}: every cell with a grade id (answers,
    given code, visible checks) belongs to the first autograded cell after it, as the feedback
    page groups them."""
    found, pending = {}, []
    for cell in source.cells:
        meta = _meta(cell)
        if meta is None:
            continue
        pending.append(meta["grade_id"])
        if _is_hidden_test(meta):
            found.update({name: meta["grade_id"] for name in pending})
            pending = []
    return found


def stub_errors(release):
    """The last lines of the errors the release's stubs raise ("NotImplementedError: Not answered
    yet: ..."): a cell that stops with one only called a part not answered yet."""
    found = set()
    for cell in release.cells:
        if (meta := _meta(cell)) and meta.get("solution") and cell.cell_type == "code":
            found.update(f"NotImplementedError: {text}" for _, text in STUB_RAISE.findall(cell.source))
    return found


def unanswered(owned, release, cells):
    """The autograded cells none of whose answer cells the student touched: each answer cell of
    theirs in `cells` ([(name, source)], sanitized) reads as the release's stub. `owned` is
    `owners(source)`. A cell with no answer of its own (it only checks earlier ones) is never
    unanswered."""
    stubs = {m["grade_id"]: c.source.strip() for c in release.cells
             if (m := _meta(c)) and m.get("solution") and c.cell_type == "code"}
    given = dict(cells)
    answers = {}
    for name, graded in owned.items():
        if name in stubs:
            answers.setdefault(graded, []).append(name)
    return {graded for graded, names in answers.items()
            if all(given.get(name, "").strip() == stubs[name] for name in names)}


def manual_cells(source):
    return {m["grade_id"]: float(m.get("points", 0)) for c in source.cells
            if (m := _meta(c)) and m.get("grade") and m.get("solution")}
