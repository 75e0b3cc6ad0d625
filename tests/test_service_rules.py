"""The service's rules without a server: what a student sees, which attempt counts, when it is open."""
from datetime import datetime, timedelta, timezone

import pytest

from dataclasses import replace

from autograder.record import CellScore, CheckOutcome, View
from autograder.runs.late import LatePolicy
from autograder.service.counting import AssignmentRecord
from autograder.service.store import GRADED, Row, Who
from autograder.service.submit import Refused, check_attempts, check_open
from autograder.service.views import STALE, Visibility, student_view
from helpers import make_result

DUE = datetime(2026, 11, 20, 23, 59, tzinfo=timezone.utc)


def result_with_checks():
    checks = [CheckOutcome("test_shape[1]", "Returns (B, N, d_out)", True, 1.0),
              CheckOutcome("test_shape[2]", "Returns (B, N, d_out)", False, 1.0, "got (2, 3)"),
              CheckOutcome("test_secret", "The secret property", False, 2.0, "secret value 0.123")]
    return make_result("ada", [CellScore("ex3", 1.25, 5.0, output="all feedback incl. secret value 0.123", checks=checks),
                               CellScore("ex4", 1.0, 1.0, checks=[CheckOutcome("test_x", "X", True)])])


def graded_with(visibility, levels=(0, 1)):
    """result_with_checks() as grading records it with `visibility`: the whole result, and a view
    for each level below the highest, its checks judged without the higher ones (here: the shape
    check's message, made without the secret check, is worded otherwise)."""
    result = result_with_checks()
    result.visibility, result.levels = visibility.key(), list(levels)
    for level in levels[:-1]:
        cells = []
        for cell in result.cells:
            kept = [replace(check, message=check.message and "seen alone: " + check.message) for check in cell.checks
                    if visibility.level(cell.name, check.name) <= level]
            total = sum(check.weight for check in cell.checks)
            share = lambda checks, cell=cell, total=total: round(cell.max_score * sum(c.weight for c in checks) / total, 2)
            cells.append(CellScore(cell.name, share([c for c in kept if c.passed]), share(kept), checks=kept))
        result.views.append(View(level, cells, [f"a note at level {level}"]))
    return result


def test_before_the_due_date_the_view_is_the_one_graded_without_the_hidden_check():
    visibility = Visibility("visible", {"ex3::test_secret": "after_due_date"})
    view = student_view(graded_with(visibility), visibility, due_passed=False)
    text = repr(view.to_json())
    assert "secret" not in text and "0.123" not in text
    assert "seen alone: got (2, 3)" in text and view.notes == ["a note at level 0"]  # the view's words, never the whole's
    assert view.hidden == view.hidden_until_due == 1 and not view.complete
    ex3 = view.cells[0]
    assert (ex3.points, ex3.max_points) == (1.25, 2.5)  # 1 of 2 shown weight earned, the shown share of 5 points
    assert (view.score, view.max_score) == (2.25, 3.5)  # never the whole total, which would reveal the rest


def test_after_the_due_date_the_view_is_the_whole_result():
    visibility = Visibility("visible", {"ex3::test_secret": "after_due_date"})
    result = graded_with(visibility)
    view = student_view(result, visibility, due_passed=True)
    assert view.complete and (view.score, view.max_score) == (result.score, result.max_score)
    assert "secret value 0.123" in repr(view.to_json())


def test_hidden_is_hidden_for_good_and_a_cell_can_be_hidden_whole():
    visibility = Visibility("visible", {"ex3::test_secret": "hidden", "ex4": "after_due_date"})
    result = graded_with(visibility, levels=(0, 1, 2))
    view = student_view(result, visibility, due_passed=True)
    assert view.hidden == 1 and view.hidden_until_due == 0 and "secret" not in repr(view.to_json())
    assert view.notes == ["a note at level 1"] and view.cells[1].checks  # ex4, shown after the due date
    before = student_view(result, visibility, due_passed=False)
    assert before.cells[1].checks == [] and before.cells[1].max_points == 0


def test_a_judgement_made_from_a_hidden_check_is_counted_as_shown_when_that_check_is():
    """A diagnosis is visible by name, but one made from a check hidden until the due date is in no
    view before it: the page counts it among the checks shown after the due date, not the TA's."""
    for secret, until_due in (("after_due_date", 2), ("hidden", 0)):
        visibility = Visibility("visible", {"ex3::test_secret": secret})
        result = graded_with(visibility, levels=(0, 1) if secret == "after_due_date" else (0, 2))
        result.cells[0].checks.append(CheckOutcome("test_diagnosis", "Compared with the common mistakes", False, 1.0,
                                                   "your secret mistake"))
        view = student_view(result, visibility, due_passed=False)
        assert view.hidden == 2 and view.hidden_until_due == until_due, secret
        assert "your secret mistake" not in repr(view.to_json())


def test_a_result_graded_with_other_visibility_shows_no_feedback_until_graded_again():
    before = Visibility("visible", {"ex3::test_secret": "after_due_date"})
    now = Visibility("visible", {"ex3::test_secret": "after_due_date", "ex3::test_shape": "after_due_date"})
    for result in (graded_with(before), result_with_checks()):  # another split; graded with nothing hidden
        view = student_view(result, now, due_passed=False)
        assert view.notes == [STALE] and not view.complete
        assert all(not cell.checks and cell.points == 0 for cell in view.cells)
        assert "secret" not in repr(view.to_json()) and "got (2, 3)" not in repr(view.to_json())
    assert student_view(graded_with(before), Visibility(), due_passed=False).complete  # nothing hidden now


def rows(*specs):
    """Rows of one student: (id, received, score, answers key)."""
    return [Row(seq=i, id=id_, assignment="a", student_id="ada", received_at=when.isoformat(), sha256="",
                path="", status=GRADED, attempt=1, counted=0, tries=0, answers_key=key, score=score, detail="",
                graded_at="") for i, (id_, when, score, key) in enumerate(specs)]


class Record(AssignmentRecord):
    def __init__(self, policy, counts="last"):
        self.policy, self.counts, self.extensions, self.roster = policy, counts, {}, None


POLICY = LatePolicy(due=DUE, percent_per_day=50, cutoff=DUE + timedelta(days=3))


def scored(found):
    return {row.id: make_result("ada", [("ex1", row.score, 10.0)]) for row in found}


def test_the_last_attempt_before_the_cutoff_counts():
    found = rows(("a", DUE - timedelta(days=1), 4, "k1"), ("b", DUE - timedelta(hours=1), 6, "k2"),
                 ("c", DUE + timedelta(days=4), 10, "k3"))  # after the cutoff
    assert Record(POLICY).choose(found, scored(found)).id == "b"


def test_an_identical_resubmission_after_the_due_date_is_never_late():
    found = rows(("a", DUE - timedelta(days=1), 6, "same"), ("b", DUE + timedelta(hours=2), 6, "same"))
    assert Record(POLICY).choose(found, scored(found)).id == "a"
    changed = rows(("a", DUE - timedelta(days=1), 6, "k1"), ("b", DUE + timedelta(hours=2), 9, "k2"))
    assert Record(POLICY).choose(changed, scored(changed)).id == "b"  # new answers: late, and counted


def test_the_best_attempt_after_its_late_penalty_counts_when_asked():
    found = rows(("a", DUE - timedelta(days=1), 7, "k1"), ("b", DUE + timedelta(hours=2), 9, "k2"))
    assert Record(POLICY, "best").choose(found, scored(found)).id == "a"  # 9 - 50% of 10 = 4 < 7


class Assignment:
    def __init__(self, **service):
        from types import SimpleNamespace

        defaults = {"opens": None, "attempts": None, "attempt_window_hours": 24}
        self.name, self.title = "a", "Causal attention"
        self.config = SimpleNamespace(service=SimpleNamespace(**{**defaults, **service}))


class Service:
    def __init__(self, policy=None, found=()):
        from types import SimpleNamespace

        self.counting = SimpleNamespace(records={"a": Record(policy)})
        self.store = SimpleNamespace(of_student=lambda assignment, student: list(found))


WHO = Who("ada", "student", "a", "t1")


def test_not_yet_open_and_closed_are_refused_with_the_time():
    with pytest.raises(Refused, match="opens for submissions at 2026-11-10 09:00 UTC") as refused:
        check_open(Service(), WHO, Assignment(opens=datetime(2026, 11, 10, 9, tzinfo=timezone.utc)),
                   datetime(2026, 11, 9, tzinfo=timezone.utc))
    assert refused.value.status == 403
    with pytest.raises(Refused, match="closed at 2026-11-23 23:59 UTC"):
        check_open(Service(POLICY), WHO, Assignment(), DUE + timedelta(days=3, minutes=1))
    check_open(Service(POLICY), WHO, Assignment(), DUE + timedelta(days=1))  # late, but taken


def test_attempts_count_in_a_sliding_window_and_refunded_ones_do_not():
    now = DUE
    found = rows(("a", now - timedelta(hours=30), 1, ""), ("b", now - timedelta(hours=5), 1, ""),
                 ("c", now - timedelta(hours=1), 1, ""))
    found[2].attempt = 0  # the grader's fault: refunded
    assert check_attempts(Service(found=found), WHO, Assignment(attempts=2), now) == 1
    found[2].attempt = 1
    with pytest.raises(Refused, match="next one is possible from 2026-11-21 18:59 UTC"):
        check_attempts(Service(found=found), WHO, Assignment(attempts=2), now)


def test_an_assignment_that_says_nothing_takes_20_attempts_a_day_and_a_course_may_raise_it(tmp_path):
    """One student sending a notebook a second must not fill the queue: without an [service]
    attempts setting, the 21st attempt of a day is refused; `attempts = 50` raises it."""
    from autograder.course import Course
    from helpers import new_course

    course = new_course(tmp_path)
    assignment = Course(course).assignment("causal_attention")
    assert assignment.config.service.attempts == 20 and assignment.config.service.attempt_window_hours == 24
    now = DUE
    found = rows(*((f"s{n}", now - timedelta(minutes=n), 1, "") for n in range(20)))
    with pytest.raises(Refused, match="used your 20 attempts of the last 24 hours"):
        check_attempts(Service(found=found), WHO, assignment, now)
    settings = assignment.folder / "assignment.toml"
    settings.write_text(settings.read_text() + "\n[service]\nattempts = 50\n")
    assert check_attempts(Service(found=found), WHO, Course(course).assignment("causal_attention"), now) == 30


@pytest.mark.usefixtures("sandbox_required")
def test_warm_workers_that_never_graded_close_their_sandboxes_and_agent_folders():
    """A service stopped before anyone handed in (and a batch whose every answer was given again)
    has workers that were never handed a task: they close their sandboxes too, leaving no agent
    folder in the temporary folder (they used to be killed by the lifeline instead)."""
    import os
    import time

    from autograder.grading.sandbox.agent_files import remove_if_unheld, shared_temp_dir
    from helpers import ROOT, sandbox_processes, settled_sandbox_processes
    from autograder.grading.scheduler import WarmPool
    from autograder.grading.submission import BatchSpec

    for folder in shared_temp_dir().glob(f"autograder-agent-{os.geteuid()}-*"):
        remove_if_unheld(folder)  # what earlier runs left; one another sandbox holds stays, and is not ours
    before = set(shared_temp_dir().glob(f"autograder-agent-{os.geteuid()}-*"))
    pool = WarmPool(BatchSpec(assignment="causal_attention", course=str(ROOT), seed=1), 2).start()
    deadline = time.monotonic() + 90
    while len(sandbox_processes()) < 2:  # both sandboxes up and warm
        assert time.monotonic() < deadline, "the warm workers' sandboxes did not start"
        time.sleep(0.2)
    pool.close()
    assert not settled_sandbox_processes(0)
    assert set(shared_temp_dir().glob(f"autograder-agent-{os.geteuid()}-*")) - before == set()


def test_the_client_says_what_the_page_says_of_hidden_checks():
    """The standard-library client in the page's words: checks shown after the due date, and those
    for the TA alone, which are never "shown later"."""
    from autograder.service.client import describe

    answer = {"status": "graded", "score": 3, "max_score": 4, "feedback_url": "http://x/submissions/1",
              "hidden_until": "2026-12-01T23:59:00+00:00",
              "feedback": {"complete": False, "hidden_checks": 6, "hidden_until_due": 1, "exercises": []}}
    said = describe(answer)
    assert "1 check is not shown until the due date, 2026-12-01T23:59:00+00:00." in said
    assert "5 checks are for your TA only." in said and "Their points are not in the score above." in said
    answer["feedback"]["hidden_until_due"] = 0
    assert "not shown until" not in describe(answer) and "6 checks are for your TA only." in describe(answer)


def test_the_client_refused_for_attempts_used_up_shows_the_attempt_that_counts(monkeypatch, tmp_path, capsys):
    import io
    import json
    import urllib.error

    from autograder.service import client

    counted = {"id": "s1", "status": "graded", "score": 20, "max_score": 26, "feedback_url": "http://x/submissions/s1",
               "feedback": {"complete": True, "exercises": [{"title": "Exercise 1", "points": 2, "max_points": 2,
                                                             "checks": []}]}}
    body = {"error": "You have used your 4 attempts of the last 24 hours; your next one is possible from"
                     " 2026-11-29 10:00 UTC. The attempt that counts so far is shown below.",
            "counted": counted, "retry_at": "2026-11-29T10:00:00+00:00"}

    def refuse(request, timeout):
        raise urllib.error.HTTPError(request.full_url, 429, "Too Many Requests", {},
                                     io.BytesIO(json.dumps(body).encode()))

    monkeypatch.setattr(client.urllib.request, "urlopen", refuse)
    notebook = tmp_path / "a.ipynb"
    notebook.write_text("{}")
    assert client.main(["http://x", "causal_attention", str(notebook), "--token", "t"]) == 1
    out = capsys.readouterr()
    assert "Not handed in: 429: You have used your 4 attempts" in out.out
    assert "The attempt that counts:\nYour score: 20 / 26" in out.out and "Exercise 1: 2 / 2" in out.out
    assert out.err == ""  # said once


def test_the_rate_limiter_forgets_idle_keys_and_new_keys_share_one_count_past_its_bound(monkeypatch):
    from autograder.service.guard import RateLimit

    monkeypatch.setattr(RateLimit, "MAX_KEYS", 100)
    monkeypatch.setattr(RateLimit, "SWEEP_EVERY", 50)
    limiter = RateLimit()
    assert limiter.allow("token:ada", 2, now=0.0) == (True, 0)
    for n in range(1000):  # a flood of addresses within one minute
        limiter.allow(f"ip:10.0.{n // 200}.{n % 200}", 30, now=1.0 + n / 1000)
    assert len(limiter.seen) <= 101  # its keys and the one shared count
    assert limiter.allow("ip:192.0.2.1", 30, now=2.5)[0] is False  # a newcomer shares the flood's count
    assert limiter.allow("token:ada", 2, now=3.0) == (True, 0)  # a student already counted keeps their own
    assert limiter.allow("token:ada", 2, now=4.0)[0] is False
    for n in range(60):  # a minute later the flood's keys are gone, and newcomers count alone again
        limiter.allow(f"token:s{n}", 60, now=120.0 + n / 100)
    assert len(limiter.seen) <= 61 and limiter.allow("ip:192.0.2.1", 30, now=121.0) == (True, 0)


def test_students_take_turns_in_the_queue_and_each_knows_its_place():
    """One student's 60 waiting notebooks delay another's by one of theirs, not 60; each student's
    own go in the order they came; the place each is told is the order it is then taken in."""
    import threading

    from autograder.service.fairqueue import FairQueue

    waiting = FairQueue()
    for n in range(60):
        waiting.put("flood", (f"f{n}", None))
    waiting.put("ada", ("a0", None))
    waiting.put("ben", ("b0", None))
    waiting.put("ada", ("a1", None))
    places = {item: waiting.ahead(item) for item in ("f0", "f1", "f2", "a0", "b0", "a1", "f59")}
    assert places == {"f0": 0, "a0": 1, "b0": 2, "f1": 3, "a1": 4, "f2": 5, "f59": 62}
    assert waiting.ahead("nobody") is None and len(waiting) == 63
    taken = []
    for _ in range(63):
        taken.append(waiting.get()[0])
        waiting.done(taken[-1])
    assert taken[:6] == ["f0", "a0", "b0", "f1", "a1", "f2"] and taken[6:] == [f"f{n}" for n in range(3, 60)]
    assert all(taken.index(item) == place for item, place in places.items())
    waiting.put("cy", ("c0", None))
    assert waiting.get() == ("c0", None)
    done = []
    reader = threading.Thread(target=lambda: done.append(waiting.get()))
    reader.start()
    waiting.close()
    reader.join(5)
    assert done == [None]  # closed and empty: the lane's thread ends


def test_a_new_upload_replaces_what_its_student_has_waiting_in_the_same_place():
    """At most one waiting notebook per student: the newest takes the place of the ones still
    waiting (they come back, to be marked replaced); another student's are never touched."""
    from autograder.service.fairqueue import FairQueue

    waiting = FairQueue()
    waiting.put("ada", ("a0", None), replace=True)
    waiting.put("ben", ("b0", None), replace=True)
    waiting.put("ada", ("a1", None))  # a retry or a restart puts without replacing
    assert waiting.put("ada", ("a2", None), replace=True) == [("a0", None), ("a1", None)]
    assert waiting.ahead("a2") == 0 and waiting.ahead("a0") is None and len(waiting) == 2
    assert waiting.put("cy", ("c0", None), replace=True) == []
    assert [waiting.get()[0] for _ in range(3)] == ["a2", "b0", "c0"]


def test_a_student_with_a_notebook_being_graded_is_passed_over_until_it_is_done():
    """At most one running notebook per student: while ada's is graded, ben's goes first, and
    ada keeps her place for when hers is done."""
    import threading

    from autograder.service.fairqueue import FairQueue

    waiting = FairQueue()
    waiting.put("ada", ("a0", None))
    waiting.put("ada", ("a1", None))  # (after a restart a student may have two waiting)
    waiting.put("ben", ("b0", None))
    assert waiting.get()[0] == "a0"
    assert waiting.get()[0] == "b0"  # ada's a1 waits: a0 is still being graded
    got = []
    taker = threading.Thread(target=lambda: got.append(waiting.get()))
    taker.start()
    taker.join(0.3)
    assert got == [] and taker.is_alive()  # nothing may be taken yet
    waiting.done("a0")
    taker.join(5)
    assert got == [("a1", None)]
    waiting.done("a1")
    waiting.done("b0")
    waiting.close()
    assert waiting.get() is None


def test_prune_deletes_only_the_uploads_no_attempt_needs(tmp_path):
    """`autograder prune`: finished attempts that do not count lose their upload (their row and
    result stay); the attempt that counts, anything not graded yet, recent uploads with
    --older-than, and a path outside the uploads folder are left alone; --dry-run deletes nothing."""
    from datetime import datetime, timedelta, timezone

    from autograder.service.prune import prune
    from autograder.service.store import ERROR, GRADED, QUEUED, REPLACED, RUNNING, Store, stamp

    root = tmp_path / "service"
    uploads = root / "uploads" / "a1"
    uploads.mkdir(parents=True)
    store = Store(root / "service.db")
    now = datetime.now(timezone.utc)
    outside = tmp_path / "elsewhere.ipynb"
    rows = {"old": (GRADED, 0, 10), "counts": (GRADED, 1, 10), "swapped": (REPLACED, 0, 10), "broke": (ERROR, 0, 10),
            "waits": (QUEUED, 0, 10), "runs": (RUNNING, 0, 10), "recent": (GRADED, 0, 0.5), "stray": (GRADED, 0, 10)}
    for name, (status, counted, days) in rows.items():
        path = outside if name == "stray" else uploads / f"{name}.ipynb"
        path.write_text("x" * 1000)
        store.add(name, "a1", "ada", stamp(now - timedelta(days=days)), "sha", path)
        store.set_status(name, status, counted=counted)
    dry = prune(root, "a1", dry_run=True)
    assert (dry.files, dry.bytes) == (4, 4000) and len(list(uploads.iterdir())) == 7  # (the stray one: a problem)
    found = prune(root, "a1", older_than_days=1)
    assert found.files == 3 and found.kept == 4 and found.problems == [(str(outside), found.problems[0][1])]
    assert sorted(p.stem for p in uploads.iterdir()) == ["counts", "recent", "runs", "waits"]
    assert outside.exists() and len(store.of_assignment("a1")) == 8  # every row stays


def test_prune_without_a_service_says_so(tmp_path):
    from helpers import cli, new_course

    course = new_course(tmp_path)
    done = cli("prune", "causal_attention", "--course", course)
    assert done.returncode == 2 and "no service has run" in done.stdout + done.stderr, done.stdout + done.stderr


def test_the_service_log_writes_a_repeated_message_a_few_times_a_minute_then_counts_it():
    """A loop of the same error (an accept() failing for want of descriptors, 204,704 times in
    80 s) is written 5 times a minute, then once with how many were held back."""
    import logging

    from autograder.service.limits import RepeatFilter

    now = [0.0]
    repeat = RepeatFilter(per_minute=5, clock=lambda: now[0])

    def record(message):
        return logging.LogRecord("asyncio", logging.ERROR, __file__, 1, message, (), None)

    written = [repeat.filter(record("socket.accept() out of system resource")) for _ in range(1000)]
    assert written.count(True) == 5
    assert repeat.filter(record("another message"))  # others are not held back
    now[0] = 61.0
    later = record("socket.accept() out of system resource")
    assert repeat.filter(later) and "995 more times" in later.getMessage()


def test_serve_raises_its_descriptor_limit_to_the_hard_limit():
    import resource

    from autograder.service.limits import raise_descriptor_limit

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(1024, hard), hard))
        before, after = raise_descriptor_limit()
        assert before == min(1024, hard) and after == resource.getrlimit(resource.RLIMIT_NOFILE)[0]
        assert after == (hard if hard != resource.RLIM_INFINITY else max(before, 65536))
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
