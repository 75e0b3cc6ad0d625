"""Contracts kept by tests, not by hand (issue 48, item 3): the probe list in one place, the
sandbox's file list derived from the package, and no import circle anywhere, imports inside
functions included."""
import ast
import socket
import threading
from pathlib import Path

from autograder import wire

PACKAGE = Path(__file__).resolve().parent.parent / "autograder"


def public_methods(cls):
    return {name for name in dir(cls) if not name.startswith("_") and callable(getattr(cls, name))}


def test_the_probe_list_is_the_in_process_students_methods_and_the_proxys():
    from autograder.grading.sandbox.proxy import SandboxStudent
    from autograder.inside.student import NamespaceStudent

    assert len(set(wire.PROBES)) == len(wire.PROBES)
    assert public_methods(NamespaceStudent) == set(wire.PROBES)  # a new probe is a method there and a name here
    # the proxy: one method per probe, and its own bookkeeping, which the sandbox is never asked
    assert public_methods(SandboxStudent) - set(wire.PROBES) == {"forked", "lose", "repairing", "state_now", "what_ifs"}
    assert all(getattr(SandboxStudent, name).__name__ == name for name in wire.PROBES)


def test_the_agent_answers_the_contracts_names_alone():
    """Any other attribute of the in-process student (its namespace, a dunder) is refused."""
    from autograder.inside.agent import _answer_probes
    from autograder.inside.student import NamespaceStudent

    student = NamespaceStudent({"x": 3})
    ours, theirs = socket.socketpair()
    answering = threading.Thread(target=_answer_probes, args=(student, theirs.fileno(), theirs.fileno(), wire,
                                                             wire.StudentError), daemon=True)
    answering.start()
    replies = []
    with ours:
        for method, args in (("value", ("x",)), ("namespace", ()), ("__class__", ()), ("made", (None,))):
            wire.write_frame(ours.fileno(), wire.dump_request((method, args, {})))
            replies.append(wire.load_reply(wire.read_reply_frame(ours.fileno())))
    answering.join(5)
    theirs.close()
    assert list(replies[0]) == ["ok", 3]
    assert [reply[0] for reply in replies[1:]] == ["refused"] * 3, replies


def test_the_sandbox_gets_every_module_of_inside_and_the_wire_format():
    from autograder.grading.sandbox.agent_files import AGENT_FILES

    assert set(AGENT_FILES) == {"wire.py", *(f"inside/{p.name}" for p in (PACKAGE / "inside").glob("*.py"))}


def import_graph():
    """{module: modules of ours it imports}, at any depth of the file (inside functions too)."""
    modules = {}
    for path in PACKAGE.rglob("*.py"):
        name = ".".join(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        modules[name.removesuffix(".__init__")] = path

    def ours(name):
        while name and name not in modules:
            name = name.rpartition(".")[0]
        return name

    graph = {name: set() for name in modules}
    for name, path in modules.items():
        for node in ast.walk(ast.parse(path.read_text())):
            targets = []
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                targets = [f"{node.module}.{alias.name}" for alias in node.names]
            for target in targets:
                found = ours(target) if target.startswith("autograder") else ""
                if found and found != name:
                    graph[name].add(found)
    return graph


def circles(graph):
    """Every strongly connected set of more than one module (Tarjan's algorithm, iterative)."""
    index, low, on_stack, stack, found, counter = {}, {}, set(), [], [], [0]
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter[0]
        counter[0] += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter[0]
                    counter[0] += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def test_no_import_circle_anywhere_imports_inside_functions_included():
    graph = import_graph()
    assert "autograder.course.errors" in graph["autograder.course.settings"]  # (the graph sees real imports)
    assert circles(graph) == []


def test_the_circle_finder_finds_a_circle_through_a_function():
    assert circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def unexplained_imports(source):
    """The imports inside functions of `source` that say nothing of why: no comment on their line,
    nor on a comment line or import right above them that does (an import group shares one reason)."""
    lines = source.splitlines()
    found = []
    for function in ast.walk(ast.parse(source)):
        if not isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        for node in function.body:
            if not isinstance(node, (ast.Import, ast.ImportFrom)):
                continue
            number = node.lineno - 1
            while number >= 0 and "#" not in lines[number]:
                above = lines[number - 1].strip() if number else ""
                if not (above.startswith(("import ", "from ", "#")) and number > function.lineno - 1):
                    found.append(lines[node.lineno - 1].strip())
                    break
                number -= 1
    return found


def test_every_import_inside_a_command_says_why_it_waits():
    """The commands import the engine at the top of their module; one that waits for its command
    (start-up time every other command would pay, an optional extra) says so (issue 48, item 1)."""
    missing = {path.name: unexplained_imports(path.read_text()) for path in (PACKAGE / "cli").glob("*.py")}
    assert {name: lines for name, lines in missing.items() if lines} == {}


def test_an_import_without_a_reason_is_found():
    source = ("def a():\n    import os  # start-up: 9 ms\n    import sys\n\n\n"
              "def b():\n    x = 1\n    import json\n\n\n"
              "def c():\n    # both: an optional extra\n    import json\n    import csv\n")
    assert unexplained_imports(source) == ["import json"]


def test_every_python_line_of_setup_sh_finds_what_it_imports():
    """setup.sh (which CI runs first) asks Python questions in one-line programs: a module that
    moved must not turn its sandbox check into a refusal on every machine."""
    import re
    import subprocess
    import sys

    programs = re.findall(r'python -c "([^"]+)"', (PACKAGE.parent / "setup.sh").read_text())
    assert programs  # (the pattern still finds them)
    for program in programs:
        done = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, timeout=120)
        assert "Traceback" not in done.stderr, f"{program}\n{done.stderr[-1500:]}"
