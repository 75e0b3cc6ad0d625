"""The README is a front door and the docs say what the code does: every name a hidden check can
import, every fixture, marker and probe is described in docs/checks.md; paths the pages name
exist; the pages build with MkDocs in strict mode (broken links between pages fail)."""
import ast
import inspect
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
DOCS = ROOT / "docs"
CHECKS_DOC = DOCS / "checks.md"
PAGES = [README, *sorted(DOCS.glob("*.md")), ROOT / "benchmarks" / "README.md"]

# A span in backticks is a repository path when it starts with one of these folders or is one of
# these top-level files.
PATH_PREFIXES = ("autograder/", "exercises/", "solutions/", "tests/", "benchmarks/", "docs/", "source/", "release/",
                 ".ci/")
TOP_LEVEL_FILES = {"pyproject.toml", "setup.sh", "mkdocs.yml", "nbgrader_config.py", "README.md"}


def without_fences(text):
    """The page with its fenced code blocks left out (commands and examples, not prose)."""
    kept, fence = [], None
    for line in text.splitlines():
        stripped = line.lstrip()
        marker = re.match(r"(`{3,}|~{3,})", stripped)
        if fence is None and marker:
            fence = marker.group(1)
        elif fence is not None and stripped.startswith(fence) and not stripped[len(fence):].strip():
            fence = None
        elif fence is None:
            kept.append(line)
    return "\n".join(kept)


def code_spans(text):
    """The text of every inline code span outside fenced blocks."""
    prose = without_fences(text)
    return [match.group(2).strip() for match in re.finditer(r"(`+)(.+?)\1", prose, re.S)]


def documented(name, text):
    """`name` appears in backticks, alone or as the start of a signature: `name` or `name(...)`."""
    return re.search(r"`" + re.escape(name) + r"[`(]", text) is not None


def test_the_readme_is_a_front_door():
    lines = README.read_text().splitlines()
    assert len(lines) <= 150, f"README.md has {len(lines)} lines; move detail into docs/"
    text = README.read_text()
    for command in ("./setup.sh && autograder demo", "python -m pytest\n", "python -m pytest --full"):
        assert command in text, f"README.md no longer shows {command.strip()!r}"


def test_the_readme_links_to_pages_that_exist():
    links = re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", README.read_text())
    assert links
    for link in links:
        if "://" not in link:
            assert (ROOT / link).exists(), f"README.md links to {link}, which does not exist"


def test_every_page_is_in_the_nav():
    config = (ROOT / "mkdocs.yml").read_text()
    for page in DOCS.glob("*.md"):
        assert re.search(rf":\s*{re.escape(page.name)}\s*$", config, re.M), f"mkdocs.yml's nav lacks {page.name}"


def test_every_name_a_check_can_import_is_documented():
    import autograder.checks

    text = CHECKS_DOC.read_text()
    missing = [name for name in autograder.checks.__all__ if not documented(name, text)]
    assert not missing, f"docs/checks.md does not describe {missing}"


def test_every_marker_is_documented():
    from autograder.checks.plugin import MARKERS

    text = CHECKS_DOC.read_text()
    names = [key.split("(")[0] for key in MARKERS] + ["parametrize"]
    missing = [name for name in names if not documented(name, text)]
    assert not missing, f"docs/checks.md does not describe the markers {missing}"


def plugin_fixtures():
    """Names of GradingPlugin's methods decorated with pytest.fixture (read from the source)."""
    tree = ast.parse((ROOT / "autograder" / "checks" / "plugin.py").read_text())
    plugin = next(node for node in tree.body if isinstance(node, ast.ClassDef) and node.name == "GradingPlugin")

    def is_fixture(decorator):
        target = decorator.func if isinstance(decorator, ast.Call) else decorator
        return ast.unparse(target) in ("pytest.fixture", "fixture")

    return [node.name for node in plugin.body
            if isinstance(node, ast.FunctionDef) and any(map(is_fixture, node.decorator_list))]


def test_every_fixture_is_documented():
    fixtures = plugin_fixtures()
    assert {"student", "reference", "rng", "seed"} <= set(fixtures)
    text = CHECKS_DOC.read_text()
    missing = [name for name in fixtures if not documented(name, text)]
    assert not missing, f"docs/checks.md does not describe the fixtures {missing}"


def public_members(cls):
    return sorted(name for name, member in vars(cls).items()
                  if not name.startswith("_") and (inspect.isfunction(member) or isinstance(member, property)))


def test_every_probe_is_documented():
    from autograder.grading.sandbox.proxy import SandboxStudent
    from autograder.inside.student import NamespaceStudent

    text = CHECKS_DOC.read_text()
    for cls in (NamespaceStudent, SandboxStudent):
        members = public_members(cls)
        assert {"kind", "call", "origin", "replay"} <= set(members), cls.__name__
        missing = [name for name in members if not documented(name, text)]
        assert not missing, f"docs/checks.md does not describe {cls.__name__}'s {missing}"


def test_hidden_checks_import_the_engine_only_through_autograder_checks():
    files = sorted(ROOT.glob("exercises/*/checks/*.py"))
    assert files
    for path in files:
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                modules = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                modules = [node.module] if node.module != "autograder" else [
                    f"autograder.{alias.name}" for alias in node.names]
            else:
                continue
            for module in modules:
                if module == "autograder" or module.startswith("autograder."):
                    assert module == "autograder.checks", (
                        f"{path.relative_to(ROOT)}:{node.lineno} imports {module}; hidden checks import only"
                        " `from autograder.checks import ...` (docs/checks.md)")


def looks_like_a_path(span):
    if any(c.isspace() for c in span) or "<" in span or "*" in span:
        return False
    return span.startswith(PATH_PREFIXES) or span in TOP_LEVEL_FILES


def test_paths_the_pages_name_exist():
    checked = 0
    for page in PAGES:
        for span in code_spans(page.read_text()):
            if looks_like_a_path(span):
                checked += 1
                assert (ROOT / span).exists(), f"{page.relative_to(ROOT)} names `{span}`, which does not exist"
    assert checked > 20


def test_the_path_check_sees_what_it_should():
    text = "`autograder/wire.py`, `exercises/<assignment>/`, `autograder grade x`, `setup.sh`\n```\n`tests/nope.py`\n```"
    assert [s for s in code_spans(text) if looks_like_a_path(s)] == ["autograder/wire.py", "setup.sh"]


def test_the_docs_build_in_strict_mode(tmp_path):
    # mkdocs is in the test extra: where it is missing this fails, it does not skip
    done = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
                          cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, (done.stdout + done.stderr)[-4000:]
    assert (tmp_path / "site" / "checks" / "index.html").exists()
