"""A batch writes exactly the outputs it is handed, and one output's failure costs only that output."""
import pytest

from autograder.outputs.base import Output
from autograder.outputs.folder import GradedFolder
from autograder.outputs.results import ResultFiles
from autograder.record import GRADED
from autograder.runs.batch import grade_batch, graded_folder, standard_outputs
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
