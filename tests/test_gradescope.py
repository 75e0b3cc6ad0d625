"""The Gradescope bundle grades a submission in a simulated /autograder layout."""
import json
import os
import subprocess
import sys
import zipfile

import nbformat
import pytest

from autograder import cli
from autograder.outputs.gradescope import schema_errors

from helpers import example

ASSIGNMENT = "causal_attention"


@pytest.fixture(scope="module")
def bundle(tmp_path_factory):
    target = tmp_path_factory.mktemp("dist") / "bundle.zip"
    assert cli.main(["gradescope", ASSIGNMENT, "--out", str(target)]) == 0
    return target


def unpacked(bundle, root):
    """/autograder as Gradescope lays it out: source/ holds the zip, submission/ the upload."""
    (root / "submission").mkdir(parents=True)
    with zipfile.ZipFile(bundle) as archive:
        archive.extractall(root / "source")
    return root


def run_autograder(root):
    environment = {**os.environ, "AUTOGRADER_ROOT": str(root), "AUTOGRADER_PYTHON": sys.executable,
                   "PYTHONPATH": str(root / "source")}  # the bundle's own copy of the package
    done = subprocess.run(["bash", str(root / "source" / "run_autograder")], env=environment,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    return json.loads((root / "results" / "results.json").read_text())


def test_bundle_has_gradescopes_entry_points(bundle):
    with zipfile.ZipFile(bundle) as archive:
        names = archive.namelist()
        modes = {info.filename: info.external_attr >> 16 for info in archive.infolist()}
        setup = archive.read("setup.sh").decode()
    assert {"setup.sh", "run_autograder"} <= set(names)
    assert modes["run_autograder"] & 0o111 and modes["setup.sh"] & 0o111
    assert "exercises/causal_attention/checks/test_ex3.py" in names and "autograder/cli/__init__.py" in names and "autograder/cli/__main__.py" in names
    assert "solutions/causal_attention.py" in names and f"source/{ASSIGNMENT}/{ASSIGNMENT}.ipynb" in names
    assert not any(name.startswith("tests/") or name.endswith(("corpus.toml", "examples.toml"))
                   for name in names)  # the corpus stays home
    assert not any(name.startswith("exercises/self_attention") for name in names)  # one assignment only
    assert 'torch==2.13.0' in setup
    subprocess.run(["bash", "-n", "-c", setup], check=True)  # valid shell


@pytest.mark.slow
def test_bundle_grades_a_submission(bundle, tmp_path):
    root = unpacked(bundle, tmp_path / "autograder")
    nbformat.write(example("ben"), root / "submission" / "my homework.ipynb")
    results = run_autograder(root)
    assert schema_errors(results) == []
    scores = {test["extra_data"]["grade_id"]: test["score"] for test in results["tests"]}
    assert scores["ex1"] == 2 and 0 < scores["ex3"] < 5 and 0 < scores["ex6"] < 5
    assert results["score"] == pytest.approx(sum(scores.values()), abs=0.02)
    ex3 = next(test for test in results["tests"] if test["extra_data"]["grade_id"] == "ex3")
    assert ex3["name"] == "Exercise 3: A causal attention module"  # what students see on Gradescope
    assert ex3["status"] == "failed" and "Softmax runs over dim=1" in ex3["output"]
    assert results["output"].splitlines()[0] == f"{results['score']:g} / 26 points"


def test_links_and_debris_are_never_graded(tmp_path):
    from autograder.runs.gradescope import choose_notebook

    submission = tmp_path / "submission"
    (submission / "__MACOSX").mkdir(parents=True)
    (submission / "__MACOSX" / "causal_attention.ipynb").write_text("{}")
    (submission / ".ipynb_checkpoints").mkdir()
    (submission / ".ipynb_checkpoints" / "causal_attention.ipynb").write_text("{}")
    secret = tmp_path / "solutions.ipynb"
    secret.write_text("{}")
    (submission / "causal_attention.ipynb").symlink_to(secret)  # would grade the instructor's file
    (submission / "mine.ipynb").write_text("{}")
    chosen, others = choose_notebook(submission, ASSIGNMENT)
    assert chosen == (submission / "mine.ipynb").resolve() and others == []


def test_bundle_explains_a_submission_without_a_notebook(bundle, tmp_path):
    root = unpacked(bundle, tmp_path / "autograder")
    (root / "submission" / "answers.py").write_text("print('hi')\n")
    results = run_autograder(root)
    assert schema_errors(results) == []
    assert results["score"] == 0 and "No notebook was found" in results["output"] and "answers.py" in results["output"]


def test_schema_rejects_what_gradescope_would():
    good = {"score": 1.0, "tests": [{"name": "ex1", "score": 1.0, "max_score": 2.0, "status": "failed"}]}
    assert schema_errors(good) == []
    assert schema_errors({**good, "max_score": 2.0})  # not a top-level field in Gradescope's format
    assert schema_errors({"tests": [{"name": "ex1"}]})  # no score anywhere
    assert schema_errors({**good, "visibility": "sometimes"})
    assert schema_errors({"score": "full"})
