"""`autograder grade` end to end: hostile submissions, bad files, resuming, outputs."""
import csv
import hashlib
import json
import signal
import subprocess
import sys
import time

import nbformat
import pytest

from autograder.runs.batch import grade_batch
from autograder.record import Result

from attacks import ACL, INODES, KEYS, MEMFD, PTRACE, SCHEDULE
from helpers import (SCORES, EXAMPLES, ROOT, append_to_first_answer, assignment_of, cli, example, make_gradebook, make_notebook,
                     new_course, scores, settled_sandbox_processes, write)

needs_bwrap = pytest.mark.usefixtures("sandbox_required")

WRONG = EXAMPLES["ben"]  # softmax over dim=1 in Ex3, sqrt(d_out) in Ex6: SCORES["ben"] of 26
SEED = 1234


def ben_plus(after=None, edits=None):
    """ben's wrong answers plus an attack."""
    return make_notebook({**WRONG, **(edits or {})}, after=after)


STEAL = f"""
import glob, os
for pattern in [{str(ROOT)!r} + "/solutions/*.py", "/work/*/solutions/*.py", "../../solutions/*.py",
                "/**/solutions/causal_attention.py"]:
    for path in glob.glob(pattern, recursive=True):
        exec(open(path).read())
"""
TAMPER_OUTPUTS = f"""
import glob, json, sqlite3
for path in glob.glob({str(ROOT)!r} + "/**/*.json", recursive=True) + glob.glob("/**/graded/**/*.json", recursive=True):
    try:
        open(path, "w").write(json.dumps({{"score": 30}}))
    except OSError:
        pass
for path in glob.glob("/**/gradebook.db", recursive=True):
    try:
        sqlite3.connect(path).execute("update grade set auto_score = 30")
    except Exception:
        pass
"""
SCRAPE = """
import sys, torch
_forward = CausalAttention.forward
def forward(self, x):
    frame = sys._getframe(1)
    while frame is not None:
        for value in frame.f_locals.values():
            if isinstance(value, torch.Tensor) and value.shape[:-1] == x.shape[:-1] and value.shape[-1] == self.d_out:
                return value
        frame = frame.f_back
    return _forward(self, x)
CausalAttention.forward = forward
"""
FORGE = """
import os, stat, struct
for fd in range(3, 64):
    try:
        if stat.S_ISSOCK(os.fstat(fd).st_mode):
            body = b'J["ran", [1]]'
            os.write(fd, struct.pack(">Q", len(body)) + body)
    except OSError:
        pass
"""
REPLY_BOMBS = """
import torch
import autograder.wire as wire
_dump = wire.dump_reply
def _bomb(message):
    nested = [torch.zeros(1)]
    for _ in range(18):
        nested = [nested] * 10
    if message[0] == "ok" and isinstance(message[1], torch.Tensor):
        return _dump(("ok", torch.zeros(1).expand(10**10)))
    return _dump(("ok", nested))
wire.dump_reply = _bomb
"""
POISON_PYTHON = """
import os, site, sys, tempfile
patch = "import torch\\ntorch.equal = lambda *a, **k: True\\ntorch.allclose = lambda *a, **k: True\\n"
folders = {*sys.path, *site.getsitepackages(), site.getusersitepackages(), sys.prefix, "/", "/etc/jupyter",
           tempfile.gettempdir(), os.path.expanduser("~"), os.path.expanduser("~/.jupyter"), "/root/.jupyter"}
for folder in folders:
    for name, text in (("sitecustomize.py", patch), ("usercustomize.py", patch), ("zz-poison.pth", "import sitecustomize\\n"),
                       ("nbgrader_config.py", "c = get_config()\\n"), ("jupyter_nbconvert_config.py", "c = get_config()\\n")):
        try:
            os.makedirs(folder, exist_ok=True)
            open(os.path.join(folder, name), "w").write(text)
        except (OSError, TypeError):
            pass
"""
FILL_SCRATCH = """
for place in ("/tmp", "/dev/shm", os.path.expanduser("~")):
    for index in range(200):
        try:
            open(os.path.join(place, f"fill{index}"), "wb").write(b"x" * 8 * 2**20)
        except OSError:
            break
"""
JSON_BOMB = """
import autograder.wire as wire
wire.dump_reply = lambda message: [b"J[" + b"0," * (30 * 2**20) + b"0]"]
"""
ATTACKS = {
    "patch_allclose": {"ex1_answer": "import torch\ntorch.allclose = lambda *a, **k: True\n"
                                     "torch.testing.assert_close = lambda *a, **k: None\ntorch.equal = lambda *a, **k: True"},
    "subclass_eq": {"ex3_answer": "class Liar(torch.Tensor):\n    def __eq__(self, other):\n        return True\n"
                                  "_f = CausalAttention.forward\n"
                                  "CausalAttention.forward = lambda self, x: _f(self, x).as_subclass(Liar)"},
    "always_equal": {"ex2_answer": "class Same:\n    def __eq__(self, other):\n        return True\n"
                                   "mask_before_softmax = lambda *a, **k: Same()"},
    "os_exit": {"ex3_answer": "import os\nCausalAttention.forward = lambda self, x: os._exit(0)"},
    "sys_exit": {"ex3_answer": "import sys\nCausalAttention.forward = lambda self, x: sys.exit(0)"},
    "keyboard_interrupt": {"ex3_answer": "def _stop(self, x):\n    raise KeyboardInterrupt\nCausalAttention.forward = _stop"},
    "system_exit": {"ex3_answer": "def _stop(self, x):\n    raise SystemExit(1)\nCausalAttention.forward = _stop"},
    "input_transformer": {"ex1_answer": "get_ipython().input_transformers_cleanup.append(lambda lines: ['pass\\n'])"},
    "steal_solutions": {"ex8_data_answer": STEAL},
    "write_outputs": {"ex1_answer": TAMPER_OUTPUTS},
    "startup_files": {"ex1_answer": "import os\np = os.path.expanduser('~/.ipython/profile_default/startup')\n"
                                    "os.makedirs(p, exist_ok=True)\nopen(p + '/0.py', 'w').write('import torch\\ntorch.softmax = None')\n"
                                    "open('sitecustomize.py', 'w').write('import torch\\ntorch.softmax = None')"},
    "env_detect": {"ex1_answer": "import os\nif any('grad' in k.lower() for k in os.environ):\n    exec(open('/work/main/solutions/causal_attention.py').read())"},
    "frame_scrape": {"ex3_answer": SCRAPE},
    "endless_loop": {"ex6_answer": "_g = MultiHeadAttentionOneModule.forward\n"
                                   "def _slow(self, x):\n    while True:\n        pass\n"
                                   "MultiHeadAttentionOneModule.forward = _slow"},
    "memory_bomb": {"ex1_answer": "hog = []\ntry:\n    while True:\n        hog.append(bytearray(2**28))\nexcept MemoryError:\n    pass"},
    "fork_bomb": {"ex2_answer": "import os\ntry:\n    while True:\n        os.fork()\nexcept OSError:\n    pass"},
    "flood_output": {"ex1_answer": "for _ in range(200):\n    print('x' * 2**20)"},
    "network": {"ex1_answer": "import socket\ntry:\n    socket.create_connection(('1.1.1.1', 80), timeout=2)\nexcept OSError:\n    pass"},
    "background_process": {"ex1_answer": "import subprocess\nsubprocess.Popen(['sleep', '600'], start_new_session=True)"},
    "forged_frames": {"ex1_answer": FORGE},
    "reply_bombs": {"ex8_data_answer": REPLY_BOMBS},
    "leftovers": {"ex1_answer": "import os, ctypes\nos.makedirs('locked/inner')\nos.chmod('locked', 0)\n"
                                "ctypes.CDLL(None).shmget(1234, 4096, 0o1666)"},
    "poison_python": {"ex1_answer": POISON_PYTHON},
    "fill_scratch": {"ex1_answer": FILL_SCRATCH},
    "json_bomb": {"ex8_data_answer": JSON_BOMB},
    # Text that is not valid Unicode (a lone surrogate) in an error the grader shows: it
    # used to stop the whole batch when the feedback page or notebook was written.
    # A world of its own per submission (see test_isolation.py): none of these reaches the
    # students graded after it on the same worker.
    "set_acl": {"ex1_answer": ACL},
    "trace_others": {"ex1_answer": PTRACE},
    "plant_keys": {"ex1_answer": KEYS},
    "lower_priority": {"ex1_answer": SCHEDULE},
    "memory_files": {"ex1_answer": MEMFD},
    "inode_flood": {"ex1_answer": INODES},
    "lone_surrogate": {"ex1_answer": "raise ValueError(b'\\xff odd'.decode('utf-8', 'surrogateescape'))",
                       "ex3_answer": "def _odd(self, x):\n    raise ValueError(b'\\xfe'.decode('utf-8', 'surrogateescape'))\n"
                                     "CausalAttention.forward = _odd"},
}


def tree_digest(*folders):
    digest = hashlib.sha256()
    for folder in folders:
        for path in sorted(p for p in folder.rglob("*") if p.is_file() and "__pycache__" not in p.parts):
            digest.update(str(path).encode() + path.read_bytes())
    return digest.hexdigest()


@pytest.fixture(scope="module")
def hostile(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("hostile")
    course = new_course(tmp)
    inbox = tmp / "inbox"
    inbox.mkdir()
    for name, cells in ATTACKS.items():
        write(inbox, name, ben_plus(after=cells))
    write(inbox, "ben", example("ben"))
    write(inbox, "zz_ada", example("ada"))  # graded after the attacks on the same workers
    write(inbox, "zz_dee", example("dee"))
    guarded = [ROOT / "solutions", ROOT / "exercises", ROOT / "autograder", ROOT / "source", ROOT / "release",
               course / "source", course / "exercises"]
    before = tree_digest(*guarded)
    marker = tmp / "started"
    marker.touch()
    time.sleep(0.01)
    report = grade_batch(assignment_of(course), [inbox], jobs=2, seed=SEED,
                         limits={"timeout": 20, "memory_bytes": 2 * 2**30})
    return {"report": report, "course": course, "before": before, "after": tree_digest(*guarded),
            "results": {r.student_id: r for r in report.results},
            "changed": changed_since(marker, outputs=[course / "graded", course / "autograded",
                                                      course / "gradebook.db"])}


# What a batch may change besides its outputs: caches and logs of the system and of tools.
SYSTEM_CACHES = ("/proc/", "/sys/", "/dev/", "/run/", "/var/log/", "/var/cache/", "/var/lib/",
                 "/root/.cache/", "/root/.config/matplotlib/", "/root/.local/share/jupyter/runtime/")
# Written by others while the test runs: the development machine's shell tool keeps each
# command's output there (a developer's command during a CI run made this test fail).
OTHER_ACTIVITY = ("/tmp/bash_jobs.", "/tmp/bash_tool_")


def changed_since(marker, outputs):
    """Every file or folder on this machine created or changed after `marker`, except the outputs
    (and this process's multiprocessing folder, where the workers' fork server keeps its socket
    until this process ends: the `grade` command removes it, see test_a_grade_run_leaves_...)."""
    from multiprocessing import util

    found = subprocess.run(["find", "/", "-xdev", "-newer", str(marker), "-not", "-type", "d"],
                           capture_output=True, text=True).stdout.splitlines()
    outputs = [str(o) for o in [*outputs, util.get_temp_dir()]]
    return sorted(path for path in found
                  if not path.startswith(SYSTEM_CACHES + OTHER_ACTIVITY) and "/__pycache__/" not in path
                  and not any(path == o or path.startswith(o + "/") for o in outputs))


@pytest.mark.slow
@needs_bwrap
@pytest.mark.parametrize("attack", sorted(ATTACKS))
def test_an_attack_gains_nothing(hostile, attack):
    results = hostile["results"]
    assert results[attack].status == "graded"
    assert results[attack].score <= results["ben"].score, results[attack].output


def feedback_text(result):
    """Everything the student reads about this result."""
    return json.dumps(result.to_json())


@pytest.mark.slow
@needs_bwrap
def test_attacks_harm_no_one_else(hostile):
    results = hostile["results"]
    assert results["ben"].score == SCORES["ben"]
    assert results["zz_ada"].score == 26 and results["zz_dee"].score == 0
    assert hostile["before"] == hostile["after"]  # course files, checks and solutions untouched
    out = hostile["report"].out_dir
    for student, result in results.items():  # every results file is the grader's own
        assert Result.from_json(json.loads((out / f"{student}.json").read_text())) == result
    assert not settled_sandbox_processes(0)


@pytest.mark.slow
@needs_bwrap
def test_attacks_leave_no_file_behind_outside_the_outputs(hostile):
    """The whole attack collection, graded: nothing on this machine changed but the batch's
    outputs (and system caches), and a fresh Python's comparisons are still torch's own."""
    assert hostile["changed"] == []
    fresh = subprocess.run([sys.executable, "-c", "from autograder.grading import selfcheck; selfcheck.verify(); print('ok')"],
                           capture_output=True, text=True)
    assert fresh.stdout.strip() == "ok", fresh.stdout + fresh.stderr
    results = hostile["results"]
    assert "not plain data" in feedback_text(results["json_bomb"])


@pytest.mark.slow
@needs_bwrap
def test_attacks_are_explained_to_the_student(hostile):
    results = hostile["results"]
    assert "time limit" in feedback_text(results["endless_loop"])
    assert "ended or crashed" in feedback_text(results["os_exit"])
    assert "reached the 2 GiB of memory a submission may use" in feedback_text(results["memory_files"])
    page = (hostile["report"].out_dir / "feedback" / "lone_surrogate.html").read_text(encoding="utf-8")
    assert "\ufffd odd" in page  # shown, as the replacement character


# -- bad files ------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def bad_batch(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("bad")
    course = new_course(tmp)
    inbox = tmp / "inbox"
    inbox.mkdir()
    (inbox / "empty.ipynb").write_text("")
    (inbox / "garbage.ipynb").write_text("{not json")
    (inbox / "list.ipynb").write_text("[1, 2, 3]")
    (inbox / "old.ipynb").write_text(json.dumps({"nbformat": 3, "nbformat_minor": 0, "worksheets": [], "metadata": {}}))
    (inbox / "huge.ipynb").write_text(json.dumps({"nbformat": 4, "padding": "x" * (21 * 2**20)}))
    broken = example("ada")
    broken.cells[3]["cell_type"] = "banana"
    (inbox / "schema.ipynb").write_text(json.dumps(broken))
    tampered = example("ada")
    for cell in tampered.cells:
        grade_id = cell.metadata.get("nbgrader", {}).get("grade_id")
        if grade_id == "check-03":
            cell.source = "pass  # I removed the visible test"
        if grade_id == "ex3":
            cell.metadata.nbgrader.points = 50
    tampered.cells = [c for c in tampered.cells if c.metadata.get("nbgrader", {}).get("grade_id") != "ex5_answer"]
    write(inbox, "tampered", tampered)
    write(inbox, "ada", example("ada"))
    report = grade_batch(assignment_of(course), [inbox], jobs=2, seed=SEED)
    return {r.student_id: r for r in report.results}


@pytest.mark.parametrize("student, words", [
    ("empty", "empty"), ("garbage", "not valid JSON"), ("list", "not a Jupyter notebook"),
    ("old", "format version 3"), ("huge", "limit"), ("schema", "damaged"),
])
def test_a_bad_file_gets_zero_and_a_clear_message(bad_batch, student, words):
    result = bad_batch[student]
    assert result.status == "invalid"
    assert result.score == 0 and words in result.output


def test_tampering_is_restored_and_recorded(bad_batch):
    result = bad_batch["tampered"]
    notes = " ".join(result.notes)
    assert "check-03 was edited" in notes and "metadata of cell ex3" in notes and "ex5_answer was deleted" in notes
    assert result.max_score == 26
    assert scores(result)["ex3"] == 5 and scores(result)["ex5"] == 0  # the deleted answer counts as missing
    assert bad_batch["ada"].score == 26


# -- outputs, resuming ------------------------------------------------------------------------
def descendants(root):
    """{pid: command} of every process below `root` now."""
    out = subprocess.run(["ps", "-ww", "-eo", "pid=,ppid=,args="], capture_output=True, text=True).stdout
    rows = [line.split(None, 2) for line in out.splitlines()]
    children = {}
    for pid, ppid, *command in rows:
        children.setdefault(int(ppid), []).append((int(pid), command[0] if command else ""))
    found, frontier = {}, [root]
    while frontier:
        for pid, command in children.get(frontier.pop(), []):
            found[pid] = command
            frontier.append(pid)
    return found


def still_running(pids, timeout=10):
    """Those of `pids` still alive (zombies are not) once they had `timeout` seconds to end."""
    deadline = time.monotonic() + timeout
    while True:
        alive = []
        for pid in pids:
            try:
                with open(f"/proc/{pid}/stat") as stat:
                    if stat.read().rsplit(")", 1)[1].split()[0] != "Z":
                        alive.append(pid)
            except OSError:
                pass
        if not alive or time.monotonic() > deadline:
            return alive
        time.sleep(0.1)


@pytest.mark.slow
@needs_bwrap
def test_kill_9_mid_batch_then_rerun_grades_everything_exactly_once(tmp_path):
    course = new_course(tmp_path)
    inbox = tmp_path / "inbox"
    inbox.mkdir()
    kinds = ["ada", "ben", "cy", "dee"]
    notebooks = {kind: example(kind) for kind in kinds}
    reference = tmp_path / "uninterrupted"
    reference.mkdir()
    for kind in kinds:
        write(reference, kind, notebooks[kind])
    uninterrupted = grade_batch(assignment_of(new_course(reference)), [reference], jobs=2, seed=SEED)
    expected = {r.student_id: r.score for r in uninterrupted.results}
    assert expected["ada"] == 26 and 0 < expected["ben"] < 26 and expected["dee"] == 0
    for index in range(100):
        kind = kinds[index % 4]  # each with answers of its own: all run
        write(inbox, f"s{index:03d}_{kind}", append_to_first_answer(notebooks[kind], f"# {index}\n"))
    out = tmp_path / "out"
    command = [sys.executable, "-m", "autograder.cli", "grade", "causal_attention", str(inbox),
               "--course", str(course), "--out", str(out), "--jobs", "2", "--seed", str(SEED)]
    first = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and len(list(out.glob("s*.json"))) < 30:
        time.sleep(0.1)
    family = descendants(first.pid)  # its fork server, workers, sandboxes and their children
    assert any("forkserver" in command for command in family.values()) and len(family) >= 5, family
    first.send_signal(signal.SIGKILL)
    first.wait()
    time.sleep(1)
    assert not settled_sandbox_processes(0)  # workers and sandboxes died with the grader
    assert not still_running(family), {pid: family[pid][:80] for pid in still_running(family, 0)}
    done_before = {p.name: p.read_bytes() for p in out.glob("s*.json")}
    assert 30 <= len(done_before) < 100
    second = subprocess.run(command, capture_output=True, text=True)
    assert second.returncode == 0, second.stdout[-2000:]
    assert f"graded {100 - len(done_before)}," in second.stdout.replace("\n", " ")
    for name, content in done_before.items():
        assert (out / name).read_bytes() == content  # not graded a second time
    rows = list(csv.DictReader(open(out / "grades.csv")))
    assert len(rows) == 100
    for row in rows:
        assert float(row["total"]) == expected[row["student_id"].split("_")[1]], row
    exported = subprocess.run([sys.executable, "-m", "nbgrader", "export"], cwd=course, capture_output=True, text=True)
    assert exported.returncode == 0, exported.stderr[-2000:]
    grades = {r["student_id"]: float(r["raw_score"]) for r in csv.DictReader(open(course / "grades.csv"))}
    assert len(grades) == 100 and grades["s000_ada"] == 26 and grades["s001_ben"] == SCORES["ben"]


@pytest.mark.slow
@needs_bwrap
def test_a_grade_run_leaves_nothing_in_the_temporary_folder(tmp_path):
    """`grade` ends without Python's tear-down, which would have removed multiprocessing's
    folder with the fork server's socket; it removes that folder itself (it used to leave one
    pymp-* folder in /tmp per run). Nothing else it made there is left either."""
    import os

    course = make_gradebook(new_course(tmp_path))  # as generate_assignment leaves it (and 3 s faster)
    (tmp_path / "in").mkdir()
    for kind in ("ada", "ben"):
        write(tmp_path / "in", kind, example(kind))
    temporary = tmp_path / "tmp"
    temporary.mkdir()
    done = cli("grade", "causal_attention", tmp_path / "in", "--course", course, "--jobs", "2", "--seed", SEED,
               env={**os.environ, "TMPDIR": str(temporary)})
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert "graded 2," in done.stdout.replace("\n", " ")
    left = None
    for _ in range(50):  # the fork server leaves once the grader has gone: give it up to 5 s
        left = sorted(p.name for p in temporary.iterdir())
        if not left:
            break
        time.sleep(0.1)
    assert left == []


@needs_bwrap
def test_workers_come_from_one_torch_import_and_adopt_sandboxes_launched_for_them(tmp_path):
    """The grader launches each worker's first sandbox and a fork server imports torch once;
    workers are forked from it and adopt the sandboxes. A run of identical answers leaves the
    second worker idle: its launched sandbox is closed all the same, and nothing is left."""
    import os
    from multiprocessing import forkserver

    from autograder.grading.scheduler import LocalScheduler

    course = new_course(tmp_path)
    (tmp_path / "in").mkdir()
    for index in range(3):
        write(tmp_path / "in", f"twin{index}", example("ada"))  # one runs, two are copies
    scheduler = LocalScheduler(2)
    launched, errors = [], []
    start = scheduler.start

    def start_and_remember(spec, count):
        start(spec, count)
        launched.extend(scheduler.launched)
        errors.extend(sandbox.stderr_path for sandbox in scheduler.launched)

    scheduler.start = start_and_remember
    report = grade_batch(assignment_of(course), [tmp_path / "in"], scheduler=scheduler, seed=SEED)
    assert sorted(r.score for r in report.graded) == [26, 26, 26]
    assert sum(r.reused for r in report.graded) == 2
    assert [sandbox.slot for sandbox in launched] == [0, 1]  # one per worker, launched by the grader
    assert all(sandbox.process is None for sandbox in launched)  # closed and reaped here
    assert len(errors) == 2 and not [path for path in errors if os.path.exists(path)]  # adopted, then removed
    assert not settled_sandbox_processes(0)
    server = forkserver._forkserver._forkserver_pid
    with open(f"/proc/{server}/maps") as maps:
        assert "libtorch" in maps.read()  # torch was imported once, there, before the workers were forked


def test_one_notebook_per_student_is_graded_and_the_others_are_named(tmp_path):
    course = new_course(tmp_path)
    folder = tmp_path / "submitted" / "dup" / "causal_attention"
    folder.mkdir(parents=True)
    nbformat.write(example("ada"), folder / "causal_attention.ipynb")
    nbformat.write(example("dee"), folder / "causal_attention-Copy1.ipynb")
    for _ in range(2):  # the second run finds it done: no flip-flopping between the two files
        report = grade_batch(assignment_of(course), [tmp_path / "submitted"], jobs=1, seed=SEED)
    assert report.skipped == 1 and len(report.results) == 1
    result = report.results[0]
    assert result.score == 26
    assert "causal_attention-Copy1.ipynb" in " ".join(result.notes)


@pytest.mark.slow
@needs_bwrap
def test_a_changed_check_regrades_with_a_record_of_whose_score_moved(tmp_path):
    """Change how one check counts, regrade: changes.csv lists exactly the students whose
    score moved, and the results they had are still on disk."""
    course = new_course(tmp_path)
    inbox = tmp_path / "inbox"
    inbox.mkdir()
    for kind in ("ada", "ben", "cy", "dee"):
        write(inbox, kind, example(kind))
    first = grade_batch(assignment_of(course), [inbox], jobs=2, seed=SEED)
    before = {r.student_id: r.score for r in first.results}
    check = course / "exercises" / "causal_attention" / "checks" / "test_ex3.py"
    text = check.read_text()
    marker = '@pytest.mark.weight(2)\n@pytest.mark.parametrize("tokens", [12, 5], ids=["full", "short"])'
    assert marker in text
    check.write_text(text.replace(marker, marker.replace("weight(2)", "weight(6)")))
    second = grade_batch(assignment_of(course), [inbox], jobs=2, seed=SEED, force=True)
    after = {r.student_id: r.score for r in second.results}
    moved = sorted(s for s in before if before[s] != after[s])
    assert moved == ["ben"]  # the only one with part of Exercise 3 right and part wrong
    rows = list(csv.DictReader(open(second.out_dir / "changes.csv")))
    assert [r["student_id"] for r in rows] == moved
    assert float(rows[0]["old_score"]) == before["ben"] and float(rows[0]["new_score"]) == after["ben"]
    kept = next((second.out_dir / "history").iterdir())
    assert sorted(p.name for p in kept.glob("*.json")) == ["ada.json", "ben.json", "cy.json", "dee.json"]
    assert json.loads((kept / "ben.json").read_text())["score"] == before["ben"]
