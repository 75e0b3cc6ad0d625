"""Manual grading: the real formgrader, driven in headless Chromium, then `nbgrader export`."""
import csv
import shutil
import socket
import subprocess
import sys
import time
import urllib.request

import pytest
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys
from selenium.webdriver.support import expected_conditions
from selenium.webdriver.support.ui import WebDriverWait

from autograder.outputs.gradebook_db import gradebook_url

from browser import full_page_screenshot, start_browser

ASSIGNMENT = "causal_attention"
TOKEN = ""  # no login: the server listens on 127.0.0.1 for the length of one test


def free_port():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.fixture
def formgrader(graded_examples, tmp_path):
    """A Jupyter server with nbgrader's formgrader on a copy of the graded course."""
    course = tmp_path / "course"
    shutil.copytree(graded_examples[0], course)
    port = free_port()
    config = tmp_path / "jupyter_server_config.py"
    config.write_text(
        'c.ServerApp.jpserver_extensions = {"nbgrader.server_extensions.formgrader": True}\n'
        f'c.IdentityProvider.token = "{TOKEN}"\nc.ServerApp.password = ""\n'
        f"c.ServerApp.port = {port}\nc.ServerApp.ip = '127.0.0.1'\n"
        "c.ServerApp.open_browser = False\nc.ServerApp.allow_root = True\n")
    log = open(tmp_path / "server.log", "w")
    server = subprocess.Popen([sys.executable, "-m", "jupyter", "server", f"--config={config}"],
                              cwd=course, stdout=log, stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                urllib.request.urlopen(f"{base}/api/status", timeout=2)
                break
            except OSError:
                if time.monotonic() > deadline or server.poll() is not None:
                    pytest.fail("formgrader did not start:\n" + (tmp_path / "server.log").read_text()[-3000:])
                time.sleep(0.3)
        yield course, base
    finally:
        server.terminate()
        server.wait(timeout=20)
        log.close()


def manual_score(course, student, question):
    from nbgrader.api import Gradebook

    with Gradebook(gradebook_url(course)) as gradebook:
        notebook = gradebook.find_submission_notebook(ASSIGNMENT, ASSIGNMENT, student)
        return next(g.manual_score for g in notebook.grades if g.name == question), notebook.id


def exported_scores(course):
    subprocess.run([sys.executable, "-m", "nbgrader", "export"], cwd=course, check=True, capture_output=True)
    with open(course / "grades.csv") as handle:
        return {row["student_id"]: float(row["score"]) for row in csv.DictReader(handle)
                if row["assignment"] == ASSIGNMENT}


@pytest.mark.slow
def test_a_manual_score_entered_in_formgrader_reaches_nbgrader_export(formgrader, tmp_path):
    course, base = formgrader
    before = exported_scores(course)
    assert before["ada"] == 26  # everything autograded is right; the concept questions wait for a TA
    score, submission_id = manual_score(course, "ada", "q1")
    assert score is None
    browser = start_browser()
    try:
        browser.get(f"{base}/formgrader/submissions/{submission_id}/")
        field = WebDriverWait(browser, 30).until(expected_conditions.element_to_be_clickable((By.ID, "q1")))
        assert "Q1" in browser.page_source and "Masking hides future tokens" in browser.page_source
        field.clear()
        field.send_keys("1")
        field.send_keys(Keys.TAB)  # leaving the field saves it, as a TA would
        deadline = time.monotonic() + 20
        while manual_score(course, "ada", "q1")[0] != 1 and time.monotonic() < deadline:
            time.sleep(0.2)
        full_page_screenshot(browser, tmp_path / "formgrader-ada.png", 1200)
    finally:
        browser.quit()
    assert manual_score(course, "ada", "q1")[0] == 1
    after = exported_scores(course)
    assert after["ada"] == 27 and after["ben"] == before["ben"]


def enter_in_formgrader(browser, base, course, student, points):
    """Type each written answer's points into the student's formgrader page, as a TA does."""
    _, submission_id = manual_score(course, student, "q1")
    browser.get(f"{base}/formgrader/submissions/{submission_id}/")
    for question, value in points.items():
        field = WebDriverWait(browser, 30).until(expected_conditions.element_to_be_clickable((By.ID, question)))
        field.clear()
        field.send_keys(f"{value:g}")
        field.send_keys(Keys.TAB)  # leaving the field saves it
    deadline = time.monotonic() + 30
    while any(manual_score(course, student, q)[0] != v for q, v in points.items()) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert all(manual_score(course, student, q)[0] == v for q, v in points.items()), student


@pytest.mark.slow
def test_the_final_grade_file_holds_autograded_plus_formgraders_points_minus_late(formgrader, tmp_path):
    """Issue 35: after a TA scores the concept questions in formgrader (headless Chromium), `autograder
    export csv` holds autograded + written - late for every student, out of the notebook's 30."""
    from helpers import cli

    course, base = formgrader
    written = {"ada": {"q1": 1, "q2": 1, "q3": 1, "q4": 1}, "ben": {"q1": 0.5, "q2": 1, "q3": 0, "q4": 1},
               "cy": {"q1": 1, "q2": 0, "q3": 0.5, "q4": 0.5}, "dee": {"q1": 0, "q2": 0, "q3": 0, "q4": 0},
               "fay": {"q1": 1, "q2": 1, "q3": 1, "q4": 0.25}}
    browser = start_browser()
    try:
        for student, points in written.items():
            enter_in_formgrader(browser, base, course, student, points)
    finally:
        browser.quit()
    # ben handed in two days late under a policy set afterwards: the rerun changes only his penalty
    settings = course / "exercises" / ASSIGNMENT / "assignment.toml"
    settings.write_text(settings.read_text() + "\n[late]\ndue = 2026-11-20T23:59:00Z\npercent_per_day = 10\n")
    (course / "submitted" / "ben" / ASSIGNMENT / "timestamp.txt").write_text("2026-11-22 12:00:00 UTC")
    rerun = cli("grade", ASSIGNMENT, course / "submitted", "--course", course)
    assert "graded 0," in " ".join(rerun.stdout.split()), rerun.stdout + rerun.stderr
    done = cli("export", "csv", ASSIGNMENT, "--course", course)
    assert done.returncode == 0, done.stdout + done.stderr
    with open(course / "graded" / ASSIGNMENT / "grades.csv", newline="") as handle:
        autograded = {row["student_id"]: row for row in csv.DictReader(handle)}
    with open(course / "graded" / ASSIGNMENT / f"final-{ASSIGNMENT}.csv", newline="") as handle:
        final = {row["student_id"]: row for row in csv.DictReader(handle)}
    assert set(final) == set(written)
    # the default base is every graded cell's points (30, written answers too): two days at 10%
    # is 6 points, recorded whole and taken from the final grade, written points included
    assert float(autograded["ben"]["late_penalty"]) == pytest.approx(30 * 0.2)
    assert final["ben"]["late_penalty_of"] == "30"
    for student, points in written.items():
        row = final[student]
        expected = float(autograded[student]["raw_total"]) + sum(points.values()) - float(
            autograded[student]["late_penalty"])
        assert row["status"] == "graded" and float(row["out_of"]) == 30, row
        assert float(row["total"]) == pytest.approx(max(0.0, expected)), (student, row)
    assert float(final["ben"]["late_penalty"]) > 0
    exported = exported_scores(course)  # nbgrader's own export agrees, penalty and all
    assert {s: pytest.approx(float(final[s]["total"])) for s in written} == {s: exported[s] for s in written}


@pytest.mark.slow
def test_a_notebook_that_lost_its_metadata_shows_its_written_answers_in_formgrader(formgrader, tmp_path):
    """Issue 35: a student copied everything into a new notebook (no nbgrader metadata). Their
    answers are found by place: full marks, no tracebacks, one note, and formgrader shows their
    own written answers, not the release's YOUR ANSWER HERE."""
    import json

    import nbformat

    from helpers import cli, example
    from test_matching import WRITTEN, copied, with_written_answers

    course, base = formgrader
    notebook = copied(with_written_answers(example("ada")))
    folder = course / "submitted" / "zed" / ASSIGNMENT
    folder.mkdir(parents=True)
    nbformat.write(notebook, folder / f"{ASSIGNMENT}.ipynb")
    done = cli("grade", ASSIGNMENT, course / "submitted", "--course", course)
    assert "graded 1," in " ".join(done.stdout.split()), done.stdout + done.stderr
    result = json.loads((course / "graded" / ASSIGNMENT / "zed.json").read_text())
    assert result["score"] == 26 and result["extra_data"]["cell_errors"] == []
    assert len(result["extra_data"]["notes"]) == 1 and "lost the grader's markers" in result["extra_data"]["notes"][0]
    _, submission_id = manual_score(course, "zed", "q1")
    browser = start_browser()
    try:
        browser.get(f"{base}/formgrader/submissions/{submission_id}/")
        WebDriverWait(browser, 30).until(expected_conditions.element_to_be_clickable((By.ID, "q1")))
        page = browser.page_source
        full_page_screenshot(browser, tmp_path / "formgrader-zed.png", 1200)
    finally:
        browser.quit()
    assert all(text in page for text in WRITTEN.values()) and "YOUR ANSWER HERE" not in page
