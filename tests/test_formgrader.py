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

from autograder.outputs.gradebook import gradebook_url

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
