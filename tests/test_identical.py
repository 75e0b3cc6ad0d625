"""Identical answers are graded once, within a batch and across batches, and never stale;
regrades keep the results they replace and list whose score moved."""
import csv

import nbformat

from autograder.runs.batch import grade_batch
from autograder.grading.bundle import bundle_hash
from autograder.outputs.folder import GradedFolder
from autograder.runs.identical import IdenticalAnswers
from autograder.grading.submission import REUSABLE, BatchSpec
from autograder.grading.notebook import Submission, sha256
from autograder.record import ERROR, GRADED, CellScore, CheckOutcome, read_result
from helpers import assignment_of, example, make_result


class CountingScheduler:
    """Stands in for the worker pool: 'grades' by the notebook's bytes and remembers who ran."""

    def __init__(self, status=GRADED, reusable=REUSABLE):
        self.ran, self.status, self.reusable = [], status, reusable

    def require_sandbox(self, unsafe_no_sandbox=False):
        from autograder.grading.sandbox.isolation import require_sandbox

        return require_sandbox(unsafe_no_sandbox)  # as the local pool: the same refusal

    def grade(self, spec, submissions):
        for submission in submissions:
            self.ran.append(submission.student_id)
            score = float(len(submission.path.read_bytes()) % 7)
            yield make_result(submission.student_id, [CellScore("ex1", score, 7.0, "feedback")], self.status,
                              assignment=spec.assignment, output=f"{submission.student_id}: {score:g} / 7 points",
                              seed=spec.seed, path=str(submission.path), notebook_sha256=sha256(submission.path),
                              reusable=self.reusable)


def hand_in(folder, kinds):
    folder.mkdir(parents=True, exist_ok=True)
    for student, kind in kinds.items():
        notebook = example(kind)
        for index, cell in enumerate(c for c in notebook.cells if c.cell_type == "code"):
            cell.execution_count = index + len(student)  # resubmissions differ in runs and metadata,
        notebook.metadata["last_saved"] = student  # not in answers
        nbformat.write(notebook, folder / f"{student}.ipynb")


def by_student(report):
    return {r.student_id: r for r in report.graded}


def test_a_batch_runs_each_answer_once(course, tmp_path):
    hand_in(tmp_path / "in", {"a1": "dee", "a2": "dee", "a3": "dee", "b1": "ada", "b2": "ada", "c1": "ben"})
    scheduler = CountingScheduler()
    report = grade_batch(assignment_of(course), [tmp_path / "in"], scheduler=scheduler, seed=1)
    assert sorted(scheduler.ran) == ["a1", "b1", "c1"]
    results = by_student(report)
    assert len(results) == 6 and [s for s, r in sorted(results.items()) if r.reused] == ["a2", "a3", "b2"]
    leader, copy = results["a1"], results["a2"]
    assert copy.score == leader.score and copy.cells == leader.cells and copy.answers_key == leader.answers_key
    assert copy.output.startswith("a2: ") and copy.path.endswith("a2.ipynb") and copy.notebook_sha256
    assert results["b1"].answers_key != leader.answers_key
    out = report.out_dir
    assert read_result(out, "a3").reused  # written like any other result ...
    assert read_result(out, "a1").answers_key == read_result(out, "a3").answers_key != ""
    assert (course / "autograded" / "a3" / "causal_attention" / "causal_attention.ipynb").exists()  # ... everywhere
    assert (out / "feedback" / "a3.html").exists()


def test_later_batches_reuse_and_force_runs_again(course, tmp_path):
    hand_in(tmp_path / "in", {"a1": "dee", "b1": "ada"})
    grade_batch(assignment_of(course), [tmp_path / "in"], scheduler=CountingScheduler(), seed=1)
    hand_in(tmp_path / "in", {"late": "ada"})  # a late student with the same answers
    scheduler = CountingScheduler()
    report = grade_batch(assignment_of(course), [tmp_path / "in"], scheduler=scheduler)
    assert scheduler.ran == [] and report.skipped == 2 and by_student(report)["late"].reused
    scheduler = CountingScheduler()
    grade_batch(assignment_of(course), [tmp_path / "in"], scheduler=scheduler, force=True, seed=1)
    assert sorted(scheduler.ran) == ["a1", "b1"]  # --force: run again (the copy of b1 is "late")


def test_a_result_whose_process_did_not_run_to_the_end_is_never_reused_by_a_later_batch(course, tmp_path):
    """A process that died, was killed or timed out may have ended for reasons outside the
    student's code: its result is not kept for identical answers, though it is recorded."""
    hand_in(tmp_path / "in", {"a1": "ada"})
    first = grade_batch(assignment_of(course), [tmp_path / "in"], scheduler=CountingScheduler(reusable=""), seed=1)
    assert by_student(first)["a1"].status == GRADED and not list((first.out_dir / ".answers").glob("*.json"))
    hand_in(tmp_path / "in", {"a2": "ada"})
    scheduler = CountingScheduler()
    report = grade_batch(assignment_of(course), [tmp_path / "in"], scheduler=scheduler)
    assert scheduler.ran == ["a2"] and not by_student(report)["a2"].reused  # run, not given a1's result
    kept = list((report.out_dir / ".answers").glob("*.json"))
    assert len(kept) == 1 and read_result(None, None, kept[0]).reusable == REUSABLE  # and why it may be


def test_a_changed_check_or_seed_reuses_nothing(course, tmp_path):
    hand_in(tmp_path / "in", {"a1": "ada"})
    grade_batch(assignment_of(course), [tmp_path / "in"], scheduler=CountingScheduler(), seed=1)
    hand_in(tmp_path / "in", {"a2": "ada"})
    check = course / "exercises" / "causal_attention" / "checks" / "test_ex3.py"
    check.write_text(check.read_text() + "\n# a fixed tolerance\n")
    scheduler = CountingScheduler()
    report = grade_batch(assignment_of(course), [tmp_path / "in"], scheduler=scheduler)
    # a1's result was made with the old check: graded again (see test_reruns.py), and a2 with it
    assert scheduler.ran == ["a1"] and report.regraded == 1 and by_student(report)["a2"].reused
    hand_in(tmp_path / "other", {"a3": "ada"})
    scheduler = CountingScheduler()
    grade_batch(assignment_of(course), [tmp_path / "other"], scheduler=scheduler, out_dir=tmp_path / "out2", seed=2)
    assert scheduler.ran == ["a3"]  # another seed: other random inputs, another result


def test_grader_errors_are_not_kept(course, tmp_path):
    hand_in(tmp_path / "in", {"a1": "dee", "a2": "dee"})
    report = grade_batch(assignment_of(course), [tmp_path / "in"], scheduler=CountingScheduler(ERROR), seed=1)
    assert {r.status for r in report.graded} == {ERROR} and report.results == []
    scheduler = CountingScheduler()
    grade_batch(assignment_of(course), [tmp_path / "in"], scheduler=scheduler)
    assert scheduler.ran == ["a1"]  # retried, once for both


def test_the_bundle_hash_covers_what_judges_and_nothing_else(course):
    assignment = assignment_of(course)
    before = bundle_hash(assignment)
    (assignment.folder / "corpus.toml").write_text((assignment.folder / "corpus.toml").read_text() + "\n# more\n")
    assert bundle_hash(assignment) == before  # the corpus judges the checks, not students
    settings = assignment.folder / "assignment.toml"
    settings.write_text(settings.read_text() + "\n# a comment\n[late]\ndue = 2026-11-20T23:59:00Z\npercent_per_day = 10\n")
    assert bundle_hash(assignment) == before  # the late policy is applied afterwards (runs/late.py)
    for path, more in ((assignment.solutions, "\n# changed\n"), (settings, "\n[limits]\ntimeout = 33\n"),
                       (assignment.folder / "checks" / "common.py", "\n# changed\n")):
        path.write_text(path.read_text() + more)
        assert bundle_hash(assignment) != before, path
        before = bundle_hash(assignment)


def test_the_key_is_about_what_runs(course, tmp_path):
    assignment = assignment_of(course)
    spec = BatchSpec(assignment=assignment.name, course=str(course), seed=1)
    source, release = (nbformat.read(p, as_version=4) for p in (assignment.source_notebook,
                                                                 assignment.release_notebook))
    answers = IdenticalAnswers(assignment, spec, GradedFolder(tmp_path), source, release)
    hand_in(tmp_path, {"x": "ben", "y": "ben", "z": "cy"})
    key = {name: answers.key(Submission(name, tmp_path / f"{name}.ipynb"))[0] for name in "xyz"}
    assert key["x"] == key["y"] != key["z"]
    tampered = nbformat.read(tmp_path / "y.ipynb", as_version=4)
    locked = next(c for c in tampered.cells if c.metadata.get("nbgrader", {}).get("locked"))
    locked.source += "\nprint('changed')"
    nbformat.write(tampered, tmp_path / "y.ipynb")
    assert answers.key(Submission("y", tmp_path / "y.ipynb"))[0] != key["x"]  # its note differs
    (tmp_path / "broken.ipynb").write_text("{")
    assert answers.key(Submission("broken", tmp_path / "broken.ipynb")) == (None, None, None)


# -- regrades keep the previous results and say what changed --------------------------------
class ShiftingScheduler(CountingScheduler):
    """'Grades' like CountingScheduler, plus `shift` points for the students in `moved`."""

    def __init__(self, moved=(), shift=1.0):
        super().__init__()
        self.moved, self.shift = set(moved), shift

    def grade(self, spec, submissions):
        for result in super().grade(spec, submissions):
            if result.student_id in self.moved:
                result.score += self.shift
                result.cells[0].score += self.shift
                result.cells[0].checks = [CheckOutcome("test_tolerance", "close enough", True)]
            else:
                result.cells[0].checks = [CheckOutcome("test_tolerance", "close enough", False, 1.0, "no")]
            yield result


def test_a_regrade_keeps_the_old_results_and_lists_whose_score_moved(course, tmp_path):
    hand_in(tmp_path / "in", {"a1": "ada", "b1": "ben", "c1": "cy", "d1": "dee"})
    first = grade_batch(assignment_of(course), [tmp_path / "in"], scheduler=ShiftingScheduler(), seed=1)
    before = {r.student_id: r.score for r in first.results}
    assert first.changes == [] and not (first.out_dir / "changes.csv").exists()
    second = grade_batch(assignment_of(course), [tmp_path / "in"], scheduler=ShiftingScheduler({"b1", "c1"}),
                         seed=1, force=True)
    out = second.out_dir
    rows = list(csv.DictReader(open(out / "changes.csv")))
    assert [r["student_id"] for r in rows] == ["b1", "c1"]
    assert float(rows[0]["old_score"]) == before["b1"] and float(rows[0]["new_score"]) == before["b1"] + 1
    assert rows[0]["change"] == "+1" and rows[0]["checks_now_passing"] == "ex1: test_tolerance"
    history = list((out / "history").iterdir())
    assert len(history) == 1 and sorted(p.name for p in history[0].iterdir()) == [
        "a1.json", "b1.json", "c1.json", "d1.json"]
    assert read_result(None, None, history[0] / "b1.json").score == before["b1"]  # the old result, kept
    assert read_result(out, "b1").score == before["b1"] + 1
    third = grade_batch(assignment_of(course), [tmp_path / "in"], scheduler=ShiftingScheduler({"a1"}, 2.0),
                        seed=1, force=True)
    assert [r["student_id"] for r in csv.DictReader(open(out / "changes.csv"))] == ["a1", "b1", "c1"]
    assert len(third.changes) == 3  # a1 moved up; b1 and c1 moved back down
    kept = sorted((out / "history").glob("*/changes.csv"))
    assert len(kept) == 1  # the second run's changes.csv, before the third replaced it


class InProcessScheduler(CountingScheduler):
    """Grades for real, but with one GradingWorker in this process (so a monkeypatch reaches it)."""

    def grade(self, spec, submissions):
        from autograder.grading.submission import GradingWorker

        worker = GradingWorker(spec).setup()
        try:
            for submission in submissions:
                self.ran.append(submission.student_id)
                yield worker.grade(submission)
        finally:
            worker.close()


def test_the_worker_grades_the_batch_s_own_reading_of_the_notebook(course, tmp_path, monkeypatch):
    """The batch reads and sanitizes each notebook for its answers key; the worker grades that
    reading instead of reading the file again (5 ms of a worker's CPU per submission)."""
    from autograder.grading import submission as worker_side

    def read_again(path):
        raise AssertionError(f"{path} was read a second time")

    monkeypatch.setattr(worker_side, "read_notebook", read_again)
    hand_in(tmp_path / "in", {"a1": "ada", "d1": "dee"})
    report = grade_batch(assignment_of(course), [tmp_path / "in"], scheduler=InProcessScheduler(), seed=1)
    results = by_student(report)
    assert results["a1"].status == GRADED and results["a1"].score == 26
    assert results["d1"].status == GRADED and results["d1"].score == 0
    assert results["a1"].notebook_sha256 == sha256(tmp_path / "in" / "a1.ipynb")


def test_each_feedback_page_is_written_as_its_result_comes_in(course, tmp_path):
    """Pages are written while the workers grade, not all after the last one."""
    from autograder.outputs.folder import GradedFolder
    from autograder.record import result_path

    hand_in(tmp_path / "in", {"a1": "dee", "b1": "ada", "b2": "ada"})
    seen = {}

    def on_result(result):
        out = course / "graded" / "causal_attention"
        seen[result.student_id] = (GradedFolder(out).feedback_page(result.student_id).exists(),
                                   result_path(out, result.student_id).exists())

    grade_batch(assignment_of(course), [tmp_path / "in"], scheduler=CountingScheduler(), seed=1,
                on_result=on_result)
    assert seen == {"a1": (True, True), "b1": (True, True), "b2": (True, True)}
