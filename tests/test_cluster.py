"""Grading on a Dask cluster (grading/cluster/): real `dask scheduler` and `dask worker`
processes on 127.0.0.1, the same class graded locally for comparison."""
import os
import signal
import socket
import subprocess
import sys
import threading
import time

import pytest

from autograder.grading.bundle import BundleError, make_bundle, unpack_bundle
from autograder.grading.cluster.client import DaskScheduler, parse_cluster
from autograder.grading.cluster.protocol import ATTEMPTS_TOPIC, ClusterError
from autograder.record import GRADED, INVALID, all_results

from dask_cluster import dask_cluster, make_certificates
from helpers import (SCORES, append_to_first_answer, assignment_of, cli, example, make_realistic_class, new_course,
                     path_without_bwrap, submit, write)

ASSIGNMENT = "causal_attention"
SEED = 11
LIMITS = {"timeout": 10.0}  # as the command line gives it; the looping answer of the realistic class uses all of it
CLASS_SIZE = 40


# -- without a cluster: the parts that decide what travels -----------------------------------
def test_cluster_argument_is_an_address_or_local_workers():
    assert parse_cluster("local:3") == ("local", 3)
    assert parse_cluster("tls://10.0.0.5:8786") == ("address", "tls://10.0.0.5:8786")
    assert parse_cluster("10.0.0.5:8786") == ("address", "tcp://10.0.0.5:8786")
    for bad in ("local:0", "local:two", "local:"):
        with pytest.raises(ClusterError, match="local:N"):
            parse_cluster(bad)


def test_the_bundle_is_reproducible_holds_no_authoring_material_and_is_checked_on_unpacking(tmp_path):
    assignment = assignment_of()
    first, data = make_bundle(assignment)
    again, _ = make_bundle(assignment)
    assert first == again  # the same course, the same hash: workers reuse what they unpacked
    folder = unpack_bundle(data, first, tmp_path / "bundles")
    names = {str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file()}
    assert f"solutions/{ASSIGNMENT}.py" in names and f"release/{ASSIGNMENT}/{ASSIGNMENT}.ipynb" in names
    assert any(name.startswith(f"exercises/{ASSIGNMENT}/checks/test_") for name in names)
    assert not any(name.endswith(("corpus.toml", "examples.toml")) for name in names)  # never graded with
    assert (tmp_path / "bundles").stat().st_mode & 0o077 == 0  # no other user reads the hidden checks
    assert unpack_bundle(data, first, tmp_path / "bundles") == folder  # cached by hash
    with pytest.raises(BundleError, match="does not match its hash"):
        unpack_bundle(data[:-10] + b"x" * 10, first, tmp_path / "other")
    assert not (tmp_path / "other" / first).exists()


def test_a_changed_check_changes_the_bundle(tmp_path):
    course = new_course(tmp_path)
    assignment = assignment_of(course)
    before, _ = make_bundle(assignment)
    check = next(assignment.checks.glob("test_*.py"))
    check.write_text(check.read_text() + "\n# changed\n")
    assert make_bundle(assignment)[0] != before


def test_an_unreachable_scheduler_is_one_clear_line_and_nothing_is_written(tmp_path, course_copy):
    with socket.socket() as probe:  # a port nobody listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    inbox = tmp_path / "inbox"
    inbox.mkdir()
    write(inbox, "ada", example("ada"))
    out = tmp_path / "out"
    done = cli("grade", ASSIGNMENT, inbox, "--course", course_copy, "--out", out,
               "--cluster", f"tcp://127.0.0.1:{port}",  # Dask retries until the timeout: 1 s, not 10
               setup="from autograder.grading.cluster import client\nclient.CONNECT_TIMEOUT = 1")
    assert done.returncode == 1
    assert "cannot reach the Dask scheduler at tcp://127.0.0.1:" in " ".join(done.stdout.split())
    assert "Traceback" not in done.stdout + done.stderr
    assert len(done.stdout.strip().splitlines()) <= 2  # one message (rich may wrap it once)
    assert not out.exists()


# -- with a cluster ---------------------------------------------------------------------------
@pytest.fixture(scope="module")
def realistic(tmp_path_factory):
    """(course, class folder, {student: local result without timings}): 40 mixed submissions
    (corpus mistakes and alternatives, the untouched release, slow, crashing and looping
    answers) graded by the local pool."""
    from autograder.runs.batch import grade_batch

    course, _ = make_realistic_class(tmp_path_factory.mktemp("realistic"), CLASS_SIZE)
    report = grade_batch(assignment_of(course), [course / "submitted"], out_dir=course / "local", jobs=2,
                         seed=SEED, limits=LIMITS)
    assert len(report.graded) == CLASS_SIZE
    return course, course / "submitted", {r.student_id: r.without_timings() for r in report.results}


def grade_on(cluster, course, out, **options):
    from autograder.runs.batch import grade_batch

    scheduler = DaskScheduler(cluster.address, security=cluster.security())
    return grade_batch(assignment_of(course), [course / "submitted"], out_dir=out, seed=SEED, limits=LIMITS,
                       scheduler=scheduler, **options)


def stable(results):
    return {r.student_id: r.without_timings() for r in results}


def assert_only_the_rest_was_graded(report, local, written):
    """A rerun after an interruption graded exactly what was missing, and the class equals local grading."""
    assert sorted(r.student_id for r in report.graded) == sorted(set(local) - written)
    assert stable(report.results) == local


@pytest.mark.slow
@pytest.mark.usefixtures("sandbox_required")
def test_a_two_worker_cluster_grades_forty_mixed_submissions_exactly_as_the_local_pool(tmp_path, realistic):
    course, _, local = realistic
    with dask_cluster(tmp_path / "cluster", workers=2) as cluster:
        report = grade_on(cluster, course, tmp_path / "out")
    assert len(report.graded) == CLASS_SIZE
    assert stable(report.results) == local  # every field but the timings, every student
    statuses = {r.status for r in report.results}
    assert statuses == {GRADED}, statuses
    assert len({r.score for r in report.results}) > 5  # a mixed class, not forty copies of one score
    assert (tmp_path / "out" / "grades.csv").is_file() and (tmp_path / "out" / "report.html").is_file()


@pytest.mark.slow
@pytest.mark.usefixtures("sandbox_required")
def test_a_worker_killed_mid_batch_loses_nothing_and_grades_nothing_twice(tmp_path, realistic):
    course, _, local = realistic
    with dask_cluster(tmp_path / "cluster", workers=2) as cluster:
        pids = cluster.worker_pids()
        victim = pids[sorted(pids)[0]]
        arrived = []

        def kill_a_worker_after_eight_results(result):
            arrived.append(result.student_id)
            if len(arrived) == 8:  # well inside the batch: 32 to go
                os.kill(victim, signal.SIGKILL)

        report = grade_on(cluster, course, tmp_path / "out", on_result=kill_a_worker_after_eight_results)
        assert victim not in cluster.worker_pids().values()  # it died (its nanny started another)
    graded = [r.student_id for r in report.graded]
    assert sorted(graded) == sorted(local) and len(set(graded)) == len(graded)  # each one exactly once
    assert stable(report.results) == local


@pytest.mark.slow
@pytest.mark.usefixtures("sandbox_required")
def test_a_client_killed_mid_batch_then_run_again_grades_only_what_is_missing(tmp_path, realistic):
    course, _, local = realistic
    out = tmp_path / "out"
    with dask_cluster(tmp_path / "cluster", workers=2) as cluster:
        client = subprocess.Popen([sys.executable, "-m", "autograder.cli", "grade", ASSIGNMENT,
                                   str(course / "submitted"), "--course", str(course), "--out", str(out),
                                   "--cluster", cluster.address, "--seed", str(SEED), "--timeout", "10"],
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 300
        while len(all_results(out)) < 6:
            assert client.poll() is None and time.monotonic() < deadline, "the client ended before it was killed"
            time.sleep(0.05)
        client.kill()  # kill -9, mid-batch
        client.wait()
        written = {r.student_id for r in all_results(out)}
        assert 6 <= len(written) < CLASS_SIZE
        report = grade_on(cluster, course, out)
    assert report.skipped == len(written)
    assert_only_the_rest_was_graded(report, local, written)


@pytest.mark.slow
@pytest.mark.usefixtures("sandbox_required")
def test_the_scheduler_killed_mid_batch_stops_with_one_message_and_a_rerun_grades_the_rest(tmp_path, realistic):
    course, _, local = realistic
    out = tmp_path / "out"
    with dask_cluster(tmp_path / "first", workers=2) as cluster:
        arrived = []

        def kill_the_scheduler_after_six_results(result):
            arrived.append(result.student_id)
            if len(arrived) == 6:
                os.kill(cluster.processes[0].pid, signal.SIGKILL)

        with pytest.raises(ClusterError, match="lost the Dask scheduler .* run the same command again"):
            grade_on(cluster, course, out, on_result=kill_the_scheduler_after_six_results)
    written = {r.student_id for r in all_results(out)}
    assert 6 <= len(written) < CLASS_SIZE
    with dask_cluster(tmp_path / "second", workers=2) as cluster:  # the scheduler restarted
        report = grade_on(cluster, course, out)
    assert_only_the_rest_was_graded(report, local, written)


@pytest.mark.slow
@pytest.mark.usefixtures("sandbox_required")
def test_a_submission_that_kills_its_worker_is_tried_twice_then_is_that_students_error(tmp_path):
    course = new_course(tmp_path)
    notebooks = {name: append_to_first_answer(example(name), f"# {name}\n") for name in ("ada", "ben", "cy", "dee")}
    notebooks["mallory"] = append_to_first_answer(example("ada"), "import time\ntime.sleep(60)\n")
    submit(course, ASSIGNMENT, notebooks)
    kills, stop = [], threading.Event()

    def kill_whoever_grades_mallory(cluster):
        """What an out-of-memory kill or a crash in native code does to the worker: once
        an attempt at mallory's notebook has started, the worker running it dies."""
        with cluster.client() as client:
            while not stop.is_set() and len(kills) < 2:
                for worker, keys in client.processing().items():
                    key = next((str(k) for k in keys if "-mallory-" in str(k)), None)
                    started = sum(list(message for _, message in events).count("start")
                                  for topic, events in client.get_events().items()
                                  if topic.startswith(ATTEMPTS_TOPIC) and key and topic.endswith(key))
                    if key and started > len(kills):
                        os.kill(client.run(os.getpid, workers=[worker])[worker], signal.SIGKILL)
                        kills.append(worker)
                time.sleep(0.1)

    with dask_cluster(tmp_path / "cluster", workers=2) as cluster:
        killer = threading.Thread(target=kill_whoever_grades_mallory, args=(cluster,))
        killer.start()
        try:
            report = grade_on(cluster, course, tmp_path / "out")
        finally:
            stop.set()
            killer.join()
    assert len(kills) == 2
    results = {r.student_id: r for r in report.results}
    assert sorted(results) == ["ada", "ben", "cy", "dee", "mallory"]
    assert results["mallory"].status == INVALID and results["mallory"].score == 0
    assert "die, twice" in results["mallory"].output
    assert all(results[name].status == GRADED for name in ("ada", "ben", "cy", "dee"))
    assert results["ada"].score == 26


@pytest.mark.slow
@pytest.mark.usefixtures("sandbox_required")
def test_a_worker_without_bubblewrap_refuses_by_name_and_nothing_is_written(tmp_path, course_copy):
    (tmp_path / "inbox").mkdir()
    write(tmp_path / "inbox", "ada", example("ada"))
    out = tmp_path / "out"
    worker_env = {"PATH": path_without_bwrap(tmp_path / "nobwrap")}
    with dask_cluster(tmp_path / "cluster", workers=1, worker_env=worker_env) as cluster:
        done = cli("grade", ASSIGNMENT, tmp_path / "inbox", "--course", course_copy, "--out", out,
                   "--cluster", cluster.address)
    text = " ".join(done.stdout.split())
    assert done.returncode == 2, done.stdout + done.stderr
    assert "the Dask worker tcp://127.0.0.1:" in text and "bubblewrap is not installed" in text
    assert "Traceback" not in done.stdout + done.stderr
    assert not out.exists()


@pytest.mark.slow
@pytest.mark.usefixtures("sandbox_required")
def test_a_tls_cluster_grades_with_certificates_and_refuses_a_client_without(tmp_path, course_copy):
    tls = make_certificates(tmp_path / "certs")
    (tmp_path / "inbox").mkdir()
    for name in ("ada", "ben", "cy", "dee"):
        write(tmp_path / "inbox", name, example(name))
    with dask_cluster(tmp_path / "cluster", workers=2, tls=tls) as cluster:
        assert cluster.address.startswith("tls://")
        refused = cli("grade", ASSIGNMENT, tmp_path / "inbox", "--course", course_copy,
                      "--out", tmp_path / "refused", "--cluster", cluster.address)
        graded = cli("grade", ASSIGNMENT, tmp_path / "inbox", "--course", course_copy,
                     "--out", tmp_path / "out", "--cluster", cluster.address, "--seed", str(SEED),
                     "--tls-ca-file", tls["ca"], "--tls-cert", tls["cert"], "--tls-key", tls["key"])
    assert refused.returncode != 0 and "Traceback" not in refused.stdout + refused.stderr
    assert "cannot reach the Dask scheduler at tls://" in " ".join(refused.stdout.split())
    assert not (tmp_path / "refused").exists()
    assert graded.returncode == 0, graded.stdout[-3000:] + graded.stderr[-3000:]
    scores = {r.student_id: r.score for r in all_results(tmp_path / "out")}
    assert scores == SCORES


@pytest.mark.slow
@pytest.mark.usefixtures("sandbox_required")
def test_local_workers_from_the_command_line(tmp_path, course_copy):
    (tmp_path / "inbox").mkdir()
    for name in ("ada", "ben"):
        write(tmp_path / "inbox", name, example(name))
    done = cli("grade", ASSIGNMENT, tmp_path / "inbox", "--course", course_copy,
               "--out", tmp_path / "out", "--cluster", "local:2")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "Dask scheduler tcp://127.0.0.1:" in done.stdout
    assert {r.student_id: r.score for r in all_results(tmp_path / "out")} == {"ada": 26.0, "ben": SCORES["ben"]}
