"""Reruns know what changed: a result made with other checks, weights or settings is graded
again (never shown as current), one of another seed is kept, and late penalties always follow
the current policy, in every output and in nbgrader's gradebook, for the students a rerun
skips too."""
import csv
import re
from argparse import Namespace
from datetime import datetime, timedelta, timezone

import pytest
from nbgrader.api import Gradebook

from autograder.grading.notebook import InvalidNotebook, read_notebook, sha256
from autograder.outputs.gradebook_db import gradebook_url
from autograder.record import GRADED, INVALID, CellScore, read_result
from autograder.runs.batch import BatchReport, grade_batch
from helpers import assignment_of, make_gradebook, make_result, new_course
from test_identical import CountingScheduler, hand_in

CHECK = ("exercises", "causal_attention", "checks", "test_ex3.py")
DUE = datetime(2026, 11, 20, 23, 59, tzinfo=timezone.utc)
needs_bwrap = pytest.mark.usefixtures("sandbox_required")


def reweigh(course, weight):
    """test_ex3's weighted check (test_reference_values) with another weight."""
    path = course.joinpath(*CHECK)
    path.write_text(re.sub(r"@pytest\.mark\.weight\(\d+\)", f"@pytest.mark.weight({weight})", path.read_text()))


class WeightScheduler(CountingScheduler):
    """'Grades' each notebook by the course's current weight of test_ex3's weighted check, as if
    every student failed that check: a result made with another weight has another score."""

    def grade(self, spec, submissions):
        from pathlib import Path

        weight = int(re.search(r"@pytest\.mark\.weight\((\d+)\)", Path(spec.course, *CHECK).read_text())[1])
        for result in super().grade(spec, submissions):
            result.cells = [CellScore("ex3", 10.0 - weight, 10.0, "feedback")]
            result.score = 10.0 - weight
            result.output = f"{result.student_id}: {result.score:g} / 10 points"
            yield result


def grades(out):
    return {row["student_id"]: float(row["total"]) for row in csv.DictReader(open(out / "grades.csv"))}


def test_a_changed_weight_is_graded_again_never_shown_as_current(tmp_path):
    course = new_course(tmp_path)
    hand_in(tmp_path / "in", {"a1": "ada", "a2": "ada", "b1": "ben"})
    first = grade_batch(assignment_of(course), [tmp_path / "in"], scheduler=WeightScheduler(), seed=1)
    assert {r.student_id: r.score for r in first.results} == {"a1": 8, "a2": 8, "b1": 8}
    reweigh(course, 5)
    scheduler = WeightScheduler()
    second = grade_batch(assignment_of(course), [tmp_path / "in"], scheduler=scheduler)  # no --force
    assert second.skipped == 0 and second.regraded == 3
    assert sorted(scheduler.ran) == ["a1", "b1"]  # a2's answers are a1's: graded once, copied
    assert {r.student_id: r.score for r in second.results} == {"a1": 5, "a2": 5, "b1": 5}
    out = second.out_dir
    assert all(read_result(out, student).score == 5 for student in ("a1", "a2", "b1"))
    assert grades(out) == {"a1": 5, "a2": 5, "b1": 5}
    assert len(second.changes) == 3 and len(list((out / "history").iterdir())) == 1  # the old grades, kept as old
    third = grade_batch(assignment_of(course), [tmp_path / "in"], scheduler=(scheduler := WeightScheduler()))
    assert scheduler.ran == [] and third.skipped == 3 and third.regraded == 0  # nothing changed: nothing runs


def test_a_rerun_that_changed_nothing_reads_no_notebook_again(tmp_path, monkeypatch):
    """Whether an earlier result is current is known without reading the notebook (a class of
    50 MB notebooks would be parsed again on every rerun): `.answers/<key>.made` says what
    judged it. Without that file, the notebook is read, and a change is still seen."""
    import autograder.runs.identical as identical

    course = new_course(tmp_path)
    hand_in(tmp_path / "in", {"a1": "ada", "b1": "ben"})
    first = grade_batch(assignment_of(course), [tmp_path / "in"], scheduler=WeightScheduler(), seed=1)
    reading = identical.read_notebook_and_sha
    monkeypatch.setattr(identical, "read_notebook_and_sha", lambda *a: pytest.fail("a notebook was read again"))
    again = grade_batch(assignment_of(course), [tmp_path / "in"], scheduler=WeightScheduler())
    assert again.skipped == 2 and again.regraded == 0
    monkeypatch.setattr(identical, "read_notebook_and_sha", reading)
    for made in (first.out_dir / ".answers").glob("*.made"):
        made.unlink()
    reweigh(course, 4)
    scheduler = WeightScheduler()
    assert grade_batch(assignment_of(course), [tmp_path / "in"], scheduler=scheduler).regraded == 2
    assert sorted(scheduler.ran) == ["a1", "b1"]


def test_a_result_of_another_seed_is_kept_unless_forced(tmp_path):
    course = new_course(tmp_path)
    hand_in(tmp_path / "in", {"a1": "ada", "b1": "ben"})
    grade_batch(assignment_of(course), [tmp_path / "in"], scheduler=CountingScheduler(), seed=1)
    scheduler = CountingScheduler()
    report = grade_batch(assignment_of(course), [tmp_path / "in"], scheduler=scheduler, seed=2)
    assert scheduler.ran == [] and report.skipped == 2 and report.regraded == 0
    assert {r.seed for r in report.results} == {1}
    scheduler = CountingScheduler()
    grade_batch(assignment_of(course), [tmp_path / "in"], scheduler=scheduler, seed=2, force=True)
    assert sorted(scheduler.ran) == ["a1", "b1"]


class ReadingScheduler(CountingScheduler):
    """'Grades' as CountingScheduler, but reads each notebook as a worker does: invalid when
    the batch's limit refuses it."""

    def grade(self, spec, submissions):
        for submission in submissions:
            result = next(super().grade(spec, [submission]))
            try:
                read_notebook(submission.path, spec.max_notebook_bytes)
            except InvalidNotebook as error:
                result.status, result.score, result.notes = INVALID, 0.0, [str(error)]
            yield result


def test_a_raised_size_limit_grades_the_notebooks_it_refused(tmp_path):
    import nbformat

    from helpers import example

    course = new_course(tmp_path)
    pasted = example("ada")
    pasted.cells.append(nbformat.v4.new_code_cell("DATA = " + repr("x" * 2**20)))
    (tmp_path / "in").mkdir()
    nbformat.write(pasted, tmp_path / "in" / "p1.ipynb")
    hand_in(tmp_path / "in", {"a1": "ada"})
    first = grade_batch(assignment_of(course), [tmp_path / "in"], scheduler=ReadingScheduler(), seed=1,
                        max_notebook_mb=0.5)
    assert {r.student_id: r.status for r in first.results} == {"a1": GRADED, "p1": INVALID}
    scheduler = ReadingScheduler()
    again = grade_batch(assignment_of(course), [tmp_path / "in"], scheduler=scheduler, max_notebook_mb=0.5)
    assert scheduler.ran == [] and again.skipped == 2  # still too large: its result stands
    scheduler = ReadingScheduler()
    raised = grade_batch(assignment_of(course), [tmp_path / "in"], scheduler=scheduler, max_notebook_mb=2)
    assert scheduler.ran == ["p1"] and raised.regraded == 1
    assert {r.student_id: r.status for r in raised.results} == {"a1": GRADED, "p1": GRADED}


# -- late penalties follow the current policy ---------------------------------------------------
def set_policy(course, percent_per_day=None):
    settings = course / "exercises" / "causal_attention" / "assignment.toml"
    text = settings.read_text().split("\n[late]\n")[0]
    if percent_per_day is not None:
        # of the autograded points: the weight scheduler grades 10 of them (the notebook holds more)
        text += f'\n[late]\ndue = {DUE.isoformat()}\npercent_per_day = {percent_per_day}\nof = "autograded"\n'
    settings.write_text(text)


def gradebook_penalties(course):
    with Gradebook(gradebook_url(course)) as gradebook:
        return {s.student.id: s.notebooks[0].late_submission_penalty
                for s in gradebook.assignment_submissions("causal_attention")}


def late_class(tmp_path):
    """A course with a late policy of 10% a day and three students who handed in the same
    answers: on time, 1 day 2 hours late (timestamp.txt) and 5 hours late (a time the TA gives,
    --submitted-at, in the first run only). Returns (course, inputs, the first run's report)."""
    course = make_gradebook(new_course(tmp_path))
    submitted = course / "submitted"
    for student, late in {"ontime": timedelta(hours=-1), "late": timedelta(days=1, hours=2)}.items():
        hand_in(submitted / student / "causal_attention", {"causal_attention": "ada"})
        (submitted / student / "causal_attention" / "timestamp.txt").write_text(
            (DUE + late).strftime("%Y-%m-%d %H:%M:%S.%f UTC"))
    hand_in(tmp_path / "csv", {"given": "ada"})
    inputs = [submitted, tmp_path / "csv" / "given.ipynb"]
    set_policy(course, 10)
    first = grade_batch(assignment_of(course), inputs, scheduler=WeightScheduler(), seed=1,
                        submitted_at={"given": DUE + timedelta(hours=5)})
    penalties = {student: read_result(first.out_dir, student).late_penalty for student in ("ontime", "late", "given")}
    assert penalties == {"ontime": 0, "late": 2, "given": 1}  # of 8 / 10: 2 started days late and 1, 10% a day
    return course, inputs, first


def test_a_changed_or_removed_late_policy_reaches_every_student_and_the_gradebook(tmp_path):
    course, inputs, first = late_class(tmp_path)
    out = first.out_dir
    set_policy(course, 20)  # the late policy judges no answer: nobody runs, the penalties move
    scheduler = WeightScheduler()
    second = grade_batch(assignment_of(course), inputs, scheduler=scheduler)
    assert scheduler.ran == [] and second.skipped == 3 and second.regraded == 0
    assert sorted(result.student_id for result in second.late_updated) == ["given", "late"]
    for student, penalty in (("late", 4), ("given", 2)):  # "given": the time given before still counts
        result = read_result(out, student)
        assert result.late_penalty == penalty and result.score == 8 - penalty and result.raw_score == 8
        assert "% of the 10 autograded points, 20% per started day" in result.late_note
        assert result.output.startswith(f"{student}: {8 - penalty:g} / 10 points (8 before a late penalty of")
    assert grades(out) == {"ontime": 8, "late": 4, "given": 6}
    assert gradebook_penalties(course) == {"ontime": None, "late": 4, "given": 2}

    set_policy(course)  # no late policy any more
    grade_batch(assignment_of(course), inputs, scheduler=WeightScheduler())
    for student in ("ontime", "late", "given"):
        result = read_result(out, student)
        assert result.late_penalty == 0 and result.score == 8 and result.late_note == "", student
        assert result.output.splitlines()[0] == f"{student}: 8 / 10 points"
    assert grades(out) == {"ontime": 8, "late": 8, "given": 8}
    assert "late penalty" not in (out / "feedback" / "late.html").read_text()
    assert not any(gradebook_penalties(course).values())  # nbgrader export subtracts nothing either


def test_only_the_late_policy_changed_regrades_nobody_and_any_other_setting_regrades_everyone(tmp_path, capsys):
    """The [late] table is left out of what judges a submission (grading/bundle.py): the penalty
    is applied afterwards, from the current policy. Every other setting still regrades."""
    from autograder.cli.grading import _print_batch
    from autograder.outputs.folder import GradedFolder

    course, inputs, first = late_class(tmp_path)
    out = first.out_dir
    made = sorted(path.name for path in (out / ".answers").iterdir())
    set_policy(course, 30)
    scheduler = WeightScheduler()
    report = grade_batch(assignment_of(course), inputs, scheduler=scheduler)
    assert scheduler.ran == [] and report.graded == [] and report.regraded == 0 and report.skipped == 3
    assert sorted(result.student_id for result in report.late_updated) == ["given", "late"]
    assert {student: read_result(out, student).late_penalty for student in ("ontime", "late", "given")} == \
        {"ontime": 0, "late": 6, "given": 3}  # 30% of the 10 points a started day: 2 days and 1
    assert grades(out) == {"ontime": 8, "late": 2, "given": 5}
    assert gradebook_penalties(course) == {"ontime": None, "late": 6, "given": 3}
    assert sorted(path.name for path in (out / ".answers").iterdir()) == made  # the same answers keys
    _print_batch(report, Namespace(assignment="causal_attention", verbose=False), GradedFolder(out))
    printed = " ".join(capsys.readouterr().out.split())
    assert "graded 0, failed 0, skipped 3 (already graded), late penalty updated for 2 skipped" in printed

    settings = course / "exercises" / "causal_attention" / "assignment.toml"
    for old, new in (("diagnoses_named_min = 0.9", "diagnoses_named_min = 0.8"),  # a table's setting
                     ('title = "Causal attention"', 'title = "Causal attention, again"')):  # a top-level one
        assert old in settings.read_text(), old  # else the change changes nothing, and nothing is regraded
        settings.write_text(settings.read_text().replace(old, new))
        scheduler = WeightScheduler()
        report = grade_batch(assignment_of(course), inputs, scheduler=scheduler)
        assert len(scheduler.ran) == 1 and report.regraded == 3 and report.skipped == 0, new  # identical answers: one run
        assert read_result(out, "late").late_penalty == 6  # the policy still applies to the new results


def test_the_penalty_of_a_skipped_student_follows_a_new_extension_or_time(tmp_path):
    """Nothing that grades changed, so nobody runs; a new extension and a corrected time
    still reach the results, grades.csv, the pages and the gradebook."""
    course, inputs, first = late_class(tmp_path)
    out = first.out_dir
    roster = {"late": {"student_id": "late", "extension_hours": "48"}}
    scheduler = WeightScheduler()
    second = grade_batch(assignment_of(course), inputs, scheduler=scheduler, roster=roster,
                         submitted_at={"given": DUE + timedelta(days=2, hours=1)})
    assert scheduler.ran == [] and second.skipped == 3 and second.regraded == 0
    assert sorted(r.student_id for r in second.late_updated) == ["given", "late"]
    assert read_result(out, "late").late_penalty == 0 and read_result(out, "late").score == 8
    assert read_result(out, "given").late_penalty == 3 and read_result(out, "given").score == 5
    assert read_result(out, "given").output.count(" before a late penalty") == 1
    assert grades(out) == {"ontime": 8, "late": 8, "given": 5}
    assert gradebook_penalties(course) == {"ontime": None, "late": None, "given": 3}
    assert "late penalty" not in (out / "feedback" / "late.html").read_text()
    assert sorted(new.student_id for _, new in second.changes) == ["given", "late"]  # in changes.csv
    again = grade_batch(assignment_of(course), inputs, scheduler=WeightScheduler(), roster=roster)
    assert again.late_updated == [] and read_result(out, "given").late_penalty == 3  # the time given last


def test_the_terminal_says_how_many_were_graded_again_and_whose_penalty_moved(tmp_path, capsys):
    from autograder.cli.grading import _print_batch
    from autograder.outputs.folder import GradedFolder

    results = [make_result(s, {"ex1": 7.0}, path=f"{s}.ipynb", notebook_sha256=s) for s in ("a1", "b1", "c1")]
    report = BatchReport(graded=results[:2], skipped=1, regraded=2, late_updated=results[2:], results=results,
                         out_dir=tmp_path)
    _print_batch(report, Namespace(assignment="causal_attention", verbose=False), GradedFolder(tmp_path))
    printed = " ".join(capsys.readouterr().out.split())
    assert "graded 2, failed 0, skipped 1 (already graded), regraded 2 (their earlier results were made with" \
           " other checks, settings or grader)" in printed
    assert "late penalty updated for 1 skipped" in printed


@needs_bwrap
@pytest.mark.slow
def test_a_real_weight_change_regrades_with_the_new_weight(tmp_path):
    """The issue's case, graded for real: ben fails test_ex3's weighted check (softmax over the
    wrong dimension); after its weight changes, a rerun without --force gives his new score."""
    course = make_gradebook(new_course(tmp_path))
    hand_in(tmp_path / "in", {"ben": "ben"})
    before = grade_batch(assignment_of(course), [tmp_path / "in"], jobs=1, seed=1).results[0]
    reweigh(course, 8)
    report = grade_batch(assignment_of(course), [tmp_path / "in"], jobs=1)
    after = report.results[0]
    assert report.regraded == 1 and report.skipped == 0
    assert after.scores["ex3"] < before.scores["ex3"] and after.max_score == before.max_score == 26
    assert grades(report.out_dir)["ben"] == after.score and after.notebook_sha256 == sha256(tmp_path / "in" / "ben.ipynb")


def test_a_dry_run_says_exactly_what_the_run_then_does(tmp_path):
    """`grade --dry-run` (`plan_batch`) decides as the run decides: it says which students are
    graded, graded again, kept and left out as removed, and the run that follows does just that,
    before and after a change of the checks (issue 47)."""
    from autograder.runs.batch import plan_batch
    from autograder.runs.remove import remove
    from helpers import cli

    course = new_course(tmp_path)
    assignment = assignment_of(course)
    hand_in(tmp_path / "in", {"a1": "ada", "b1": "ben", "c1": "cy"})
    grade_batch(assignment, [tmp_path / "in"], scheduler=WeightScheduler(), seed=1)
    remove(assignment, ["c1"])
    hand_in(tmp_path / "in", {"d1": "dee"})

    def plan():
        found = plan_batch(assignment, [tmp_path / "in"], isolation="bubblewrap")
        fresh = sorted(s.student_id for s in found.todo if s.student_id not in found.again)
        return fresh, sorted(found.again), sorted(r.student_id for r in found.kept), found.removed

    def run():
        scheduler = WeightScheduler()
        report = grade_batch(assignment, [tmp_path / "in"], scheduler=scheduler)
        graded = sorted(r.student_id for r in report.graded)
        return graded, report.regraded, report.skipped, sorted(r.student_id for r in report.results)

    before = plan()
    assert before == (["d1"], [], ["a1", "b1"], ["c1"])
    assert run() == (["d1"], 0, 2, ["a1", "b1", "d1"])  # c1, removed, is left out as the dry run said
    reweigh(course, 5)
    after = plan()
    assert after == ([], ["a1", "b1", "d1"], [], ["c1"])
    printed = cli("grade", "causal_attention", tmp_path / "in", "--course", course, "--dry-run")
    assert "Would grade 0, grade again 3 (a1, b1, d1), keep 0 already graded, and leave out 1 removed (c1)" in \
        " ".join(printed.stdout.split()), printed.stdout + printed.stderr
    assert run() == (["a1", "b1", "d1"], 3, 0, ["a1", "b1", "d1"])


def test_export_says_why_a_student_on_the_roster_has_no_grade(tmp_path):
    """Not "nothing handed in" for everyone without a grade (issue 47): a student who handed in only a
    .py file, one a TA removed (with how to undo it), and one who handed in nothing are told apart."""
    import shutil

    from autograder.runs.remove import remove
    from helpers import cli

    course = make_gradebook(new_course(tmp_path))
    assignment = assignment_of(course)
    hand_in(tmp_path / "flat", {"ada": "ada", "ben": "ben"})
    for student in ("ada", "ben"):
        target = course / "submitted" / student / "causal_attention"
        target.mkdir(parents=True)
        shutil.copy(tmp_path / "flat" / f"{student}.ipynb", target / "causal_attention.ipynb")
    (course / "submitted" / "cy" / "causal_attention").mkdir(parents=True)
    (course / "submitted" / "cy" / "causal_attention" / "causal_attention.py").write_text("x = 1\n")
    grade_batch(assignment, [course / "submitted"], scheduler=CountingScheduler(), seed=1)
    remove(assignment, ["ben"])
    roster = tmp_path / "roster.csv"
    roster.write_text("student_id\nada\nben\ncy\ndee\n")
    done = cli("export", "csv", "causal_attention", "--roster", roster, "--course", course)
    said = " ".join(done.stdout.split())
    assert "1 on the roster with nothing handed in (left empty): dee" in said, said
    assert "1 handed in no notebook (left empty; ask them for the .ipynb): cy: handed in" in said
    assert "cy/causal_attention/causal_attention.py, no notebook it could grade" in said
    assert "1 removed (left empty): ben: removed on" in said and "autograder remove causal_attention ben --undo" in said
