"""The similarity report: planted copies rank first, honest styles do not, and it says it is evidence."""
import copy
import csv
import re

import nbformat
import pytest

from autograder.authoring.corpus import load, notebook
from autograder.grading.notebook import grade_cells
from autograder.outputs.folder import GradedFolder
from autograder.runs.similarity import answer_code, rank_pairs, write_report
from autograder.record import CellScore, CheckOutcome
from helpers import assignment_of, make_result

ASSIGNMENT = assignment_of()
COPIED = ("ex3-alt-mt-helper", "ex1-alt-debug-prints", "ex8-alt-lazy-windows")


def disguised(code):
    """What a student does to a copied answer: rename what it assigns, rewrite the comments,
    and swap two neighbouring lines that do not depend on each other."""
    names = set(re.findall(r"^\s*([A-Za-z_]\w{2,})\s*=", code, flags=re.M)) - {"self"}
    for name in sorted(names, key=len, reverse=True):
        code = re.sub(rf"\b{name}\b", f"my_{name}", code)
    code = re.sub(r"#[^\n]*", "# worked this out myself", code)
    lines = code.split("\n")
    for i in range(len(lines) - 1):
        first, second = lines[i], lines[i + 1]
        found = [re.match(r"^(\s*)(\w+) = (.*)$", line) for line in (first, second)]
        if all(found) and found[0][1] == found[1][1] and found[0][2] not in found[1][3] \
                and found[1][2] not in found[0][3]:
            lines[i], lines[i + 1] = second, first
            break
    return "\n".join(lines)


@pytest.fixture(scope="module")
def synthetic_class():
    """60 notebooks from the corpus (entries made from other entries left out), 3 of them
    copied with disguises by 3 more students."""
    release = nbformat.read(ASSIGNMENT.release_notebook, as_version=4)
    cells = list(grade_cells(nbformat.read(ASSIGNMENT.source_notebook, as_version=4)))
    entries = [e for e in load(ASSIGNMENT, cells) if not e.no_better_than]
    chosen = [e for e in entries if e.name in COPIED]
    others = [e for e in entries if e.name not in COPIED][:57 - len(chosen)]
    codes = {e.name: answer_code(notebook(e, release, ASSIGNMENT)) for e in [*chosen, *others]}
    for name in COPIED:
        codes[f"copy-of-{name}"] = disguised(codes[name])
    assert len(codes) == 60
    return codes, entries, answer_code(release)


def test_planted_copies_rank_first_and_honest_styles_below(synthetic_class):
    codes, entries, boilerplate = synthetic_class
    pairs, _, _ = rank_pairs(codes, {}, boilerplate)
    top = [{p.a, p.b} for p in pairs[:3]]
    assert sorted(map(sorted, top)) == sorted(sorted({name, f"copy-of-{name}"}) for name in COPIED)
    alternatives = {e.name for e in entries if e.outcome == "alternative"}
    weakest_copy = min(p.combined for p in pairs[:3])
    honest = [p for p in pairs if {p.a, p.b} <= alternatives]
    assert all(p.combined < weakest_copy for p in honest)
    assert min(p.code for p in pairs[:3]) > 0.6  # disguises lose some fingerprints, not most


def test_disguises_really_change_the_text(synthetic_class):
    codes, _, _ = synthetic_class
    for name in COPIED:
        assert codes[f"copy-of-{name}"] != codes[name] and "my_" in codes[f"copy-of-{name}"]
        assert "worked this out myself" in codes[f"copy-of-{name}"]


def test_shared_rare_wrong_results_count_and_common_ones_do_not():
    codes = {s: f"def f{i}(x):\n    return x * {i} + {i * i}\n" for i, s in enumerate("abcdefgh")}
    common = "ex3: softmax ran over the wrong dimension"
    failures = {s: {common} for s in codes}
    failures["c"] |= {"ex6: largest difference 3.71"}
    failures["f"] |= {"ex6: largest difference 3.71"}
    pairs, _, _ = rank_pairs(codes, failures)
    assert {pairs[0].a, pairs[0].b} == {"c", "f"} and pairs[0].wrong == 1.0
    assert pairs[0].shared_wrong == sorted({common, "ex6: largest difference 3.71"})
    assert all(p.wrong == 0 for p in pairs[1:])  # everyone's common mistake is not evidence


def test_the_report_files(tmp_path, synthetic_class):
    codes, _, boilerplate = synthetic_class
    release = nbformat.read(ASSIGNMENT.release_notebook, as_version=4)
    results = []
    for student, code in list(codes.items())[:20] + [(f"copy-of-{COPIED[0]}", codes[f"copy-of-{COPIED[0]}"]),
                                                     (COPIED[0], codes[COPIED[0]])]:
        nb = copy.deepcopy(release)
        answers = [c for c in nb.cells if c.cell_type == "code" and c.metadata.get("nbgrader", {}).get("solution")]
        answers[0].source, rest = code, answers[1:]
        for cell in rest:
            cell.source = ""
        path = tmp_path / f"{student}.ipynb"
        nbformat.write(nb, path)
        check = CheckOutcome("test_x", "x", False, 1.0, "The outputs differ (largest difference 2.5).")
        results.append(make_result(student, [CellScore("ex1", 1.0, 2.0, "", [check])], path=str(path)))
    results.append(make_result("broken", path=str(tmp_path / "gone.ipynb")))
    table, page, pairs, unreadable = write_report(GradedFolder(tmp_path), "Causal attention", results, release)
    assert unreadable == ["broken"]
    rows = list(csv.DictReader(open(table)))
    assert {rows[0]["student_a"], rows[0]["student_b"]} == {COPIED[0], f"copy-of-{COPIED[0]}"}
    assert list(rows[0]) == ["rank", "student_a", "student_b", "code_score", "shared_wrong_results_score", "combined"]
    text = page.read_text()
    assert "never a penalty" in text and "<mark>" in text and "no longer where it was graded from" in text


def test_the_command_writes_the_pages_and_the_class_report_section(tmp_path, synthetic_class):
    from autograder.record import write_result
    from helpers import cli, new_course

    codes, _, _ = synthetic_class
    course = new_course(tmp_path)
    out = tmp_path / "results"
    out.mkdir()
    release = nbformat.read(ASSIGNMENT.release_notebook, as_version=4)
    for student in [COPIED[1], f"copy-of-{COPIED[1]}", *list(codes)[:6]]:
        nb = copy.deepcopy(release)
        next(c for c in nb.cells if c.cell_type == "code" and c.metadata.get("nbgrader", {}).get("solution")).source \
            = codes[student]
        nbformat.write(nb, out / f"{student}.ipynb")
        write_result(out, make_result(student, [("ex1", 1.0, 2.0)], path=str(out / f"{student}.ipynb")))
    done = cli("similarity", "causal_attention", "--course", course, "--results", out)
    assert done.returncode == 0, done.stdout + done.stderr
    first = " ".join(done.stdout.split()).split("never a penalty)")[1].split(":")[0].strip()
    assert first in (f"{COPIED[1]} and copy-of-{COPIED[1]}", f"copy-of-{COPIED[1]} and {COPIED[1]}")
    report = (out / "report.html").read_text()
    assert 'id="similarity"' in report and "similarity.html" in report and "never a" in report


def test_student_text_cannot_open_a_tag_on_the_page():
    from autograder.runs.similarity import START, _highlighted

    code = "def f(x):\n    # <script>alert(1)</script> " + START + "\n    return x * 3 + 17 - x // 2\n"
    pairs, prints, weight = rank_pairs({"a": code, "b": code, "c": "def g():\n    pass\n"}, {})
    shared = {h for h in prints["a"].hashes & prints["b"].hashes if h in weight}
    page = str(_highlighted(prints["a"], shared))
    assert "<script>" not in page and "&lt;script&gt;" in page and START not in page and "<mark>" in page


def _class_on_disk(tmp_path, codes, students, extra=None):
    """Graded results for `students`, each notebook the release with the student's code in its
    first answer cell (the other answers untouched), plus `extra` = {student: notebook}."""
    release = nbformat.read(ASSIGNMENT.release_notebook, as_version=4)
    notebooks = {}
    for student in students:
        nb = copy.deepcopy(release)
        next(c for c in nb.cells if c.cell_type == "code" and c.metadata.get("nbgrader", {}).get("solution")).source \
            = codes[student]
        notebooks[student] = nb
    notebooks.update(extra or {})
    results = []
    for student, nb in notebooks.items():
        path = tmp_path / f"{student}.ipynb"
        nbformat.write(nb, path)
        results.append(make_result(student, [("ex1", 1.0, 2.0)], path=str(path)))
    return results, release


def test_a_copy_moved_into_an_added_cell_is_found(tmp_path, synthetic_class):
    """Every cell the grader runs counts, not only the answer cells: a student who leaves the
    answer cells as released and puts a disguised copy in a cell of their own is flagged."""
    codes, _, _ = synthetic_class
    copied = COPIED[2]
    students = [s for s in codes if not s.startswith("copy-of-")][:20]
    assert copied in students
    mover = copy.deepcopy(nbformat.read(ASSIGNMENT.release_notebook, as_version=4))  # answers as released
    first = next(i for i, c in enumerate(mover.cells)
                 if c.cell_type == "code" and c.metadata.get("nbgrader", {}).get("solution"))
    mover.cells.insert(first + 1, nbformat.v4.new_code_cell(disguised(codes[copied])))
    results, release = _class_on_disk(tmp_path, codes, students, {"mover": mover})
    _, _, pairs, unreadable = write_report(GradedFolder(tmp_path), "Causal attention", results, release)
    assert not unreadable
    assert {pairs[0].a, pairs[0].b} == {copied, "mover"} and pairs[0].code > 0.6


def test_the_releases_code_and_edits_that_never_run_are_no_evidence(tmp_path, synthetic_class):
    """Two students who hand in the release untouched share only its code, and an edit of a
    read-only cell is restored before grading (so never runs): neither makes a pair."""
    codes, _, _ = synthetic_class
    students = [COPIED[1], *[s for s in codes if not s.startswith("copy-of-") and s not in COPIED][:11]]
    release = nbformat.read(ASSIGNMENT.release_notebook, as_version=4)
    extra = {"dee": copy.deepcopy(release), "eve": copy.deepcopy(release)}
    for student, other in (("fay", COPIED[1]), ("gus", COPIED[2])):
        nb = copy.deepcopy(release)
        next(c for c in nb.cells if c.cell_type == "code" and c.metadata.get("nbgrader", {}).get("solution")).source \
            = codes[other] + "\n"
        locked = next(c for c in nb.cells if c.cell_type == "code" and c.metadata.get("nbgrader", {}).get("locked")
                      and not c.metadata["nbgrader"].get("grade"))
        locked.source += "\n" + codes[COPIED[0]]  # the same rare code, in a cell grading restores
        extra[student] = nb
    results, release = _class_on_disk(tmp_path, codes, students, extra)
    _, _, pairs, _ = write_report(GradedFolder(tmp_path), "Causal attention", results, release)
    flagged = {frozenset((p.a, p.b)) for p in pairs if p.code > 0}
    assert frozenset(("dee", "eve")) not in flagged and frozenset(("fay", "gus")) not in flagged
    fay = next(p for p in pairs if {p.a, p.b} == {"fay", COPIED[1]})  # her answers are a copy: she is not left out
    assert fay.code > 0.6


def test_student_ids_that_look_like_formulas_stay_text_in_similarity_csv(tmp_path, synthetic_class):
    codes, _, _ = synthetic_class
    copied = codes[COPIED[0]]
    results, release = _class_on_disk(tmp_path, {"=HYPERLINK(1)": copied, "@copy": copied},
                                      ["=HYPERLINK(1)", "@copy"])
    table, _, _, _ = write_report(GradedFolder(tmp_path), "Causal attention", results, release)
    row = next(csv.DictReader(open(table)))
    assert {row["student_a"], row["student_b"]} == {"'=HYPERLINK(1)", "'@copy"}
