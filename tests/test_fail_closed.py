"""No student code without a sandbox (unless the TA says so), never as the grader's user,
and no grading on an interpreter whose comparisons someone has patched."""
import csv
import json
import os
import subprocess
import sys
import venv

import pytest

from autograder.grading import selfcheck

from helpers import SCORES, EXAMPLES, ROOT, cli, example, make_gradebook, make_notebook, new_course, path_without_bwrap, write

ASSIGNMENT = "causal_attention"
pytestmark = pytest.mark.usefixtures("sandbox_required")  # root, and a real bubblewrap to hide


@pytest.fixture(scope="module")
def no_bwrap(tmp_path_factory):
    """The environment of a machine without bubblewrap."""
    return {**os.environ, "PATH": path_without_bwrap(tmp_path_factory.mktemp("nobwrap") / "bin")}


def tree(folder):
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*"))


def test_without_bubblewrap_grade_demo_serve_and_gradescope_refuse_before_running_anything(tmp_path, no_bwrap):
    course = new_course(tmp_path)
    inbox = tmp_path / "inbox"
    inbox.mkdir()
    write(inbox, "ada", example("ada"))
    before = tree(course)
    graded = cli("grade", ASSIGNMENT, inbox, "--course", course, env=no_bwrap)
    demo = cli("demo", "--course", course, env=no_bwrap)
    served = cli("serve", ASSIGNMENT, "--course", course, "--port", "1", env=no_bwrap, timeout=120)
    for done in (graded, demo, served):
        assert done.returncode == 2, done.stdout[-2000:] + done.stderr[-2000:]
        text = " ".join(done.stdout.split())
        assert "Refusing to run student code" in text and "bubblewrap is not installed" in text
        assert "apt-get install -y bubblewrap" in text and "--unsafe-no-sandbox" in text
        assert "Traceback" not in done.stdout + done.stderr
    assert tree(course) == before  # no results, no gradebook, no example submissions
    root = tmp_path / "gradescope"
    (root / "submission").mkdir(parents=True)
    write(root / "submission", ASSIGNMENT, example("ada"))
    gradescope = subprocess.run([sys.executable, "-m", "autograder.runs.gradescope", ASSIGNMENT, "--root", root],
                                capture_output=True, text=True, env=no_bwrap, timeout=300)
    assert gradescope.returncode == 2 and "Refusing to run student code" in gradescope.stderr
    assert not (root / "results").exists()


# What a notebook tries to write when it can run outside a sandbox (the harmless text is
# enough to show that nothing got there).
ESCAPE = """
import glob, os, site, sys, tempfile
targets = []
for folder in {*sys.path, *site.getsitepackages(), site.getusersitepackages(), sys.prefix, sys.base_prefix}:
    if folder and not folder.endswith(".zip"):
        targets += [os.path.join(folder, n) for n in ("sitecustomize.py", "usercustomize.py", "zz-escape.pth")]
for folder in ["/", tempfile.gettempdir(), "/tmp", "/var/tmp", "/dev/shm", "/etc/jupyter", "/usr/local/etc/jupyter",
               "/root/.jupyter", os.path.expanduser("~/.jupyter"), OTHER, COURSE, COURSE + "/graded/causal_attention"]:
    targets += [os.path.join(folder, n) for n in ("nbgrader_config.py", "jupyter_nbconvert_config.py")]
targets += [OTHER + "/ada.ipynb", OTHER + "/escape.ipynb", COURSE + "/gradebook.db", COURSE + "/solutions.py"]
written = []
for path in targets:
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "a") as handle:
            handle.write("# written by a test notebook that should have been stopped\\n")  # MARK
        written.append(path)
    except OSError:
        pass
"""


MARK = b"written by a test notebook"


def test_with_the_flag_as_root_student_code_writes_nothing_outside_its_own_scratch(tmp_path, no_bwrap):
    course = make_gradebook(new_course(tmp_path))  # (one the notebook must not write to either)
    inbox = tmp_path / "inbox"
    inbox.mkdir()
    code = ESCAPE.replace("OTHER", repr(str(inbox))).replace("COURSE", repr(str(course)))
    write(inbox, "escape", make_notebook(after={"ex1_answer": code}))
    write(inbox, "ada", example("ada"))
    other = (inbox / "ada.ipynb").read_bytes()
    targets = subprocess.run([sys.executable, "-c", ESCAPE.replace("OTHER", repr(str(inbox))).replace(
        "COURSE", repr(str(course))).replace("open(path, \"a\")", "open(os.devnull, \"a\")").replace(
        "os.makedirs(os.path.dirname(path), exist_ok=True)", "pass") + "\nprint('\\n'.join(targets))"],
        capture_output=True, text=True).stdout.split()
    existed = {path: open(path, "rb").read() for path in targets if os.path.exists(path)}
    done = cli("grade", ASSIGNMENT, inbox, "--course", course, "--jobs", "1", "--unsafe-no-sandbox", env=no_bwrap)
    assert done.returncode == 0, done.stdout[-3000:]
    assert "WITHOUT a sandbox" in done.stdout
    leaked = [path for path in targets if os.path.exists(path) and MARK in open(path, "rb").read()
              and open(path, "rb").read() != existed.get(path)]  # (the grader itself writes gradebook.db)
    assert not leaked, leaked
    assert (inbox / "ada.ipynb").read_bytes() == other
    assert len(targets) > 40 and any("site-packages/sitecustomize.py" in t for t in targets)
    out = course / "graded" / ASSIGNMENT
    rows = {r["student_id"]: r for r in csv.DictReader(open(out / "grades.csv"))}
    assert float(rows["ada"]["total"]) == 26 and rows["ada"]["sandbox"] == "NONE (--unsafe-no-sandbox)"
    assert json.loads((out / "ada.json").read_text())["extra_data"]["sandbox"] == "none"
    assert "graded without the grader" in (out / "feedback" / "ada.html").read_text()
    assert "WITHOUT a sandbox" in (out / "report.html").read_text()


@pytest.mark.slow
def test_a_poisoned_interpreter_refuses_to_grade_and_names_the_file(tmp_path):
    env_dir = tmp_path / "poisoned-env"
    venv.EnvBuilder(system_site_packages=True, with_pip=False).create(env_dir)
    python = env_dir / "bin" / "python"
    site_dir = subprocess.run([python, "-c", "import site; print(site.getsitepackages()[0])"],
                              capture_output=True, text=True, check=True).stdout.strip()
    poison = os.path.join(site_dir, "sitecustomize.py")
    with open(poison, "w") as handle:
        handle.write("import torch\ntorch.equal = lambda *a, **k: True\ntorch.allclose = lambda *a, **k: True\n")
    course = new_course(tmp_path)
    inbox = tmp_path / "inbox"
    inbox.mkdir()
    write(inbox, "ada", example("ada"))
    done = cli("grade", ASSIGNMENT, inbox, "--course", course, python=python, timeout=300)
    assert done.returncode == 2, done.stdout[-2000:]
    text = "".join(done.stdout.split())
    assert "tamperedwith" in text and "".join(poison.split()) in text
    assert not (course / "graded").exists()
    os.remove(poison)
    pth = os.path.join(site_dir, "zz-poison.pth")
    with open(pth, "w") as handle:
        handle.write("import os; os.environ.setdefault('POISONED', '1')\n")
    done = cli("grade", ASSIGNMENT, inbox, "--course", course, python=python, timeout=300)
    assert done.returncode == 2 and "zz-poison.pth" in "".join(done.stdout.split())
    trusted = {**os.environ, selfcheck.TRUSTED_ENV: os.environ.get(selfcheck.TRUSTED_ENV, "") + os.pathsep + pth}
    done = cli("grade", ASSIGNMENT, inbox, "--course", course, python=python, timeout=600, env=trusted)
    assert done.returncode == 0, done.stdout[-2000:]  # a TA may trust a startup file by name
    # ... or record it as it is (setup.sh does, on a fresh machine): changed later, it is suspect again.
    config = {**os.environ, "XDG_CONFIG_HOME": str(tmp_path / "config")}
    recorded = cli("trust-startup-files", python=python, env=config)
    assert "zz-poison.pth" in "".join(recorded.stdout.split())
    check = [python, "-c", "from autograder.grading import selfcheck; print(selfcheck.startup_file_problems())"]
    assert "zz-poison" not in subprocess.run(check, capture_output=True, text=True, env=config).stdout
    with open(pth, "a") as handle:
        handle.write("import os\n")
    assert "zz-poison" in subprocess.run(check, capture_output=True, text=True, env=config).stdout
    # A trusted file that patches torch after all: the workers' own check of the comparisons
    # stops the batch before any result is written.
    with open(os.path.join(site_dir, "zzpoison.py"), "w") as handle:
        handle.write(LATE_PATCH)
    with open(pth, "w") as handle:
        handle.write("import zzpoison\n")
    out = tmp_path / "out"
    done = cli("grade", ASSIGNMENT, inbox, "--course", course, "--out", out, python=python, timeout=600, env=trusted)
    text = "".join(done.stdout.split())
    assert done.returncode == 2 and "wasreplacedbycodefrom" in text, done.stdout[-2000:]
    assert "zzpoison.py" in text and not [p for p in out.glob("*.json") if not p.name.startswith(".")]


# Patches torch as soon as it is imported (a .pth file runs before torch can be imported).
LATE_PATCH = """
import builtins, sys
_real_import = builtins.__import__
def _import(name, *args, **kwargs):
    module = _real_import(name, *args, **kwargs)
    importer = ((args[0] if args else None) or {}).get("__name__", "")
    torch = sys.modules.get("torch")
    if name == "torch" and not importer.startswith("torch") and not hasattr(torch, "_poisoned"):
        torch._poisoned = True
        torch.equal = lambda *a, **k: True
    return module
builtins.__import__ = _import
"""


def test_patched_comparisons_are_found_and_named(monkeypatch):
    import torch

    assert selfcheck.comparison_problems() == []
    monkeypatch.setattr(torch, "allclose", lambda *a, **k: True)
    monkeypatch.setattr(torch.Tensor, "equal", lambda *a, **k: True)
    problems = selfcheck.comparison_problems()
    assert any(p.startswith("torch.allclose was replaced by code from " + __file__) for p in problems)
    assert any(p.startswith("torch.Tensor.equal was replaced") for p in problems)
    monkeypatch.undo()
    monkeypatch.setattr(torch, "equal", torch.ne)  # a builtin, but not the right one: behaviour gives it away
    assert "torch.equal does not tell zeros from ones" in selfcheck.comparison_problems()


def test_a_fresh_python_still_has_genuine_comparisons():
    """After all the hostile notebooks this suite grades: nothing leaked into the interpreter."""
    done = subprocess.run([sys.executable, "-c", "from autograder.grading import selfcheck; selfcheck.verify(); print('ok')"],
                          capture_output=True, text=True)
    assert done.stdout.strip() == "ok", done.stdout + done.stderr


LOOK_AT_TMP = """
import os, sys
raise RuntimeError(f"my /tmp holds {sorted(os.listdir('/tmp'))}; python is {sys.executable}")
"""


@pytest.mark.slow
@pytest.mark.usefixtures("sandbox_required")
def test_a_package_installed_in_a_venv_under_tmp_grades_alike_and_stays_out_of_the_students_tmp(tmp_path):
    """CI runners and throw-away setups install into `python -m venv /tmp/...`; the sandbox has a
    /tmp of its own, so that interpreter must appear elsewhere in it, and grade the same.
    (benchmarks/venv_under_tmp.py shows it costs no time per notebook.)"""
    env_dir = tmp_path / "venv"
    venv.EnvBuilder(system_site_packages=True, with_pip=True).create(env_dir)
    python = env_dir / "bin" / "python"
    subprocess.run([python, "-m", "pip", "install", "-q", "--no-deps", str(ROOT)],
                   check=True, capture_output=True, timeout=600)
    found = subprocess.run([python, "-c", "import autograder; print(autograder.__file__)"],
                           capture_output=True, text=True, check=True, cwd="/").stdout
    assert found.startswith(str(env_dir))  # the venv's own copy, not this checkout
    course = new_course(tmp_path)
    inbox = tmp_path / "inbox"
    inbox.mkdir()
    write(inbox, "ada", example("ada"))
    write(inbox, "ben", example("ben"))
    write(inbox, "looker", make_notebook(EXAMPLES["ada"], after={"ex1": LOOK_AT_TMP}))
    done = cli("grade", ASSIGNMENT, inbox, "--course", course, "--seed", "1", python=python, timeout=600,
               env={**os.environ, "PYTHONPATH": ""}, cwd="/")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    rows = {r["student_id"]: r for r in csv.DictReader(open(course / "graded" / ASSIGNMENT / "grades.csv"))}
    assert float(rows["ada"]["total"]) == 26 and float(rows["ben"]["total"]) == SCORES["ben"]
    looker = json.loads((course / "graded" / ASSIGNMENT / "looker.json").read_text())
    seen = " ".join(error["error"] for error in looker["extra_data"]["cell_errors"])
    assert "my /tmp holds" in seen and "pytest-of" not in seen.split("python is")[0], seen
    assert float(rows["looker"]["total"]) == 26
