"""One submission cannot take the cores another student is graded on (issue 43).

The grader runs in a CPU cgroup of its own, as under a systemd unit, a container or a Slurm job.
A submission widens its CPU affinity to every core and starts busy processes; a student graded at
the same time on the other worker must keep its time. Each submission's cgroup holds it to its
worker's core (a cpuset) and one core's time (a quota): an affinity mask is something any process
may change, a cpuset is not. A security test: it never skips under CI.
"""
import contextlib
import json
import os
from pathlib import Path

import pytest

from autograder.grading import cgroups

from helpers import ASSIGNMENT, append_to_first_answer, cli, example, new_course, write

pytestmark = pytest.mark.usefixtures("sandbox_required")

STORM = """
import os, time
try:
    os.sched_setaffinity(0, set(range(os.cpu_count() or 2)))  # every core there is
except OSError:
    pass
end = time.monotonic() + 8  # long enough for the student beside it to be graded meanwhile
for _ in range(40):
    if os.fork() == 0:
        try:
            os.sched_setaffinity(0, set(range(os.cpu_count() or 2)))
        except OSError:
            pass
        while time.monotonic() < end:
            pass
        os._exit(0)
time.sleep(8)
"""
CALM = """
import time
time.sleep(8)
"""


@contextlib.contextmanager
def grader_cgroup():
    """A cpu and cpuset cgroup for a grader (v1 or v2, as this machine has): the paths of its
    cgroup.procs files, to write the grader's pid into."""
    ok, why = cgroups.cpu_available()
    assert ok, f"no CPU bound per submission on this machine: {why}"
    hierarchy = cgroups._probe[0]
    name = f"{cgroups.PREFIX}{os.getpid()}-grader-test"
    if hierarchy.v2:
        folders = [hierarchy.cpu / name]
    else:
        folders = [hierarchy.cpu / name, hierarchy.cpuset / name]
    try:
        for folder in folders:
            folder.mkdir()
        if not hierarchy.v2:
            for setting in ("cpuset.mems", "cpuset.cpus"):
                (hierarchy.cpuset / name / setting).write_text((hierarchy.cpuset / setting).read_text().strip())
        else:
            (folders[0] / "cgroup.subtree_control").write_text("+cpu +cpuset")
        yield [folder / "cgroup.procs" for folder in folders]
    finally:
        for folder in reversed(folders):
            with contextlib.suppress(OSError):
                folder.rmdir()


def grade_in(procs, course, notebooks, out):
    """`autograder grade --jobs 2` run inside the grader's cgroup: {student: result JSON}."""
    folder = course / out
    folder.mkdir()
    for student, notebook in notebooks.items():
        write(folder, student, notebook)

    def join():
        for path in procs:
            Path(path).write_text(str(os.getpid()))

    done = cli("grade", ASSIGNMENT, folder, "--course", course, "--jobs", 2, "--seed", 3, "--out", course / f"{out}-graded",
               "--timeout", 60, preexec_fn=join)
    assert done.returncode in (0, 1), done.stdout + done.stderr
    return {path.stem: json.loads(path.read_text()) for path in (course / f"{out}-graded").glob("*.json")}


@pytest.mark.slow
def test_a_submission_that_takes_every_core_leaves_the_student_beside_it_its_time(tmp_path):
    if (os.cpu_count() or 1) < 2:
        pytest.skip("one core: there is no other core to keep")
    course = new_course(tmp_path)
    ada = example("ada")
    # Two workers: the neighbour takes one for 8 s of its first cell, a short answer the other, and
    # ada is graded on that one after it, wholly while the neighbour is in that cell. The rounds differ
    # only in what the neighbour does there: it sleeps, or it storms. (Alone, ada would share nothing
    # of the grader with anyone, so her time alone would measure that sharing too, not the storm.)
    short = append_to_first_answer(ada, "import time\ntime.sleep(1)\n")
    times = {"calm": [], "storm": []}
    with grader_cgroup() as procs:
        for number, (kind, what) in enumerate([("calm", CALM), ("storm", STORM)] * 2):
            graded = grade_in(procs, course, {"a-neighbour": append_to_first_answer(ada, what), "b-short": short,
                                              "c-ada": ada}, f"{kind}{number}")
            assert graded["c-ada"]["score"] == 26 and graded["a-neighbour"]["extra_data"]["status"] == "graded"
            times[kind].append(graded["c-ada"]["execution_time"])
    # The least of two rounds each: the machine's other noise only adds time. Measured here: 1.16x
    # with the bound; 1.92x with each submission's cpuset widened to every core and no quota (CFS
    # still halves ada's core between her cgroup and the storm's, so 2x is about the most it shows).
    slower = min(times["storm"]) / min(times["calm"])
    print(f"ada beside the storm: {slower:.2f}x her time beside a calm classmate ({times})")
    assert slower <= 1.5, f"beside a storm of busy processes ada took {slower:.2f}x her time beside a calm classmate"


def test_each_cgroup_version_gets_its_cores_and_one_cores_time(tmp_path):
    """What the per-submission CPU bound writes, in cgroup v2 (one folder) and v1 (a cpu and a
    cpuset hierarchy), into folders standing in for the kernel's."""
    v2 = cgroups.Hierarchy(tmp_path / "unified", tmp_path / "unified", v2=True, cpu=tmp_path / "unified",
                           cpuset=tmp_path / "unified")
    (tmp_path / "unified" / "sub").mkdir(parents=True)
    cgroups._bound_cpu(v2, "sub", {3, 1})
    assert (tmp_path / "unified" / "sub" / "cpuset.cpus").read_text() == "1,3"
    assert (tmp_path / "unified" / "sub" / "cpu.max").read_text() == "100000 100000"
    v1 = cgroups.Hierarchy(tmp_path / "memory", tmp_path / "pids", v2=False, cpu=tmp_path / "cpu",
                           cpuset=tmp_path / "cpuset")
    for folder in ("cpu/sub", "cpuset/sub"):
        (tmp_path / folder).mkdir(parents=True)
    (tmp_path / "cpuset" / "cpuset.mems").write_text("0\n")
    cgroups._bound_cpu(v1, "sub", {0})
    assert (tmp_path / "cpuset" / "sub" / "cpuset.cpus").read_text() == "0"
    assert (tmp_path / "cpuset" / "sub" / "cpuset.mems").read_text() == "0"  # v1 takes no task without it
    assert (tmp_path / "cpu" / "sub" / "cpu.cfs_quota_us").read_text() == "100000"


def test_without_cpu_controllers_the_ta_is_told_what_goes_unbounded(monkeypatch, tmp_path):
    hierarchy = cgroups.Hierarchy(tmp_path, tmp_path, v2=True, cpu_why="the cpu and cpuset controllers are not"
                                                                      " delegated to /sys/fs/cgroup/x (Permission denied)")
    monkeypatch.setattr(cgroups, "_probe", (hierarchy, None))
    assert cgroups.cpu_available() == (False, hierarchy.cpu_why)
    notes = cgroups.bound_notes()
    assert len(notes) == 1 and "every core the grader may" in notes[0] and "Delegate" in notes[0]
