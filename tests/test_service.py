"""Grading on submit: `autograder serve`, tested as students and TAs use it, over HTTP on 127.0.0.1.

One service runs for the module, on a copy of the course whose causal_attention is due in
2099, shows ex3's structure check only after the due date and never shows ex8_model's
checks, takes 4 attempts per day and uploads of at most 1 MB.
"""
import concurrent.futures
import json
import re
import sqlite3
import subprocess
import sys
import time
import urllib.parse

import pytest

from helpers import SCORES, cli, example, make_gradebook, make_notebook, new_course
from service_helpers import (issue_tokens, multipart, notebook_bytes, request, serve, submit,
                             wait_graded)

ASSIGNMENT = "causal_attention"
STUDENTS = ["ada", "ben", "cy", "dee", "eve", "fay", "gus", "hal", "ivy", "jo", "kim", "lu", "mo", "ned",
            *(f"c{i}" for i in range(12))]
SETTINGS = """
[late]
due = 2099-01-01T00:00:00Z
percent_per_day = 10

[service]
attempts = 4
max_upload_mb = 1
requests_per_minute = 300

[visibility]
"ex3::test_structure" = "after_due_date"
"ex8_model" = "hidden"
"""
pytestmark = pytest.mark.usefixtures("sandbox_required")


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    course = make_gradebook(new_course(tmp_path_factory.mktemp("service")))
    settings = course / "exercises" / ASSIGNMENT / "assignment.toml"
    settings.write_text(settings.read_text() + SETTINGS)
    tokens = issue_tokens(course, ASSIGNMENT, STUDENTS)
    service = serve(course, ASSIGNMENT)
    service.tokens = tokens
    yield service
    service.stop()


@pytest.fixture(scope="module")
def notebooks():
    return {name: notebook_bytes(example(name)) for name in ("ada", "ben", "cy", "dee")}


def graded_result(course, student):
    return json.loads((course / "graded" / ASSIGNMENT / f"{student}.json").read_text())


def hidden_texts(result):
    """Descriptions and messages of the checks no student may see before the due date."""
    shown, hidden = set(), set()
    for test in result["tests"]:
        cell = test.get("extra_data", {}).get("grade_id", test["name"])
        for check in test["extra_data"]["checks"]:
            base = check["name"].split("[")[0]
            secret = cell == "ex8_model" or (cell == "ex3" and base == "test_structure")
            (hidden if secret else shown).update(t for t in (check["description"], check["message"]) if t)
    return hidden - shown


def login(served, student):
    """The cookie a personal link sets."""
    status, _, headers = request(f"{served.base}/login/{served.tokens[student]}")
    assert status in (200, 303)
    return headers["set-cookie"].split(";")[0]


# -- handing in and reading feedback ------------------------------------------------------------
def test_a_notebook_is_graded_as_the_batch_grades_it_and_what_counts_is_recorded(served, notebooks):
    status, answer = submit(served, "ada", notebooks["ada"])
    assert status == 202, answer
    assert answer["status"] in ("queued", "running", "graded") and answer["attempts_left"] == 3
    assert set(answer) >= {"id", "status_url", "feedback_url", "queue_position", "score"}
    done = wait_graded(served, "ada", answer["id"])
    assert done["status"] == "graded" and done["counted"] is True
    assert done["feedback"]["complete"] is False and done["feedback"]["hidden_checks"] > 0
    graded = graded_result(served.course, "ada")
    assert graded["score"] == 26  # the whole result, in graded/ as `autograder grade` writes it
    assert "/service/counted/causal_attention/ada/causal_attention/" in graded["extra_data"]["path"]
    assert done["score"] == done["max_score"] < 26  # only the shown checks' points, all earned


def test_hidden_checks_leave_no_trace_before_the_due_date(served, notebooks):
    status, answer = submit(served, "ben", notebooks["ben"])
    done = wait_graded(served, "ben", answer["id"])
    secrets_ = hidden_texts(graded_result(served.course, "ben"))
    assert any("language model" in text or "token ids" in text for text in secrets_)  # ex8_model's are there
    cookie = login(served, "ben")
    _, page, _ = request(done["feedback_url"], cookie=cookie)
    _, listing, _ = request(f"{served.base}/api/assignments/{ASSIGNMENT}/submissions", served.tokens["ben"])
    for text in (json.dumps(done), json.dumps(listing), page):
        leaked = [secret for secret in secrets_ if secret in text or json.dumps(secret)[1:-1] in text]
        assert not leaked, leaked
    assert done["hidden_until"].startswith("2099-01-01") and done["score"] < graded_result(served.course, "ben")["score"]
    assert "not shown until the due date, 2099-01-01 00:00 UTC" in " ".join(page.split())
    assert "checks are for your TA only" in " ".join(page.split())


def test_code_that_logs_every_probe_reads_through_the_service_what_grading_recorded_for_before_the_due_date(
        served):
    """The probe logger (tests/attacks.py) reports what it has seen through a shown check (the data
    set) and a check for the TA alone (the language model). A student reads the view grading
    recorded for before the due date, as it is: none of the hidden checks' words, and no what-if
    value, in the API, the listing or the page."""
    from autograder.course import Course
    from autograder.record import Result
    from autograder.service.views import Visibility, student_view
    from test_visibility import hostile_notebook

    status, answer = submit(served, "kim", notebook_bytes(hostile_notebook()))
    assert status == 202, answer
    done = wait_graded(served, "kim", answer["id"])
    result = Result.from_json(json.loads((served.course / "service" / "results" / ASSIGNMENT / f"{answer['id']}.json")
                                         .read_text()))
    assert [view.level for view in result.views] == [0, 1] and result.levels == [0, 1, 2]
    expected = student_view(result, Visibility.of(Course(served.course).assignment(ASSIGNMENT)), due_passed=False)
    shown = json.loads(json.dumps(expected.to_json()))
    for exercise in shown["exercises"]:
        exercise["title"] = next(e["title"] for e in done["feedback"]["exercises"] if e["cell"] == exercise["cell"])
    assert done["feedback"] == shown
    secrets_ = hidden_texts(result.to_json())
    _, page, _ = request(done["feedback_url"], cookie=login(served, "kim"))
    _, listing, _ = request(f"{served.base}/api/assignments/{ASSIGNMENT}/submissions", served.tokens["kim"])
    for text in (json.dumps(done), json.dumps(listing), page):
        leaked = [secret for secret in secrets_ if secret in text or json.dumps(secret)[1:-1] in text]
        assert not leaked, leaked
        assert "trial values [-" not in text and not any(f"trial values [{d}" in text for d in "0123456789")
    assert "seen " in json.dumps(done) and "trial values []" in json.dumps(done)  # the logger spoke, of nothing hidden


def test_an_identical_resubmission_is_answered_at_once_and_counts(served, notebooks):
    first = wait_graded(served, "cy", submit(served, "cy", notebooks["cy"])[1]["id"])
    started = time.perf_counter()
    status, again = submit(served, "cy", notebooks["cy"])
    done = wait_graded(served, "cy", again["id"])
    assert status == 202 and time.perf_counter() - started < 1.0  # never queued behind anyone
    assert done["score"] == first["score"] and done["counted"] is True
    rows = sqlite3.connect(served.course / "service" / "service.db").execute(
        "SELECT counted FROM submissions WHERE student_id = 'cy' ORDER BY seq").fetchall()
    assert rows == [(0,), (1,)]  # the last one counts


def test_another_students_identical_answers_arrive_as_late_as_a_fresh_grading(served, notebooks):
    """fay hands in exactly cy's answers: nothing runs again, but her feedback takes as long as
    grading them took (a quick answer would tell her someone handed in the same), and nothing in
    it names cy."""
    from autograder.record import read_result
    from autograder.outputs.folder import GradedFolder

    first = wait_graded(served, "cy", submit(served, "cy", notebooks["cy"])[1]["id"])
    kept = [read_result(None, None, path) for path in GradedFolder(served.course / "graded" / ASSIGNMENT).answers
            .glob("*.json")]
    took = max(result.execution_time for result in kept if result.student_id == "cy")
    assert took > 0.3  # a real grading's time (about 1 s on 2 idle cores), never a copy's 0
    started = time.perf_counter()
    status, answer = submit(served, "fay", notebooks["cy"])
    done = wait_graded(served, "fay", answer["id"])
    assert status == 202 and time.perf_counter() - started >= took  # at a fresh grading's pace, or later
    assert done["score"] == first["score"] and done["status"] == "graded"
    _, page, _ = request(done["feedback_url"], cookie=login(served, "fay"))
    for text in (json.dumps(done), page):
        assert not re.search(r"\bcy\b", text), "fay's answer names the student whose result it is"


def test_an_upload_is_stored_without_its_outputs_and_graded_alike(served, notebooks):
    """Outputs never count for grading; a notebook carrying 600 kB of them is stored without them
    (it would stay on disk for the term) and gets the same score as without them."""
    nb = json.loads(notebooks["ada"])
    for cell in nb["cells"]:
        if cell["cell_type"] == "code":
            cell["outputs"] = [{"output_type": "stream", "name": "stdout", "text": "x" * 20_000}]
    heavy = json.dumps(nb).encode()
    assert len(heavy) > 600_000
    status, answer = submit(served, "ivy", heavy)
    assert status == 202, answer
    done = wait_graded(served, "ivy", answer["id"])
    stored = served.course / "service" / "uploads" / ASSIGNMENT / f"{answer['id']}.ipynb"
    kept = json.loads(stored.read_text())
    assert all(not cell.get("outputs") for cell in kept["cells"]) and stored.stat().st_size < len(notebooks["ada"]) * 1.2
    assert [c["source"] for c in kept["cells"]] == [c["source"] for c in nb["cells"]]  # the answers, as handed in
    assert done["status"] == "graded" and graded_result(served.course, "ivy")["score"] == 26


def test_text_that_is_not_unicode_reaches_the_student_as_text(served):
    """An error whose text holds a lone surrogate (test_grade.py's lone_surrogate attack): its answer
    and page are there, never a server error."""
    from test_grade import ATTACKS, ben_plus

    status, answer = submit(served, "jo", notebook_bytes(ben_plus(after=ATTACKS["lone_surrogate"])))
    done = wait_graded(served, "jo", answer["id"])
    assert done["status"] == "graded"
    status, page, _ = request(done["feedback_url"], cookie=login(served, "jo"))
    assert status == 200 and "odd" in page


@pytest.mark.parametrize("what, data, field, status, words", [
    ("not a notebook", b"hello, this is my homework", "notebook", 422, "not valid JSON"),
    ("corrupt JSON", b'{"cells": [', "notebook", 422, "not valid JSON"),
    ("JSON, not a notebook", b'{"answer": 42}', "notebook", 422, "not a Jupyter notebook"),
    ("no notebook field", b"{}", "homework", 422, "form field `notebook`"),
], ids=lambda value: value if isinstance(value, str) and len(value) < 40 else None)
def test_bad_uploads_are_refused_clearly_and_cost_no_attempt(served, what, data, field, status, words):
    body, kind = multipart({field: ("causal_attention.ipynb", data)})
    got, answer, _ = request(f"{served.base}/api/assignments/{ASSIGNMENT}/submissions", served.tokens["eve"], body,
                             kind)
    assert got == status and words in answer["error"], (what, answer)
    _, listing, _ = request(f"{served.base}/api/assignments/{ASSIGNMENT}/submissions", served.tokens["eve"])
    assert listing == []


def raw_upload(served, length_header):
    """An upload of eve's begun by hand: its headers sent, its body not yet."""
    import http.client

    connection = http.client.HTTPConnection(urllib.parse.urlsplit(served.base).netloc, timeout=30)
    connection.putrequest("POST", f"/api/assignments/{ASSIGNMENT}/submissions")
    connection.putheader("Authorization", f"Bearer {served.tokens['eve']}")
    connection.putheader("Content-Type", "multipart/form-data; boundary=x")
    connection.putheader(*length_header)
    connection.endheaders()
    return connection


def test_an_upload_over_the_limit_is_refused_from_its_length_before_its_body_is_read(served):
    connection = raw_upload(served, ("Content-Length", str(60 * 2**20)))  # 60 MB announced; 64 KB sent
    connection.send(b"--x\r\n" + b"y" * 65536)
    response = connection.getresponse()
    answer = json.loads(response.read())
    assert response.status == 413 and "over the 1 MB" in answer["error"] and "did not cost you" in answer["error"]
    _, listing, _ = request(f"{served.base}/api/assignments/{ASSIGNMENT}/submissions", served.tokens["eve"])
    assert listing == []


def test_an_upload_without_a_length_is_cut_off_at_the_limit(served):
    """A body sent in chunks, with no Content-Length, is refused once it passes the limit."""
    connection = raw_upload(served, ("Transfer-Encoding", "chunked"))
    chunk = b"--x\r\nContent-Disposition: form-data; name=\"notebook\"; filename=\"a.ipynb\"\r\n\r\n" + b"y" * 65536
    try:
        for _ in range(40):  # 2.5 MB, more than the 1 MB limit
            connection.send(b"%x\r\n%s\r\n" % (len(chunk), chunk))
            chunk = b"y" * 65536
        connection.send(b"0\r\n\r\n")
    except (BrokenPipeError, ConnectionResetError):
        pass  # the server stopped reading: what this test wants
    response = connection.getresponse()
    assert response.status == 413


def test_the_wrong_assignment_and_a_stranger_get_nothing(served, notebooks):
    body, kind = multipart({"notebook": ("x.ipynb", notebooks["ada"])})
    got, answer, _ = request(f"{served.base}/api/assignments/self_attention/submissions", served.tokens["eve"], body,
                             kind)
    assert got == 404 and "No such assignment" in answer["error"]
    for token in (None, "nonsense", "abc.def", served.tokens["eve"][:-1] + "x"):
        got, answer, headers = request(f"{served.base}/api/assignments/{ASSIGNMENT}/submissions", token)
        assert got == 401 and headers.get("www-authenticate") == "Bearer"


def test_every_route_refuses_alike_without_sign_in_and_for_what_is_not_yours(served):
    """Signing in is one dependency (Web.who, answered by one handler): walked over the route table,
    so a new route that forgets it, or words its refusal otherwise, fails here."""
    from autograder.service.app import ROUTES

    cookie = login(served, "fay")
    for path, _, methods, may in ROUTES:
        if may == "anyone":
            continue
        data = b"" if methods == ["POST"] else None
        api = path.startswith("/api/")
        theirs = path.replace("{assignment}", "nope").replace("{submission_id}", "nope")
        got, answer, headers = request(served.base + theirs, data=data)  # no token, no cookie
        if api:
            assert (got, headers.get("www-authenticate")) == (401, "Bearer"), (path, got, answer)
            assert answer == {"error": "Give your token: Authorization: Bearer <token>."}
        else:
            assert (got, headers.get("location")) == (303, "/"), (path, got, answer)
        if may == "ta":  # fay's own assignment, but the TA's page
            theirs = path.replace("{assignment}", ASSIGNMENT).replace("{submission_id}", "nope")
        if api:
            got, answer, _ = request(served.base + theirs, served.tokens["fay"], data=data)
            assert got == 404 and set(answer) == {"error"}, (path, got, answer)
            assert answer["error"] in ("No such assignment for your token.", "No such submission of yours.")
        else:
            got, answer, _ = request(served.base + theirs, data=data, cookie=cookie)
            assert got == 404 and "Not found" in answer, (path, got, answer)
            assert ("No such submission of yours." if may == "signed in" and "{submission_id}" in path
                    else "No such page for you.") in answer, path


def test_attempts_run_out_and_the_refusal_says_when_and_what_counts(served, notebooks):
    ids = []
    for _ in range(4):  # each graded before the next (one still waiting would be replaced, costing nothing)
        ids.append(submit(served, "dee", notebooks["dee"])[1]["id"])
        wait_graded(served, "dee", ids[-1])
    status, answer = submit(served, "dee", notebooks["dee"])
    assert status == 429 and "used your 4 attempts of the last 24 hours" in answer["error"]
    assert answer["retry_at"] and answer["counted"]["id"] in ids  # answered with the result that counts
    assert answer["counted"]["status"] == "graded" and answer["counted"]["score"] is not None
    cookie = login(served, "dee")  # on the page: the attempt that counts, and why nothing was taken
    token = re.search(r'name="csrf" value="([^"]+)"', request(f"{served.base}/assignments/{ASSIGNMENT}",
                                                              cookie=cookie)[1]).group(1)
    body, kind = multipart({"csrf": token, "notebook": ("x.ipynb", notebooks["dee"])})
    status, _, headers = request(f"{served.base}/assignments/{ASSIGNMENT}/upload", data=body, content_type=kind,
                                 cookie=cookie)
    assert status == 303 and headers["location"] == f"/submissions/{answer['counted']['id']}?used_up=1"
    page = request(served.base + headers["location"], cookie=cookie)[1]
    assert "You have used every attempt of this window" in page and "(this attempt counts)" in page


def test_too_many_requests_are_slowed_down_for_that_student_only(served):
    url = f"{served.base}/api/assignments/{ASSIGNMENT}/submissions"
    answers = [request(url, served.tokens["hal"]) for _ in range(320)]
    limited = [headers for status, _, headers in answers if status == 429]
    assert limited and int(limited[0]["retry-after"]) >= 1
    assert request(url, served.tokens["ivy"])[0] == 200  # everyone else goes on


# -- students apart ------------------------------------------------------------------------------
def test_no_student_can_list_read_or_replace_anothers_submissions(served, notebooks):
    ada_id = wait_graded(served, "ada", submit(served, "ada", notebooks["ada"])[1]["id"])["id"]
    ben = served.tokens["ben"]
    assert request(f"{served.base}/api/submissions/{ada_id}", ben)[0] == 404  # as for an id that does not exist
    assert request(f"{served.base}/api/submissions/0123456789abcdef", ben)[0] == 404
    _, listing, _ = request(f"{served.base}/api/assignments/{ASSIGNMENT}/submissions", ben)
    assert ada_id not in json.dumps(listing)
    cookie = login(served, "ben")
    status, page, _ = request(f"{served.base}/submissions/{ada_id}", cookie=cookie)
    assert status == 404 and "No such submission of yours" in page and "Your score" not in page
    assert request(f"{served.base}/ta/{ASSIGNMENT}", cookie=cookie)[0] == 404
    assert request(f"{served.base}/ta/{ASSIGNMENT}/submissions/{ada_id}", cookie=cookie)[0] == 404
    assert request(f"{served.base}/assignments/self_attention", cookie=cookie)[0] == 404
    body, kind = multipart({"csrf": "x", "notebook": ("x.ipynb", notebooks["ben"])})
    assert request(f"{served.base}/assignments/self_attention/upload", data=body, content_type=kind,
                   cookie=cookie)[0] == 404  # nor hand in for an assignment that is not theirs
    assert request(f"{served.base}/ta/{ASSIGNMENT}/regrade", data=body, content_type=kind, cookie=cookie)[0] == 404
    ta = login(served, "tim")
    status, page, _ = request(f"{served.base}/ta/{ASSIGNMENT}/submissions/{ada_id}", cookie=ta)
    assert status == 200 and "Your score:" in page  # a TA sees every check of every student


def test_the_upload_form_refuses_cross_site_posts_and_file_names_never_reach_a_path(served, notebooks):
    cookie = login(served, "fay")
    _, page, _ = request(f"{served.base}/assignments/{ASSIGNMENT}", cookie=cookie)
    token = re.search(r'name="csrf" value="([^"]+)"', page).group(1)
    url = f"{served.base}/assignments/{ASSIGNMENT}/upload"
    evil_name = "../../../../tmp/owned.ipynb"
    for fields, headers in (({"notebook": (evil_name, notebooks["ada"])}, {}),
                            ({"csrf": "0" * 40, "notebook": (evil_name, notebooks["ada"])}, {}),
                            ({"csrf": token, "notebook": (evil_name, notebooks["ada"])},
                             {"Origin": "http://evil.example"})):
        body, kind = multipart(fields)
        assert request(url, data=body, content_type=kind, cookie=cookie, headers=headers)[0] == 403
    body, kind = multipart({"csrf": token, "notebook": (evil_name, notebooks["ada"])})
    status, _, headers = request(url, data=body, content_type=kind, cookie=cookie)
    assert status == 303 and headers["location"].startswith("/submissions/")
    stored = [p.name for p in (served.course / "service" / "uploads" / ASSIGNMENT).glob("*.ipynb")]
    assert stored and all(re.fullmatch(r"[0-9a-f]{16}\.ipynb", name) for name in stored)
    assert not list(served.course.parent.rglob("owned.ipynb"))


def test_tokens_are_kept_hashed_and_a_revoked_one_stops_working(served):
    assert (served.course / "tokens.csv").stat().st_mode & 0o777 == 0o600  # each line is a student's password
    database = (served.course / "service" / "service.db").read_bytes()
    assert not any(token.split(".")[1].encode() in database for token in served.tokens.values())
    done = cli("tokens", ASSIGNMENT, "--revoke", "jo", "--course", served.course)
    assert done.returncode == 0 and "1 token(s) revoked" in done.stdout
    assert request(f"{served.base}/api/assignments/{ASSIGNMENT}/submissions", served.tokens["jo"])[0] == 401


# -- other ways in ---------------------------------------------------------------------------------
def test_the_standard_library_client_hands_in_and_prints_the_feedback(served, tmp_path, notebooks):
    status, code, _ = request(f"{served.base}/client.py")
    assert status == 200 and "import urllib.request" in code
    client = tmp_path / "autograder_client.py"
    client.write_text(code)
    notebook = tmp_path / "mine.ipynb"
    notebook.write_bytes(notebooks["ben"])
    done = subprocess.run([sys.executable, "-I", str(client), served.base, ASSIGNMENT, str(notebook)],
                          capture_output=True, text=True, timeout=300,
                          env={"AUTOGRADER_TOKEN": served.tokens["gus"], "PATH": "/usr/bin:/bin"})
    assert done.returncode == 0, done.stdout + done.stderr
    said = " ".join(done.stdout.split())
    assert "Your score on the checks shown:" in said and re.search(r"\d+ checks? (is|are) not shown until the due date,"
                                                                   r" 2099-01-01", said), said
    assert re.search(r"\d+ checks? (is|are) for your TA only\.", said), said  # ex8_model's: never "shown later"


def test_the_api_is_described_by_an_openapi_schema(served):
    status, schema, _ = request(f"{served.base}/openapi.json")
    assert status == 200 and schema["openapi"].startswith("3")
    paths = schema["paths"]
    assert set(paths["/api/assignments/{assignment}/submissions"]) == {"get", "post"}
    assert "202" in {str(k) for k in paths["/api/assignments/{assignment}/submissions"]["post"]["responses"]}
    assert "/api/submissions/{submission_id}" in paths


def test_many_clients_at_once_lose_nothing(served, notebooks):
    students = [f"c{i}" for i in range(12)]
    kinds = ["ada", "ben", "cy", "dee"]

    def one(index):
        student = students[index]
        status, answer = submit(served, student, notebooks[kinds[index % 4]])
        assert status == 202, answer
        return student, wait_graded(served, student, answer["id"], timeout=300)

    with concurrent.futures.ThreadPoolExecutor(len(students)) as pool:
        answers = dict(pool.map(one, range(len(students))))
    assert all(answer["status"] == "graded" for answer in answers.values())
    for index, student in enumerate(students):  # the same answers, the same grade
        assert graded_result(served.course, student)["score"] == graded_result(served.course, kinds[index % 4])["score"]
    assert "Traceback" not in served.log.read_text()


def test_a_newer_upload_replaces_the_one_still_waiting_and_the_student_is_told(served, notebooks):
    """Issue 45: at most one waiting notebook per student. With both workers busy, ned hands in
    three notebooks: the third takes the second's place, the second is never graded and costs no
    attempt, and both pages (and the API) say so."""
    from helpers import append_to_first_answer, example

    busy = [notebook_bytes(append_to_first_answer(example("ada"), f"import time; time.sleep(4)  # {n}\n"))
            for n in range(2)]
    for student, notebook in zip(("lu", "mo"), busy):  # the two workers, busy for a while
        assert submit(served, student, notebook)[0] == 202
    ids = []
    for n in range(3):
        status, answer = submit(served, "ned", notebook_bytes(append_to_first_answer(example("ben"), f"# try {n}\n")))
        assert status == 202, answer
        ids.append(answer["id"])
    first, second, third = (request(f"{served.base}/api/submissions/{i}", served.tokens["ned"])[1]
                            for i in ids)
    assert second["status"] == "replaced" and second["replaced_by"] == ids[2] and not second["attempt_counts"]
    uploads = served.course / "service" / "uploads" / ASSIGNMENT
    assert not (uploads / f"{ids[1]}.ipynb").exists() and (uploads / f"{ids[2]}.ipynb").exists()  # disk stays bounded
    assert "did not cost you an attempt" in second["detail"]
    assert third["replaced"] == [ids[1]] and "took the place of your earlier upload" in third["note"]
    assert first["status"] in ("queued", "running", "graded")  # taken before: graded as it is
    cookie = login(served, "ned")
    page = request(f"{served.base}/submissions/{ids[1]}", cookie=cookie)[1]
    assert "newer upload took this one" in page and f"/submissions/{ids[2]}" in page
    assert "took the place of your earlier upload" in request(f"{served.base}/submissions/{ids[2]}", cookie=cookie)[1]
    assert wait_graded(served, "ned", ids[2])["status"] == "graded"


@pytest.mark.slow
def test_a_ta_sees_everyone_and_a_regrade_follows_a_changed_weight(served, notebooks):
    from test_reruns import reweigh

    wait_graded(served, "ben", submit(served, "ben", notebooks["ben"])[1]["id"])
    before = graded_result(served.course, "ben")["score"]
    ta = login(served, "tim")
    status, page, _ = request(f"{served.base}/ta/{ASSIGNMENT}", cookie=ta)
    assert status == 200 and "ada" in page and "ben" in page
    # every student with a token is listed, those who never handed anything in too
    assert re.search(r"<td>hal</td><td>no attempt yet</td>", page) and 'http-equiv="refresh"' not in page
    reweigh(served.course, 9)
    token = re.search(r'name="csrf" value="([^"]+)"', page).group(1)
    body, kind = multipart({"csrf": token})
    assert request(f"{served.base}/ta/{ASSIGNMENT}/regrade", data=body, content_type=kind, cookie=ta)[0] == 303
    deadline, running = time.monotonic() + 300, []
    while "done at" not in (page := request(f"{served.base}/ta/{ASSIGNMENT}", cookie=ta)[1]):
        assert "failed" not in page and time.monotonic() < deadline, page[-2000:]
        running.append(page)
        time.sleep(0.5)
    assert running and all('<meta http-equiv="refresh" content="5">' in seen and "reloads itself" in seen
                           for seen in running if "running since" in seen)  # a TA sees it end without reloading
    assert 'http-equiv="refresh"' not in page
    after = graded_result(served.course, "ben")["score"]
    assert after != before and "scores moved" in page
    changes = (served.course / "graded" / ASSIGNMENT / "changes.csv").read_text()
    assert "ben" in changes
    # later submissions are graded with the changed weight too
    fresh = wait_graded(served, "ivy", submit(served, "ivy", notebooks["ben"])[1]["id"])
    assert graded_result(served.course, "ivy")["score"] == after and fresh["status"] == "graded"


# -- nothing lost ----------------------------------------------------------------------------------
@pytest.mark.slow
def test_kill_9_mid_queue_then_a_restart_grades_every_acknowledged_submission_once(tmp_path, notebooks):
    from helpers import crashing_notebook, settled_sandbox_processes

    course = make_gradebook(new_course(tmp_path))
    settings = course / "exercises" / ASSIGNMENT / "assignment.toml"
    settings.write_text(settings.read_text() + "\n[service]\nrequests_per_minute = 1200\n")  # the test polls often
    students = ["ada", "ben", "cy", "dee", "fay", "gus"]
    tokens = issue_tokens(course, ASSIGNMENT, students)
    files = {**notebooks, "fay": notebook_bytes(crashing_notebook()), "gus": notebook_bytes(make_notebook(
        {"ex1_answer": [("return", "x = 1\n    return")]}))}
    service = serve(course, ASSIGNMENT, jobs=2)
    service.tokens = tokens
    acknowledged = {}
    try:
        for student in students:
            status, answer = submit(service, student, files[student])
            assert status == 202, answer
            acknowledged[student] = answer["id"]
    finally:
        service.stop(kill=True)  # kill -9, with most of the queue not graded yet
    settled_sandbox_processes(0, timeout=20)
    again = serve(course, ASSIGNMENT, jobs=2)
    again.tokens = tokens
    try:
        answers = {student: wait_graded(again, student, submission_id) for student, submission_id in acknowledged.items()}
    finally:
        again.stop()
    assert all(answer["status"] == "graded" and answer["counted"] for answer in answers.values()), answers
    rows = sqlite3.connect(course / "service" / "service.db").execute("SELECT student_id, status FROM submissions").fetchall()
    assert sorted(rows) == sorted((s, "graded") for s in students)  # one row each: nothing lost, nothing twice
    graded = course / "graded" / ASSIGNMENT
    assert sorted(p.stem for p in graded.glob("[!.]*.json")) == sorted(students)
    assert not (graded / "history").exists()  # no result was ever recorded twice
    assert not list((course / "service" / "uploads").rglob(".incoming-*"))
    assert graded_result(course, "ada")["score"] == 26 and graded_result(course, "ben")["score"] == SCORES["ben"]


@pytest.mark.slow
def test_a_gradebook_locked_mid_rush_costs_no_grade_and_is_complete_once_free(tmp_path, notebooks):
    """Issue 45: with nbgrader's gradebook locked by another process for 30 s (longer than
    SQLite's own 5 s wait) while a class hands in, every acknowledged attempt is graded once
    (none an error, no result recorded twice), and once the lock ends the gradebook holds
    every student's score, as graded/ says."""
    from test_outputs import hold_lock, scores

    course = make_gradebook(new_course(tmp_path))
    settings = course / "exercises" / ASSIGNMENT / "assignment.toml"
    settings.write_text(settings.read_text() + "\n[service]\nrequests_per_minute = 1200\n")
    students = ["ada", "ben", "cy", "dee", "fay", "gus"]
    files = {"ada": notebooks["ada"], "ben": notebooks["ben"], "cy": notebooks["cy"], "dee": notebooks["dee"],
             "fay": notebooks["ada"], "gus": notebook_bytes(make_notebook({"ex1_answer": [("return", "x = 1\n    return")]}))}
    tokens = issue_tokens(course, ASSIGNMENT, students)
    service = serve(course, ASSIGNMENT, jobs=2)
    service.tokens = tokens
    try:
        first = submit(service, "ada", files["ada"])[1]["id"]
        wait_graded(service, "ada", first)  # the workers are warm: the rest is graded under the lock
        holder = hold_lock(course / "gradebook.db", 30)
        ids = {"ada": first}
        for student in students[1:]:
            status, answer = submit(service, student, files[student])
            assert status == 202, answer
            ids[student] = answer["id"]
        answers = {student: wait_graded(service, student, ids[student]) for student in students}
        assert all(a["status"] == "graded" and a["counted"] for a in answers.values()), answers
        holder.join()
        graded = {s: graded_result(course, s)["score"] for s in students}
        deadline = time.monotonic() + 60
        while True:  # the service's next quiet moment writes what waited
            written = scores(course)
            totals = {s: sum(g[0] or 0 for name, g in written[s].items()) for s in students if s in written}
            if totals == pytest.approx(graded) or time.monotonic() > deadline:
                break
            time.sleep(1)
        assert totals == pytest.approx(graded)
    finally:
        service.stop()
    rows = sqlite3.connect(course / "service" / "service.db").execute("SELECT student_id, status FROM submissions").fetchall()
    assert sorted(rows) == sorted((s, "graded") for s in students)
    assert not (course / "graded" / ASSIGNMENT / "history").exists()  # each recorded once


@pytest.mark.slow
def test_one_token_per_student_opens_every_assignment_each_with_its_own_rules(tmp_path, notebooks):
    """Issue 45: `autograder tokens` without an assignment gives each student one link for the
    course. It lists both assignments, hands in to each, and each keeps its own attempt limit;
    revoking it closes both; a per-assignment token still opens its own alone."""
    import csv

    course = make_gradebook(new_course(tmp_path))
    other = "self_attention"
    for name, extra in ((ASSIGNMENT, "attempts = 5\n"), (other, "attempts = 1\n")):
        settings = course / "exercises" / name / "assignment.toml"
        settings.write_text(settings.read_text() + f"\n[service]\nrequests_per_minute = 1200\n{extra}")
    roster = tmp_path / "roster.csv"
    roster.write_text("student_id\nada\nben\n")
    done = cli("tokens", "--course", course, "--roster", roster, "--out", tmp_path / "t.csv", "--url", "http://x")
    assert done.returncode == 0 and "every assignment" in done.stdout, done.stdout + done.stderr
    with open(tmp_path / "t.csv", newline="") as handle:
        tokens = {row["student_id"]: row["token"] for row in csv.DictReader(handle)}
    only_one = issue_tokens(course, other, ["cy"], tas=())
    listed = cli("tokens", "--course", course, "--list")
    assert "ada (student, every assignment)" in " ".join(listed.stdout.split()), listed.stdout
    served = serve(course, None, jobs=2)  # every assignment of the course
    served.tokens = {**tokens, **only_one}
    base = served.base
    try:
        status, _, headers = request(f"{base}/login/{tokens['ada']}")
        cookie = headers["set-cookie"].split(";")[0]
        assert status == 303 and headers["location"] == "/"
        home = request(f"{base}/", cookie=cookie)[1]
        assert f'href="/assignments/{ASSIGNMENT}"' in home and f'href="/assignments/{other}"' in home
        theirs = (course / "release" / other / f"{other}.ipynb").read_bytes()
        for name, notebook in ((ASSIGNMENT, notebooks["ada"]), (other, theirs)):
            status, answer = submit(served, "ada", notebook, assignment=name)
            assert status == 202, answer
        status, answer = submit(served, "ada", theirs, assignment=other)
        assert status == 429 and "your one attempt" in answer["error"], answer  # self_attention's own limit
        assert submit(served, "ada", notebooks["ben"], assignment=ASSIGNMENT)[0] == 202  # causal_attention's
        assert submit(served, "cy", notebooks["ada"], assignment=ASSIGNMENT)[0] == 404  # a token for one only
        assert cli("tokens", "--course", course, "--revoke", "ada").returncode == 0
        assert submit(served, "ada", notebooks["ada"], assignment=ASSIGNMENT)[0] == 401
    finally:
        served.stop()


# -- as people use it ----------------------------------------------------------------------------
def test_a_student_hands_in_through_the_page_in_chromium_and_reads_the_feedback(served, tmp_path, notebooks):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions
    from selenium.webdriver.support.ui import WebDriverWait

    from browser import full_page_screenshot, start_browser

    notebook = tmp_path / "causal_attention.ipynb"
    notebook.write_bytes(notebooks["ben"])
    browser = start_browser()
    try:
        browser.get(f"{served.base}/login/{served.tokens['fay']}")
        upload = WebDriverWait(browser, 30).until(expected_conditions.presence_of_element_located((By.ID, "notebook")))
        upload.send_keys(str(notebook))
        browser.find_element(By.ID, "submit").click()
        WebDriverWait(browser, 120).until(expected_conditions.presence_of_element_located((By.ID, "score")))
        text = browser.find_element(By.TAG_NAME, "body").text
        full_page_screenshot(browser, tmp_path / "service-feedback.png", 1000)
        assert "Your score on the checks shown:" in text and "not shown until the due date" in text
        assert "for your TA only" in text
        assert "Exercise 3" in text and "token ids" not in text  # ex8_model's checks stay hidden
        browser.get(f"{served.base}/assignments/{ASSIGNMENT}")
        rows = browser.find_elements(By.CSS_SELECTOR, "table.attempts tbody tr")
        counts = [row.text.split()[-2] == "yes" for row in rows]  # newest first
        assert counts[0] and sum(counts) == 1  # this attempt counts, and no other
    finally:
        browser.quit()


@pytest.mark.slow
def test_the_service_grades_on_a_dask_cluster_as_on_its_own_workers(tmp_path, notebooks):
    """`serve --cluster`: real `dask scheduler` and `dask worker` processes grade what students hand in."""
    from dask_cluster import dask_cluster

    course = make_gradebook(new_course(tmp_path / "c"))
    settings = course / "exercises" / ASSIGNMENT / "assignment.toml"
    settings.write_text(settings.read_text() + "\n[service]\nrequests_per_minute = 1200\n")
    tokens = issue_tokens(course, ASSIGNMENT, ["ada", "ben", "cy"])
    with dask_cluster(tmp_path / "cluster", workers=2) as cluster:
        service = serve(course, ASSIGNMENT, extra=["--cluster", cluster.address])
        service.tokens = tokens
        try:
            ids = {student: submit(service, student, notebooks[student])[1]["id"] for student in ("ada", "ben", "cy")}
            answers = {student: wait_graded(service, student, ids[student]) for student in ids}
        finally:
            service.stop()
    assert all(answer["status"] == "graded" and answer["counted"] for answer in answers.values())
    assert graded_result(course, "ada")["score"] == 26 and graded_result(course, "ben")["score"] == SCORES["ben"]
    assert (course / "autograded" / "ben" / ASSIGNMENT).is_dir()  # read again on this side: the cluster keeps none


SERVICE_REACH = """
import glob, json, os, urllib.request
# Hand in for someone else with a token found on this machine, or read the service's files.
found = []
for pattern in ("%(course)s/tokens.csv", "%(course)s/service/secret", "%(course)s/service/service.db",
                "/**/tokens.csv", "/**/service.db"):
    for path in glob.glob(pattern, recursive=True)[:20]:
        try:
            found.append(open(path, "rb").read(4096))
        except OSError:
            pass
for line in b"\\n".join(found).decode("latin-1").splitlines():
    if "." in line and "," in line:
        token = line.split(",")[1]
        try:
            request = urllib.request.Request("%(base)s/api/assignments/causal_attention/submissions", data=b"{}",
                                             headers={"Authorization": "Bearer " + token})
            urllib.request.urlopen(request, timeout=2)
        except Exception:
            pass
"""


@pytest.mark.slow
def test_the_attack_collection_through_the_service_gains_nothing_and_harms_no_one(tmp_path, notebooks):
    from helpers import ROOT
    from test_grade import ATTACKS, ben_plus, tree_digest

    course = make_gradebook(new_course(tmp_path))
    settings = course / "exercises" / ASSIGNMENT / "assignment.toml"
    settings.write_text(settings.read_text() + "\n[limits]\ntimeout = 20\nmemory_mb = 2048\n"
                        "\n[service]\nrequests_per_minute = 1200\n")
    attacks = {**ATTACKS, "service_reach": None}
    tokens = issue_tokens(course, ASSIGNMENT, [*attacks, "ben", "zz_ada"])
    guarded = [ROOT / "solutions", ROOT / "exercises", ROOT / "autograder", course / "source", course / "exercises",
               course / "solutions"]
    before, secret = tree_digest(*guarded), (course / "service" / "secret")
    service = serve(course, ASSIGNMENT, jobs=2)
    service.tokens = tokens
    reach = {"ex1_answer": SERVICE_REACH % {"course": course, "base": service.base}}
    try:
        def hand_in(name):
            notebook = ben_plus(after=attacks[name] or reach)
            status, answer = submit(service, name, notebook_bytes(notebook))
            assert status == 202, (name, answer)
            return name, answer["id"]

        with concurrent.futures.ThreadPoolExecutor(8) as pool:
            ids = dict(pool.map(hand_in, sorted(attacks)))
        ids["ben"] = submit(service, "ben", notebooks["ben"])[1]["id"]
        ids["zz_ada"] = submit(service, "zz_ada", notebooks["ada"])[1]["id"]  # after the attacks, on the same workers
        answers = {name: wait_graded(service, name, submission_id, timeout=900) for name, submission_id in ids.items()}
        assert request(f"{service.base}/healthz")[0] == 200  # still up
    finally:
        service.stop()
    assert all(answer["status"] == "graded" for answer in answers.values()), answers
    ben = graded_result(course, "ben")["score"]
    assert ben == SCORES["ben"] and graded_result(course, "zz_ada")["score"] == 26
    gained = {name: graded_result(course, name)["score"] for name in attacks if graded_result(course, name)["score"] > ben}
    assert not gained, gained
    rows = sqlite3.connect(course / "service" / "service.db").execute(
        "SELECT student_id, COUNT(*) FROM submissions GROUP BY student_id").fetchall()
    assert dict(rows) == {name: 1 for name in ids}  # nobody handed in for anyone else
    assert tree_digest(*guarded) == before and secret.stat().st_mode & 0o777 == 0o600
    assert "Traceback" not in service.log.read_text()


def test_signing_in_from_another_site_is_refused(served):
    body, kind = multipart({"token": served.tokens["ivy"]})
    status, _, headers = request(f"{served.base}/login", data=body, content_type=kind,
                                 headers={"Origin": "http://evil.example"})
    assert status == 403 and "set-cookie" not in headers
    status, _, headers = request(f"{served.base}/login", data=body, content_type=kind)
    assert status == 303 and headers["set-cookie"].startswith("autograder=")
    assert "HttpOnly" in headers["set-cookie"] and "SameSite=strict" in headers["set-cookie"]



def test_a_local_clients_forwarded_headers_change_nothing_and_sign_out_checks_its_origin(served):
    """X-Forwarded-For is believed only from the proxies `--forwarded-allow-ips` names (none here):
    a client on the grader's machine cannot rotate addresses past the wrong-token limit. Another
    site's page cannot sign a student out. (Last of the module's tests on `served`: it uses up
    127.0.0.1's wrong tokens for a minute.)"""
    cookie = login(served, "kim")
    status, _, _ = request(f"{served.base}/logout", data=b"", headers={"Origin": "https://elsewhere.example"},
                           cookie=cookie)
    assert status == 403
    status, _, headers = request(f"{served.base}/logout", data=b"", headers={"Origin": served.base}, cookie=cookie)
    assert status == 303 and "Max-Age=0" in headers.get("set-cookie", "")
    url = f"{served.base}/api/assignments/{ASSIGNMENT}/submissions"
    codes = [request(url, "abc.def", headers={"X-Forwarded-For": f"10.0.{n // 200}.{n % 200 + 1}"})[0]
             for n in range(40)]
    assert set(codes) == {401, 429} and codes.index(429) <= 30, codes


@pytest.mark.slow
def test_serve_demo_shows_the_page_students_meet_before_the_due_date(tmp_path):
    """self_attention hides its large-inputs softmax check until the due date; `serve --demo` gives
    its demo copy a due date a week away (the course's own settings untouched), so cy, whose
    softmax_stable skips the shift and fails only that check in Ex2, sees Ex2 whole and one check
    not shown until then. The batch demo grades every check, as before."""
    from datetime import datetime, timedelta, timezone

    from autograder.authoring.examples import write_examples
    from autograder.course import Course

    course = new_course(tmp_path)
    own = (course / "exercises" / "self_attention" / "assignment.toml").read_text()
    service = serve(course, "self_attention", extra=("--demo",))
    try:
        log = service.log.read_text()
        links = dict(re.findall(r"^\s+(\S+) \(self_attention\): \S+/login/(\S+)$", log, re.M))
        assert set(links) >= {"ada", "cy", "dee"}, log
        assert "self_attention hides checks until its due date: the demo's copy is due" in log
        service.tokens = links
        demo = Course(course / "demo").assignment("self_attention")
        cy = write_examples(demo, tmp_path / "handed")["cy"]
        status, answer = submit(service, "cy", cy, assignment="self_attention")
        assert status == 202, answer
        for _ in range(200):  # the demo keeps the default of 60 requests a minute: ask every 1.5 s
            time.sleep(1.5)
            status, done, _ = request(f"{service.base}/api/submissions/{answer['id']}", links["cy"])
            assert status == 200, done
            if done["status"] in ("graded", "error"):
                break
        assert done["status"] == "graded", done
        page = " ".join(request(done["feedback_url"], service.tokens["cy"])[1].split())
    finally:
        service.stop()
    due = datetime.fromisoformat(done["hidden_until"])
    assert timedelta(days=6) < due - datetime.now(timezone.utc) <= timedelta(days=7)
    ex2 = next(cell for cell in done["feedback"]["exercises"] if cell["cell"] == "ex2")
    assert ex2["points"] == ex2["max_points"] > 0, ex2  # every shown check of Ex2 passes
    assert ex2["hidden_checks"] == done["feedback"]["hidden_until_due"] == done["feedback"]["hidden_checks"] >= 1
    assert "stays finite and exact for inputs around" not in page and "not shown until the due date" in page
    whole = json.loads((course / "demo" / "graded" / "self_attention" / "cy.json").read_text())
    hidden = [check for test in whole["tests"] for check in test["extra_data"]["checks"]
              if check["name"].startswith("test_stable_for_large_inputs")]
    assert hidden and not any(check["passed"] for check in hidden)  # the TA's result holds the check, failed
    assert (course / "exercises" / "self_attention" / "assignment.toml").read_text() == own
