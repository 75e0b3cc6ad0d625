"""Feedback pages for students and the class report for TAs, rendered in headless Chromium."""
import ast
import json
import subprocess
import sys

import nbformat
import pytest
from selenium.webdriver.common.by import By


from browser import full_page_screenshot, start_browser

from helpers import COURSE, ROOT, cli, make_result

ASSIGNMENT = "causal_attention"
PHONE, DESKTOP = 390, 1100


@pytest.fixture(scope="module")
def browser():
    driver = start_browser()
    yield driver
    driver.quit()


@pytest.fixture(scope="module")
def screenshots(tmp_path_factory):
    folder = tmp_path_factory.mktemp("screenshots")
    print(f"\nscreenshots: {folder}")
    return folder


def page_text(browser, path, width):
    browser.set_window_size(width, 900)
    browser.get(path.as_uri())
    return browser.find_element(By.TAG_NAME, "body").text


def fits_width(browser):
    return browser.execute_script("return document.documentElement.scrollWidth <= window.innerWidth + 1")


@pytest.mark.parametrize("student", ["ada", "ben", "fay"])
def test_feedback_page_shows_scores_checks_and_diagnostics(graded_examples, browser, screenshots, student):
    course, results = graded_examples
    page = course / "graded" / ASSIGNMENT / "feedback" / f"{student}.html"
    text = page_text(browser, page, PHONE)
    assert fits_width(browser), "the page scrolls sideways on a phone"
    shot = full_page_screenshot(browser, screenshots / f"feedback-{student}-phone.png", PHONE)
    assert shot.stat().st_size > 20_000
    total = f"{results[student].score:g} / 26"
    assert f"Your score: {total} points" in text
    assert "Exercise 3: A causal attention module" in text and "Exercise 8b: A tiny language model" in text
    failed = browser.find_elements(By.CSS_SELECTOR, "li.fail")
    if student == "ada":
        assert not failed and len(browser.find_elements(By.CSS_SELECTOR, "li.pass")) >= 30
        assert "Your code raised an error" not in text
    if student == "ben":  # softmax over dim=1 in Ex3, sqrt(d_out) per head in Ex6
        following = browser.find_elements(By.CSS_SELECTOR, "li.consequence")
        # (the variables of Exercises 4 and 7 are made with the wrong classes: they say so, once each)
        assert failed and 2 <= len(failed) + len(following) <= 16
        # checks that fail only because of the named mistake are listed under it, as such
        assert following and all("fails because of" in item.text for item in following)
        notes = [note.text for note in browser.find_elements(By.CSS_SELECTOR, "li.note")]
        assert len(notes) == 3 and "Softmax runs over dim=1" in notes[0]  # Ex3, Ex6 and Ex8a's diagnoses
        assert "fix Exercise 6 first" in notes[2]
        assert "scaled by sqrt(d_out); each head needs sqrt(d_head)" in text
        assert "2 of 2 cases failed" in text  # one diagnostic per failing check, grouped
    if student == "fay":  # her Ex5 cell raises before defining the class
        assert "Your code raised an error (cell ex5_answer)" in text
        assert "RuntimeError: my notebook stops here" in text
        # the checks that miss her class point at the crash, not at a name to define
        assert "Your cell ex5_answer stopped with an error (RuntimeError: my notebook stops here)" in text
        assert "MultiHeadAttention is not defined" not in text


def check_code_lines():
    """Lines of hidden-check code (not docstrings or message texts) longer than 25 characters,
    except lines students see or write anyway (the same line in the exercises or solutions)."""
    students_write = "\n".join(p.read_text() for p in [*(ROOT / "solutions").glob("*.py"),
                                                         *(ROOT / "exercises").glob("*/notebook.md")])
    lines = set()
    for path in [*(ROOT / "exercises").glob("*/checks/*.py"), ROOT / "autograder" / "checks" / "checklib.py"]:
        tree = ast.parse(path.read_text())
        strings = {node.lineno for node in ast.walk(tree) if isinstance(node, ast.Constant) and isinstance(node.value, str)}
        for number, line in enumerate(path.read_text().splitlines(), start=1):
            stripped = line.strip()
            if len(stripped) > 25 and number not in strings and not stripped.startswith(("#", '"', "f\"")) \
                    and stripped not in students_write:
                lines.add(stripped)
    return lines


def student_visible_texts(course, results):
    """Everything a student can be shown: our feedback pages and results, and nbgrader's
    own feedback (made from the autograded notebooks)."""
    graded = course / "graded" / ASSIGNMENT
    for page in (graded / "feedback").glob("*.html"):
        yield page.name, page.read_text()
    for student, result in results.items():
        yield f"{student}.json", (graded / f"{student}.json").read_text()
    subprocess.run([sys.executable, "-m", "nbgrader", "generate_feedback", ASSIGNMENT, "--force"],
                   cwd=course, check=True, capture_output=True)
    pages = list((course / "feedback").rglob("*.html"))
    assert len(pages) == len(results)
    for page in pages:
        yield str(page), page.read_text()


def test_no_hidden_check_code_reaches_students(graded_examples):
    course, results = graded_examples
    code = check_code_lines()
    assert len(code) > 200  # the search below looks for real code
    seen = 0
    for name, text in student_visible_texts(course, results):
        seen += 1
        leaked = [line for line in code if line in text]
        assert not leaked, f"{name} shows hidden check code: {leaked[:2]}"
        # ... nor the concept questions' rubric, which the graded notebooks keep for the TA
        for marker in ("BEGIN HIDDEN TESTS", "grade_here", "def test_", "autograder/checks",
                       "MARK SCHEME", "Rubric for the TA"):
            assert marker not in text, f"{name} shows {marker!r}"
    assert seen >= 3 * len(results)
    # The autograded notebooks (for TAs, in formgrader) keep the hidden test cells, as in
    # nbgrader, but those only call the checks: no check code is in them either.
    for notebook in (course / "autograded").rglob("*.ipynb"):
        assert not [line for line in code if line in notebook.read_text()]
        if notebook.name == f"{ASSIGNMENT}.ipynb":  # formgrader shows the TA the concept questions' rubric
            assert "Rubric for the TA" in notebook.read_text()


def test_nbgrader_feedback_keeps_the_results(graded_examples):
    """nbgrader's own feedback still shows each graded cell's output, just not its code."""
    course, _ = graded_examples
    page = next((course / "feedback" / "ben").rglob("*.html"), None)
    if page is None:
        subprocess.run([sys.executable, "-m", "nbgrader", "generate_feedback", ASSIGNMENT, "--force"],
                       cwd=course, check=True, capture_output=True)
        page = next((course / "feedback" / "ben").rglob("*.html"))
    text = page.read_text()
    assert "Softmax runs over dim=1" in text and "[FAIL]" in text


def test_autograded_notebooks_are_valid(graded_examples):
    """Every graded student has an autograded notebook that nbformat accepts, each graded cell
    showing its feedback and points as its outputs (what formgrader shows a TA)."""
    course, results = graded_examples
    graded = sorted(student for student, result in results.items() if result.status == "graded")
    assert graded == ["ada", "ben", "cy", "dee", "fay"]
    written = sorted(path.parent.parent.name
                     for path in (course / "autograded").glob(f"*/{ASSIGNMENT}/{ASSIGNMENT}.ipynb"))
    assert written == graded
    for student in graded:
        nb = nbformat.read(course / "autograded" / student / ASSIGNMENT / f"{ASSIGNMENT}.ipynb", as_version=4)
        nbformat.validate(nb)
        graded_cells = {cell.metadata.nbgrader["grade_id"]: cell for cell in nb.cells
                        if cell.cell_type == "code" and cell.metadata.get("nbgrader", {}).get("grade")
                        and not cell.metadata.nbgrader.get("solution")}
        assert set(graded_cells) == set(results[student].scores), student
        for score in results[student].cells:
            printed, value = graded_cells[score.name].outputs
            assert printed.output_type == "stream" and printed.text == score.output + "\n", (student, score.name)
            assert printed.text.startswith(f"{score.name}: {score.score:g} / {score.max_score:g} points")
            assert value.output_type == "execute_result" and value.data["text/plain"] == f"{score.score:g}"


def test_an_autograded_notebook_from_an_older_format_is_valid(tmp_path):
    """A 4.4 notebook (no cell ids) comes back as a valid 4.5 one, with the outputs in place."""
    from autograder.outputs.autograded import write_autograded
    from autograder.grading.notebook import read_notebook
    from autograder.record import CellScore

    old = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("x = 1"), nbformat.v4.new_code_cell(
        "# checks", metadata={"nbgrader": {"grade": True, "solution": False, "grade_id": "ex1", "points": 2}})])
    text = json.loads(nbformat.writes(old))
    text["nbformat_minor"] = 4
    for cell in text["cells"]:
        del cell["id"]
    (tmp_path / "old.ipynb").write_text(json.dumps(text))
    notebook = read_notebook(tmp_path / "old.ipynb")
    result = make_result("s", [CellScore("ex1", 1.5, 2, output="ex1: 1.5 / 2 points")], assignment="a")
    write_autograded(tmp_path / "autograded", "a", "s", notebook, result)
    written = nbformat.read(tmp_path / "autograded" / "s" / "a" / "a.ipynb", as_version=4)
    nbformat.validate(written)
    assert written.nbformat_minor == 5 and len({cell.id for cell in written.cells}) == 2
    assert written.cells[1].outputs[0].text == "ex1: 1.5 / 2 points\n"
    assert written.cells[1].outputs[1].data["text/plain"] == "1.5"
    assert "id" not in notebook.cells[0]  # the caller's notebook is left as it was


def test_class_report_shows_plot_tables_and_problems(graded_examples, browser, screenshots):
    course, results = graded_examples
    report = course / "graded" / ASSIGNMENT / "report.html"
    text = page_text(browser, report, DESKTOP)
    full_page_screenshot(browser, screenshots / "report-desktop.png", DESKTOP)
    image = browser.find_element(By.CSS_SELECTOR, "#scores img")
    assert browser.execute_script("return arguments[0].complete && arguments[0].naturalWidth", image) > 400
    assert "Histogram of total scores: 5 students" in image.get_attribute("alt")
    rows = browser.find_elements(By.CSS_SELECTOR, "#exercises tbody tr")
    assert len(rows) == 9 and rows[0].text.startswith("Exercise 1: A causal mask")
    # Ex3 for ada and fay is full marks; ben lost points, dee has 0
    ex3 = rows[2].text
    assert "5" in ex3 and "3 (60%)" in ex3
    diagnostics = browser.find_element(By.ID, "diagnostics").text
    assert "Softmax runs over dim=1" in diagnostics and "ben" in diagnostics
    attention = browser.find_element(By.ID, "attention").text
    assert "fay" in attention and "RuntimeError: my notebook stops here" in attention
    assert "dee" in attention and "nothing answered" in attention  # the untouched release
    assert "5 submissions (5 graded, 0 not gradable), last batch graded in" in text
    page_text(browser, report, PHONE)
    assert fits_width(browser), "the report scrolls sideways on a phone (wide tables scroll inside their box)"
    full_page_screenshot(browser, screenshots / "report-phone.png", PHONE)


def test_feedback_command_rewrites_the_pages(graded_examples, tmp_path):
    import shutil

    course, results = graded_examples
    out = tmp_path / "copy"
    shutil.copytree(course / "graded" / ASSIGNMENT, out)
    shutil.rmtree(out / "feedback")
    (out / "report.html").unlink()
    done = cli("feedback", ASSIGNMENT, "--out", out, "--course", course)
    assert done.returncode == 0, done.stdout + done.stderr
    assert sorted(p.stem for p in (out / "feedback").glob("*.html")) == sorted(results)
    assert (out / "report.html").read_text().count("<tr>") > 10
    empty = cli("report", ASSIGNMENT, "--out", tmp_path / "nothing", "--course", ROOT)
    assert empty.returncode == 1 and "No results" in empty.stdout


def test_report_lists_timeouts_tampering_and_bad_files():
    from autograder.runs.recording import read_source
    from autograder.outputs.feedback import layout_of
    from autograder.outputs.report import render_report

    def checked(student, status, score, notes=(), errors=()):
        """One check on ex1, passed at full marks."""
        from autograder.record import CellError, CellScore, CheckOutcome

        check = CheckOutcome("test_a", "d", passed=score == 2, message="" if score == 2 else "Rows do not sum to 1.")
        return make_result(student, [CellScore("ex1", score, 2.0, checks=[check])], status, score=score,
                           output="This submission could not be graded: empty file.", notes=list(notes),
                           cell_errors=[CellError(**error) for error in errors])

    page = render_report(ASSIGNMENT, [
        checked("slow", "graded", 0, ["your code did not finish within the 120 s time limit and was stopped."]),
        checked("sly", "graded", 2, ["the read-only cell ex1 was edited (restored)"]),
        checked("blank", "invalid", 0),
        checked("crashy", "graded", 0, errors=[{"cell": "ex1_answer", "error": "Traceback\nValueError: boom\n"}]),
        checked("fine", "graded", 2, errors=[{"cell": "check-01", "error": "AssertionError: visible\n"}]),
    ], layout_of(read_source(COURSE.assignment(ASSIGNMENT))), wall_time=12.5)
    attention = page[page.index('id="attention"'):]
    for expected in ("slow", "did not finish within the 120 s", "sly", "was edited (restored)", "blank",
                     "could not be graded: empty file", "crashy", "cell ex1_answer raised ValueError: boom"):
        assert expected in attention, expected
    assert "fine" not in attention  # a failing visible check is ordinary feedback, not a problem
    assert "last batch graded in 12.5 s" in page and "Rows do not sum to 1." in page


def test_a_failed_head_start_on_the_plot_library_does_not_break_the_report():
    """The grader imports matplotlib in a background thread while workers grade. If that
    import fails half-way (two threads importing the same modules can make it fail), the
    class report's own import must still work. Run in a fresh interpreter: it imports
    matplotlib from scratch, with the first attempt made to fail after a few submodules."""
    code = """
import sys

class FailOnce:
    failed = False

    def find_spec(self, name, path=None, target=None):
        if name == "matplotlib.rcsetup" and not FailOnce.failed:
            FailOnce.failed = True
            raise ImportError("simulated: the import broke off half-way")

sys.meta_path.insert(0, FailOnce())
from autograder.outputs.report import histogram_png, warm_up_report

warm_up_report()
assert FailOnce.failed and "matplotlib.cbook" not in sys.modules
print("png", len(histogram_png([1.0, 2.0, 2.5], 3)))
"""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-2000:]
    assert int(done.stdout.split()[-1]) > 1000  # a real PNG, base64


LAPTOP = 1280


def test_every_report_table_fits_a_laptop_screen(browser, screenshots, tmp_path):
    """Long LMS file names, reasons and messages wrap inside their cells: at 1280 px no table is
    wider than its box (nothing is cut off at the right edge) and no cell ends past the window."""
    from autograder.record import CellScore, CheckOutcome
    from autograder.outputs.feedback import layout_of
    from autograder.outputs.report import render_report
    from autograder.runs.recording import read_source

    canvas = "doejane_LATE_1234567_89012345_causal_attention_final_version_really_final_v3_after_office_hours"
    failed = CheckOutcome("test_rows", "d", passed=False,
                          message="The attention weights of each row should add up to 1; row 3 sums to"
                                  " 0.25000000000000000000000000000000 (softmax over dim=0?)")
    results = [make_result(f"student_with_a_long_sis_login_{n}@students.example-university.edu",
                           [CellScore("ex1", 0, 2.0, checks=[failed])], "graded", score=0,
                           notes=[f"the read-only cell {canvas} was edited (restored)"]) for n in range(3)]
    intake = [{"file": f"submissions/{canvas}.ipynb.zip: {canvas}/{canvas}-{n}.ipynb",
               "student_id": f"doejane{n}", "outcome": f"not graded: another notebook in {canvas}.zip was graded"}
              for n in range(3)]
    page = render_report(ASSIGNMENT, results, layout_of(read_source(COURSE.assignment(ASSIGNMENT))),
                         intake_rows=intake)
    path = tmp_path / "report.html"
    path.write_text(page)
    browser.set_window_size(LAPTOP, 900)
    browser.get(path.as_uri())
    width = browser.execute_script("return document.documentElement.clientWidth")
    boxes = browser.execute_script("""return [...document.querySelectorAll('.table-wrap')].map(box => [
        box.closest('section').id, box.scrollWidth - box.clientWidth,
        Math.max(...[...box.querySelectorAll('th, td')].map(cell => cell.getBoundingClientRect().right))])""")
    assert {section for section, _, _ in boxes} >= {"diagnostics", "attention", "not-graded"}
    for section, hidden, right in boxes:
        assert hidden <= 1, f"{section}: {hidden} px of the table are cut off at the right of its box"
        assert right <= width, f"{section}: a cell ends at {right} px, past the {width} px window"
    assert fits_width(browser)
    full_page_screenshot(browser, screenshots / "report-laptop.png", LAPTOP)
