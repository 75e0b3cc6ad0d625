"""Hidden means hidden: what a student reads before the due date is computed as if the checks
hidden until then never ran, and before any of them runs (checks/plugin.py `run_views`).

The checks of each visibility level (course/visibility.py) run after every check below it, the
higher levels in a fork of the submission; the what-if runs of localisation, which hand the
reference's values to the student's code, run sealed. These are security tests: they never skip
under CI (conftest's `sandbox_required`).
"""
import json

import nbformat
import pytest

from autograder.course import Course
from autograder.course.visibility import Visibility
from autograder.runs.batch import grade_batch
from autograder.service.views import student_view

from attacks import PROBE_LOGGER, reporting_forward
from helpers import ASSIGNMENT, EXAMPLES, make_notebook, new_course, write

needs_bwrap = pytest.mark.usefixtures("sandbox_required")
SEED = 77
HIDE = '\n[visibility]\n"ex3::test_reference_values" = "after_due_date"\n' \
       '"ex3::test_canonical_seeded_values" = "after_due_date"\n"ex5" = "after_due_date"\n"ex8_model" = "hidden"\n'


def course_hiding(tmp_path, name, hide=HIDE, change_hidden_check=False):
    """A copy of the course whose causal_attention hides `hide`; with `change_hidden_check`, its hidden
    check test_reference_values probes other shapes, more often."""
    root = new_course(tmp_path / name)
    assignment = Course(root).assignment(ASSIGNMENT)
    settings = assignment.folder / "assignment.toml"
    settings.write_text(settings.read_text() + hide)
    if change_hidden_check:  # other shapes, and one probe more (the same cases, weights and words)
        checks = assignment.checks / "test_ex3.py"
        text = checks.read_text()
        changed = text.replace('@pytest.mark.parametrize("tokens", [12, 5], ids=["full", "short"])',
                               '@pytest.mark.parametrize("tokens", [11, 6], ids=["full", "short"])')
        changed = changed.replace("    expect_reference_output(student, reference, NAME, (6, 4, 12), randn(rng, 3, tokens, 6)",
                                  "    student.structure(student.new(NAME, (6, 4, 12)))\n"
                                  "    expect_reference_output(student, reference, NAME, (6, 4, 12), randn(rng, 2, tokens, 6)")
        assert changed.count("randn(rng, 2, tokens, 6)") == 1 and "[11, 6]" in changed
        checks.write_text(changed)
    return Course(root).assignment(ASSIGNMENT)


def graded(assignment, notebooks, seed=SEED):
    """{student: Result} of `notebooks` ({student: notebook}) graded in sandboxes by grade_batch."""
    folder = assignment.course.root / "handed-in"
    folder.mkdir(exist_ok=True)
    for student, notebook in notebooks.items():
        write(folder, student, notebook)
    report = grade_batch(assignment, [folder], jobs=1, seed=seed)
    return {result.student_id: result for result in report.results}


def shown_text(result, assignment, due_passed):
    """Everything a student reads of `result` now, as the service gives it (its JSON)."""
    view = student_view(result, Visibility.of(assignment), due_passed)
    return json.dumps({**view.to_json(), "errors": [e for c in view.cells for e in c.errors] + view.cell_errors},
                      sort_keys=True)


# ex1 wrong and shown (localised: its what-ifs carry the reference's values), ex3 wrong only where
# the hidden checks look (scaled by sqrt(d_in): the shown checks use d_in == d_out), and the probe
# logger reporting through the data set (shown: ex8_data) and the language model (for the TA: ex8_model).
HOSTILE = {
    "ex1_answer": [("qkt / math.sqrt(d_out)", "qkt")],
    "ex3_answer": [("math.sqrt(self.d_out)", "math.sqrt(x.shape[-1])")],
}


def hostile_notebook():
    return make_notebook(HOSTILE, after={"ex1_answer": PROBE_LOGGER,
                                         "ex8_data_answer": reporting_forward("MyData", "__getitem__"),
                                         "ex8_model_answer": reporting_forward("BadLM_V2")})


@needs_bwrap
def test_code_that_logs_every_probe_shows_nothing_of_a_hidden_check_before_the_due_date(tmp_path):
    """The same submission, graded with a hidden check that probes other shapes (and more often),
    reads exactly the same before the due date: nothing of the hidden checks' probes, of their count,
    or of whether their diagnosis ran reached it. After the due date the hidden checks' reports
    differ, so the logger's channel is real. No what-if value ever reaches the submission's own
    process, in memory or in a file."""
    first = course_hiding(tmp_path, "a")
    other = course_hiding(tmp_path, "b", change_hidden_check=True)
    mine, theirs = graded(first, {"eve": hostile_notebook()})["eve"], graded(other, {"eve": hostile_notebook()})["eve"]
    before = shown_text(mine, first, due_passed=False)
    assert before == shown_text(theirs, other, due_passed=False)
    assert "seen " in before and "digest" in before  # the logger did report, through the language model
    assert "sqrt(d_in)" not in before and "fix Exercise 3" not in before  # ex3's mistake is in hidden checks only
    after = shown_text(mine, first, due_passed=True)
    assert after == shown_text(theirs, other, due_passed=True)  # after the due date too: ex8_model is the TA's
    assert "sqrt(d_in)" in after
    whole = [json.dumps(result.to_json()) for result in (mine, theirs)]
    assert whole[0] != whole[1]  # for the TA, the hidden checks' own reports differ: the logger's channel is real
    for text in (before, after, *whole):
        assert "trial values []" in text and "leaked file []" in text
        assert "trial values [-" not in text and not any(f"trial values [{d}" in text for d in "0123456789")
    ex1 = next(cell for cell in mine.views[0].cells if cell.name == "ex1")
    assert any(check.name == "test_diagnosis" and "line" in check.message for check in ex1.checks)  # localised


@pytest.mark.slow
@needs_bwrap
def test_after_the_due_date_the_result_is_the_one_graded_with_nothing_hidden(tmp_path):
    """Views change what a student reads when, never the grade: the whole result of every example
    student (and a crashing one) is the result graded with nothing hidden, check by check."""
    plain = course_hiding(tmp_path, "plain", hide="")
    hiding = course_hiding(tmp_path, "hiding")
    notebooks = {name: make_notebook(edits) for name, edits in EXAMPLES.items() if edits is not None}
    expected, found = graded(plain, notebooks), graded(hiding, notebooks)
    for name in notebooks:
        ours, theirs = found[name].without_timings(), expected[name].without_timings()
        for record in (ours, theirs):
            record["extra_data"].pop("visibility", None)
            for key in ("answers_key", "path"):  # the course's split is in the key; each course its own folder
                record["extra_data"].pop(key)
        assert ours == theirs, name
        assert found[name].views and found[name].views[0].level == 0


# -- every corpus answer, in this process (the views' logic; the forks are the tests above) ------
def in_process(notebook, tag):
    """The namespace a notebook's code cells leave, run here in order (each cell compiled under a
    name of its own, as IPython does, so value localisation finds its lines), and the cells' errors
    as a cell report's entries."""
    import contextlib
    import io
    import linecache
    import signal

    namespace, errors = {"__name__": "__main__"}, []

    def too_long(*args):
        raise TimeoutError("too long")

    previous = signal.signal(signal.SIGALRM, too_long)
    try:
        for index, cell in enumerate(notebook.cells):
            if cell.cell_type != "code":
                continue
            name = f"<ipython-input-{index}-{tag}>"
            linecache.cache[name] = (len(cell.source), None, cell.source.splitlines(True), name)
            signal.alarm(30)
            try:
                with contextlib.redirect_stdout(io.StringIO()):
                    exec(compile(cell.source, name, "exec"), namespace)
            except Exception as error:  # noqa: BLE001 (a mistake of the answer's: recorded, and on)
                errors.append({"cell": f"cell {index}", "error": f"{type(error).__name__}: {error}"})
            finally:
                signal.alarm(0)
    finally:
        signal.signal(signal.SIGALRM, previous)
    return namespace, errors


def said(cells):
    """What a view says, check by check ({cell: [(check, passed, message, because)]}): its points aside."""
    return {name: [(check.name, check.passed, check.message, check.because) for check in cell.checks]
            for name, cell in cells.items()}


@pytest.mark.slow
@pytest.mark.parametrize("assignment", ["causal_attention", "self_attention"])
def test_every_corpus_mistake_hidden_where_it_is_wrong_reads_as_the_reference_before_the_due_date(assignment):
    """For every mistake of the corpus, with the checks it fails hidden until the due date: before
    the due date it reads exactly as the reference solution does with the same checks hidden (no
    diagnosis, no withheld point, no consequence, no "fix Exercise N first", no note), and the whole
    result is the one graded with nothing hidden. In this process: the views are computed alike in
    a sandbox, and the tests above show what the forks add there."""
    from autograder.authoring.corpus import load, notebook
    from autograder.checks.runner import CheckSession
    from autograder.grading.notebook import grade_cells
    from autograder.grading.submission import explained as judge
    from autograder.inside.student import NamespaceStudent
    from autograder.runs.recording import read_source
    from helpers import COURSE

    found = COURSE.assignment(assignment)
    release = nbformat.read(found.release_notebook, as_version=4)
    entries = [e for e in load(found, list(grade_cells(read_source(found)))) if e.outcome == "mistake"]
    reference = in_process(nbformat.read(found.source_notebook, as_version=4), "reference")[0]
    session, builds_on, seed = CheckSession(found), found.builds_on, 5
    checked, unseen = 0, []
    try:
        for entry in entries:
            answers = notebook(entry, release, found)
            namespace, errors = in_process(answers, entry.name)
            whole = judge(session.run_views(NamespaceStudent(namespace), seed).cells, errors, builds_on)
            namespace, errors = in_process(answers, entry.name)  # afresh, as each grading starts (some keep state)
            failing = {(cell, check.name.split("[")[0]) for cell, result in whole.items() for check in result.checks
                       if not check.passed and not check.diagnosis}
            if not failing:  # only a sandbox tells where a variable's value came from (test_corpus has these)
                unseen.append(entry.name)
                continue

            def levels(cell, name, failing=failing):
                return 1 if (cell, name.split("[")[0]) in failing else 0

            views = session.run_views(NamespaceStudent(namespace), seed, levels)
            theirs = session.run_views(NamespaceStudent(reference), seed, levels)
            before = said(judge(views.levels[0][0], errors, builds_on))
            assert before == said(judge(theirs.levels[0][0], [], builds_on)), entry.name
            assert said(judge(views.cells, errors, builds_on)) == said(whole), entry.name
            checked += 1
    finally:
        session.close()
    assert checked + len(unseen) == len(entries) and checked > 50 and len(unseen) <= 3, unseen


# What a submission may learn of the batch's seed: the seed its own random numbers start from, and
# every seed a probe hands it (traces and what-ifs are asked with a check's seed).
SEED_SPY = """
import sys as _sys, torch as _torch
cells_seed = _torch.initial_seed()
seeds_seen = []
_probes = _sys.modules.get("autograder.inside.student")
if _probes is not None:
    _trace = _probes.NamespaceStudent.trace
    def _spied(self, *args, **kwargs):
        seeds_seen.append(kwargs.get("seed"))
        return _trace(self, *args, **kwargs)
    _probes.NamespaceStudent.trace = _spied


def seeds_report():
    return f"cells seed {cells_seed}, seeds seen {seeds_seen}"
"""


@needs_bwrap
def test_no_seed_student_code_sees_tells_the_batchs_seed(tmp_path):
    """The batch's seed picks every check's inputs (all term long, in the service): a submission that
    prints torch.initial_seed() and every seed a probe hands it learns nothing that leads back to it,
    not even by the old derivation (seed * 1_000_003 + crc32(name), invertible)."""
    import re
    import zlib

    course = course_hiding(tmp_path, "seed", hide='\n[visibility]\n"ex8_model" = "hidden"\n')
    reporter = reporting_forward("BadLM_V2").replace("report()", "seeds_report()")  # asked after the diagnoses
    notebook = make_notebook({"ex1_answer": HOSTILE["ex1_answer"]}, after={"ex1_answer": SEED_SPY,
                                                                           "ex8_model_answer": reporter})
    result = graded(course, {"sam": notebook}, seed=424242)["sam"]
    said = " ".join(check.message for cell in result.cells for check in cell.checks)
    found = re.search(r"cells seed (\d+), seeds seen \[([\d, ]*)\]", said)
    assert found, said[:2000]
    seen = [int(found[1])] + [int(n) for n in found[2].split(",") if n.strip()]
    assert len(seen) >= 2 and 424242 not in seen  # the cells' seed, and the traces' of Exercise 1's diagnosis
    inverse = pow(1_000_003, -1, 2**31)
    for seed in seen:
        for name in ("test_diagnosis", "test_random_scores[2d]", "test_notebook_values"):
            assert (seed - zlib.crc32(name.encode())) * inverse % 2**31 != 424242
