"""A batch writes exactly the outputs it is handed, and one output's failure costs only that output."""
import pytest

from autograder.outputs.base import Output
from autograder.outputs.folder import GradedFolder
from autograder.outputs.results import ResultFiles
from autograder.record import GRADED
from autograder.runs.batch import grade_batch
from autograder.runs.recording import graded_folder, standard_outputs
from helpers import assignment_of, new_course
from test_identical import CountingScheduler, hand_in


class Collected(Output):
    """Remembers what it was given."""

    what = "the collected list"

    def __init__(self):
        self.added, self.finished = [], None

    def add(self, result):
        self.added.append(result.student_id)

    def finish(self, results):
        self.finished = [result.student_id for result in results]
        return []


class Broken(Output):
    what = "the broken output"

    def __init__(self, student):
        self.student = student

    def add(self, result):
        if result.student_id == self.student:
            raise OSError(28, "No space left on device")

    def finish(self, results):
        raise RuntimeError("the disk is gone")


def test_only_the_outputs_asked_for_are_written(course, tmp_path):
    hand_in(tmp_path / "in", {"a1": "ada", "b1": "dee"})
    collected = Collected()
    out = tmp_path / "out"
    report = grade_batch(assignment_of(course), [tmp_path / "in"], [collected], out_dir=out,
                         scheduler=CountingScheduler(), seed=1)
    assert sorted(collected.added) == ["a1", "b1"] and collected.finished == ["a1", "b1"]
    assert [r.student_id for r in report.results] == ["a1", "b1"]  # handed over even with no result files
    folder = GradedFolder(out)
    assert folder.results() == []  # no result files were asked for
    for unasked in (folder.feedback, folder.report, folder.grades_csv, course / "gradebook.db", course / "autograded"):
        assert not unasked.exists(), unasked


def test_a_failing_output_costs_only_that_output(course, tmp_path):
    hand_in(tmp_path / "in", {"a1": "ada", "b1": "dee"})
    folder = graded_folder(assignment_of(course), tmp_path / "out")
    collected = Collected()
    report = grade_batch(assignment_of(course), [tmp_path / "in"], [ResultFiles(folder), Broken("a1"), collected],
                         out_dir=folder, scheduler=CountingScheduler(), seed=1)
    assert sorted(collected.added) == ["a1", "b1"]  # the output after the broken one still got both
    assert {r.student_id for r in folder.results()} == {"a1", "b1"}
    problems = dict(report.problems)
    assert problems["a1"] == "the broken output could not be written (OSError: [Errno 28] No space left on device)"
    assert problems[""].startswith("the broken output was not written (RuntimeError: the disk is gone)")
    assert "b1" not in problems


def test_when_the_result_file_fails_nothing_after_it_shows_the_grade(course, tmp_path):
    hand_in(tmp_path / "in", {"a1": "ada", "b1": "dee"})
    folder = graded_folder(assignment_of(course), tmp_path / "out")
    collected = Collected()

    class FullDisk(ResultFiles):
        def add(self, result):
            if result.student_id == "a1":
                raise OSError(28, "No space left on device")
            super().add(result)

    report = grade_batch(assignment_of(course), [tmp_path / "in"], [FullDisk(folder), collected], out_dir=folder,
                         scheduler=CountingScheduler(), seed=1)
    assert collected.added == ["b1"] and collected.finished == ["b1"]  # not in grades.csv or the gradebook either
    assert dict(report.problems)["a1"].endswith("; it is graded again next run")
    assert [r.student_id for r in report.results] == ["b1"]


def test_the_standard_outputs_write_every_file_a_ta_reads(course, tmp_path):
    hand_in(tmp_path / "in", {"a1": "ada", "b1": "dee"})
    assignment = assignment_of(course)
    folder = graded_folder(assignment)
    report = grade_batch(assignment, [tmp_path / "in"], standard_outputs(assignment, folder), out_dir=folder,
                         scheduler=CountingScheduler(), seed=1)
    assert report.problems == [] and all(r.status == GRADED for r in report.results)
    for path in (folder.feedback_page("a1"), folder.feedback_page("b1"), folder.report, folder.grades_csv,
                 course / "gradebook.db"):
        assert path.is_file(), path


@pytest.mark.slow
def test_validate_writes_result_files_and_nothing_else(tmp_path):
    """`autograder validate` reads the results it grades, and nothing else: no pages, report or gradebook."""
    from autograder.authoring.validate import grade_corpus

    course = new_course(tmp_path)
    out = tmp_path / "validated"
    validation = grade_corpus(assignment_of(course), tmp_path / "corpus", seed=0, jobs=2, out_dir=out,
                              only=["ex2-fill-zero"])
    assert set(validation.results) == {"reference-solutions", "untouched-release", "ex2-fill-zero"}
    folder = GradedFolder(out)
    assert {r.student_id for r in folder.results()} == set(validation.results)
    assert not folder.feedback.exists() and not folder.report.exists() and not folder.grades_csv.exists()
    assert not (course / "gradebook.db").exists() and not (course / "autograded").exists()


def test_the_service_records_through_the_very_outputs_and_recorder_the_batch_uses(course):
    """Issue 45: one way to record a result. The service's list of outputs is `standard_outputs`
    (a new output added there reaches the service too), behind the same Recorder, and one that
    fails costs that output only: the service records the result and tells the TA."""
    from autograder.runs.recording import Recorder
    from autograder.service.counting import AssignmentRecord
    from helpers import make_result

    assignment = assignment_of(course)
    record = AssignmentRecord(assignment, None, course / "service" / "counted")
    standard = standard_outputs(assignment, record.folder)
    assert isinstance(record.recorder, Recorder)
    assert [type(o) for o in record.recorder.outputs] == [type(o) for o in standard]
    collected = Collected()
    record.recorder.outputs[1:1] = [Broken("a1"), collected]  # a page writer that fails for one student
    result = make_result("a1", {"ex1": 2.0}, fraction=1.0)
    record.record(result, None)
    assert collected.added == ["a1"] and record.folder.result("a1") is not None
    assert [(student, what.split(" (")[0]) for _, student, what in record.problems] == [
        ("a1", "the broken output could not be written")]
    record.recorder.outputs.remove(collected)
    record.recorder.outputs.remove(next(o for o in record.recorder.outputs if isinstance(o, Broken)))
    record.flush()  # the queue is quiet: every output finishes, the gradebook's run too
    assert record.folder.grades_csv.is_file() and record.folder.report.is_file() and not record.dirty


def test_finishing_ends_a_run_so_a_term_of_score_changes_is_not_held(course, tmp_path):
    """The service finishes its outputs whenever its queue is quiet: the result files' list of
    moved scores is written to changes.csv then and starts empty, never growing for a term."""
    from helpers import make_result

    folder = graded_folder(assignment_of(course), tmp_path / "out").make()
    files = ResultFiles(folder)
    for fraction in (0.5, 1.0):
        files.add(make_result("a1", {"ex1": 2.0}, fraction=fraction))
    assert len(files.changes) == 1
    files.finish(folder.results())
    assert files.changes == [] and "a1" in folder.changes_csv.read_text()
    files.add(make_result("a1", {"ex1": 2.0}, fraction=0.0))
    assert len(files.changes) == 1 and len(list((folder.root / "history").iterdir())) == 2  # one folder per run


def test_a_slow_finish_never_holds_back_the_next_result(course, tmp_path):
    """The service adds results from one thread and finishes its outputs from another when the
    queue is quiet: while a class report takes seconds to write, the next student's result is
    recorded at once (a rush measured 1.28x the batch, and a lone result waited 840 ms, while
    one lock covered both)."""
    import threading
    import time

    from autograder.runs.recording import Recorder
    from helpers import make_result

    class SlowReport(Output):
        what = "the class report"

        def finish(self, results):
            time.sleep(2)
            return []

    folder = graded_folder(assignment_of(course), tmp_path / "out").make()
    collected = Collected()
    recorder = Recorder([ResultFiles(folder), SlowReport(), collected])
    finishing = threading.Thread(target=recorder.finish, args=([],))
    finishing.start()
    time.sleep(0.2)  # the report is being written
    started = time.monotonic()
    assert recorder.add(make_result("a1", {"ex1": 2.0}, fraction=1.0)) == (True, [])
    assert time.monotonic() - started < 1.0 and collected.added == ["a1"]
    finishing.join()


def test_while_submissions_wait_the_service_finishes_its_outputs_at_most_once_a_minute(course):
    """A quiet moment in a rush (two workers on looping answers) no longer writes the class's
    report each time: while the queue is busy, at most every BUSY_FINISH seconds; once it is
    idle, at the first quiet moment."""
    import time

    from autograder.service import counting
    from autograder.service.counting import AssignmentRecord
    from helpers import make_result

    record = AssignmentRecord(assignment_of(course), None, course / "service" / "counted")
    record.record(make_result("a1", {"ex1": 2.0}, fraction=1.0), None)
    record.changed -= 10  # ten quiet seconds ago
    record.finished = time.monotonic()  # the last finish was just now
    record.flush(quiet=2.0, busy=True)
    assert record.dirty and not record.folder.grades_csv.exists()  # the rush goes on: not yet
    record.finished -= counting.BUSY_FINISH + 1
    record.flush(quiet=2.0, busy=True)
    assert not record.dirty and record.folder.grades_csv.exists()  # a minute on: grades.csv is fresh
    record.record(make_result("b1", {"ex1": 2.0}, fraction=0.5), None)
    record.changed -= 10
    record.flush(quiet=2.0, busy=False)  # the queue is idle: at once
    assert not record.dirty and "b1" in record.folder.grades_csv.read_text()
