"""Grading accuracy: the corpus of realistic mistakes and valid styles, through the real grader.

Every entry of tests/corpus/causal_attention.toml is graded in sandboxes by
`grade_batch` (what `autograder grade` and `autograder validate` run), with five
seeds and one seed twice.
"""
import json
import shutil

import pytest

from autograder import ROOT, cli, runner
from autograder import validate as validate_module
from autograder.batch import read_source
from autograder.corpus import SOLUTIONS, STUBS, judge, load
from autograder.outputs import without_timings
from autograder.submissions import grade_cells
from autograder.validate import grade_corpus, validate

ASSIGNMENT = "causal_attention"
CELLS = list(grade_cells(read_source(ROOT, ASSIGNMENT)))
ENTRIES = load(ASSIGNMENT, CELLS)
SEEDS = (0, 1, 2, 3, 4)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """{label: (Validation, results folder)}: seeds 0-4, then seed 0 again on the same files."""
    base = tmp_path_factory.mktemp("corpus-runs")
    folder = base / "submissions"
    found = {}
    for label, seed in [(str(s), s) for s in SEEDS] + [("0-again", 0)]:
        out_dir = base / f"graded-{label}"
        found[label] = (grade_corpus(ASSIGNMENT, folder, seed, jobs=2, out_dir=out_dir), out_dir)
    return found


def test_corpus_is_large_enough_and_covers_every_exercise():
    mistakes = [e for e in ENTRIES if e.outcome == "mistake"]
    alternatives = [e for e in ENTRIES if e.outcome == "alternative"]
    assert len(mistakes) >= 40 and len(alternatives) >= 15
    for cell in CELLS:
        assert sum(e.exercise == cell for e in mistakes) >= 3, cell
        assert any(e.exercise == cell for e in alternatives), cell


@pytest.mark.parametrize("entry", ENTRIES, ids=[e.name for e in ENTRIES])
def test_entry_is_graded_as_expected_with_every_seed(runs, entry):
    """Mistakes lose points on their exercise with feedback that names them; alternatives get full marks."""
    for label, (report, _) in runs.items():
        assert judge(entry, report.results[entry.name]) == [], f"seed {label}"


def test_every_check_passes_on_the_solutions_and_fails_on_the_release(runs):
    report, _ = runs["0"]
    solved, stubs = report.results[SOLUTIONS], report.results[STUBS]
    assert solved["score"] == solved["max_score"] > 0
    assert stubs["score"] == 0
    assert sum(cell.checks for cell in report.cells.values()) >= 55
    for cell in report.cells.values():
        assert cell.checks == cell.solutions_pass == cell.stubs_fail > 0, cell


def test_validation_is_clean_with_every_seed(runs):
    for label, (report, _) in runs.items():
        assert report.clean, (label, report.problems)
        for cell in report.cells.values():
            assert cell.caught == cell.mistakes and cell.accepted == cell.alternatives, (label, cell)


def test_same_seed_gives_identical_result_files(runs):
    (_, first), (_, second) = runs["0"], runs["0-again"]
    names = sorted(p.name for p in first.iterdir() if not p.name.startswith("."))
    assert names == sorted(p.name for p in second.iterdir() if not p.name.startswith("."))
    assert len(names) == len(ENTRIES) + 3  # the entries, solutions, release and grades.csv
    assert (first / "grades.csv").read_bytes() == (second / "grades.csv").read_bytes()

    for name in names:
        if name.endswith(".json"):
            a, b = (json.loads((folder / name).read_text()) for folder in (first, second))
            assert "execution_time" in a and "timings" in a["extra_data"]  # what is left out is real
            assert without_timings(a) == without_timings(b), name


def test_five_seeds_give_identical_scores(runs):
    def scores(report):
        return {name: {t["name"]: t["score"] for t in result["tests"]}
                for name, result in report.results.items()}

    by_seed = {seed: runs[str(seed)][0] for seed in SEEDS}
    assert {r.results[SOLUTIONS]["extra_data"]["seed"] for r in by_seed.values()} == set(SEEDS)
    reference = scores(by_seed[0])
    for seed, report in by_seed.items():
        assert scores(report) == reference, f"seed {seed}"


def test_validate_cli_prints_the_table(runs, monkeypatch, capsys):
    report, _ = runs["0"]
    monkeypatch.setattr(validate_module, "validate", lambda *args, **kwargs: report)
    assert cli.main(["validate", ASSIGNMENT]) == 0
    out = capsys.readouterr().out
    mistakes = sum(e.outcome == "mistake" for e in ENTRIES)
    alternatives = len(ENTRIES) - mistakes
    assert f"{mistakes}/{mistakes}" in out and f"{alternatives}/{alternatives}" in out
    assert "Clean" in out
    for cell in CELLS:
        assert cell in out


def test_a_weakened_check_is_reported(tmp_path, monkeypatch, capsys):
    """An instructor who loosens Exercise 2's checks learns at once what they no longer catch."""
    checks = tmp_path / "checks"
    shutil.copytree(runner.CHECKS, checks)
    (checks / ASSIGNMENT / "test_ex2.py").write_text(
        '"""Exercise 2, loosened: only the shape is checked."""\n'
        "import torch\n\n"
        "from autograder.verdict import expect_tensor\n\n\n"
        "def test_shape(student):\n"
        '    """Returns a tensor of the right shape"""\n'
        "    expect_tensor(student.call('mask_before_softmax', torch.ones(4, 4), 2), 'The result', shape=(4, 4))\n")
    monkeypatch.setattr(runner, "CHECKS", checks)
    report = validate(ASSIGNMENT, seed=0, jobs=1, only={"ex2-fill-zero", "ex2-not-scaled", "ex2-alt-additive-mask"})
    assert not report.clean
    assert report.cells["ex2"].mistakes == 2 and report.cells["ex2"].caught == 0
    assert report.cells["ex2"].accepted == 1
    assert report.cells["ex2"].idle_checks == ["test_shape"]
    assert all("not caught" in p for p in report.problems["ex2-fill-zero"])
    monkeypatch.setattr(validate_module, "validate", lambda *args, **kwargs: report)
    assert cli.main(["validate", ASSIGNMENT]) == 1
    out = capsys.readouterr().out
    assert "ex2-fill-zero" in out and "0/2" in out and "Not clean" in out
