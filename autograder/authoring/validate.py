"""For instructors: do the hidden checks catch what they should, and only that?

`validate` grades, with the real batch grader (sandboxes and all), the reference
solutions, the untouched release and every corpus entry, then reports per
graded cell: checks that pass on the solutions and fail on the stubs, mistakes
caught with the right diagnostic, alternatives at full marks, and the checks
that caught no mistake at all.

It also scores the diagnoses as a student reads them (`corpus.diagnose`): the
fraction of mistakes named with nothing misleading, and what the others read. The
assignment's `[validate] diagnoses_named_min` (default 0.9) is the floor below
which validation is not clean.

It also catches what every student would hit: a cell of the reference solutions'
notebook that raises (a visible check that fails on right answers), committed source/
or release/ notebooks that `autograder release` would now write differently, and a
hidden check that breaks (named by file and line, which students never see).
"""
import copy
import json
import os
import re
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import nbformat

from autograder.authoring.build import write_source
from autograder.authoring.corpus import SOLUTIONS, STUBS, check_outcomes, diagnose, judge, load, write_submissions
from autograder.authoring.errorcheck import check_error_model
from autograder.authoring.nbgrader_steps import NbgraderFailed, generate_assignment, run_nbgrader
from autograder.checks import errormodel
from autograder.checks.outcomes import COULD_NOT_RUN
from autograder.checks.repair import repaired
from autograder.checks.rootcause import exercise_number
from autograder.checks.runner import ChecksBroken, run_checks
from autograder.course import CourseError, copy_assignment, derive_seed
from autograder.course.regions import read_regions, strip_solution_markers
from autograder.course.settings import ValidateSettings
from autograder.grading.notebook import grade_cells, read_notebook, sanitize
from autograder.grading.sandbox.process import SandboxBroken
from autograder.grading.sandbox.proxy import SandboxStudent
from autograder.grading.submission import assignment_sandbox
from autograder.outputs.results import ResultFiles
from autograder.record import GRADED, UNTESTED, cell_in_words
from autograder.runs.batch import grade_batch
from autograder.runs.recording import graded_folder, read_source


DIAGNOSES_MIN = ValidateSettings.diagnoses_named_min  # asked of every assignment; one may set a floor of its own


@dataclass
class CellReport:
    grade_id: str
    checks: int = 0
    solutions_pass: int = 0
    stubs_fail: int = 0
    mistakes: int = 0
    caught: int = 0
    alternatives: int = 0
    accepted: int = 0
    idle_checks: list = field(default_factory=list)  # checks no mistake ever failed


@dataclass
class Validation:
    assignment: str
    seed: int
    cells: dict  # grade id -> CellReport
    problems: dict  # submission name -> [what went wrong]
    results: dict  # submission name -> result
    seconds: float
    diagnoses: dict = field(default_factory=dict)  # mistake name -> [what its student reads that is wrong]
    diagnoses_min: float = DIAGNOSES_MIN
    from_public_code: set = field(default_factory=set)  # names of the entries with a `source`
    held_out: dict = field(default_factory=dict)  # entry name -> the diagnosis code it was held out from
    error_model: object = None  # authoring/errorcheck.ErrorModelReport
    repairs: object = None  # RepairReport: the named mistakes undone in the entries' own code
    release_warm_up: str = ""  # what the sandbox did with the untouched release (see release_warm_up)

    @property
    def named(self):
        """The fraction of mistakes named with nothing misleading."""
        return sum(not found for found in self.diagnoses.values()) / len(self.diagnoses) if self.diagnoses else 1.0

    def held_out_named(self):
        """{label: (named with nothing misleading, mistakes)} of the entries held out from that
        diagnosis code (corpus `held_out`)."""
        figures = {}
        for name, label in self.held_out.items():
            if name in self.diagnoses:
                named, total = figures.get(label, (0, 0))
                figures[label] = (named + (not self.diagnoses[name]), total + 1)
        return figures

    @property
    def clean(self):
        return (not self.problems and all(c.checks for c in self.cells.values())
                and self.named >= self.diagnoses_min)


def validate(assignment, seed=0, jobs=None, out_dir=None, only=None, unsafe_no_sandbox=False):
    """Grade solutions, stubs and corpus with `seed`; results go to `out_dir` (default: a temporary folder)."""
    stale = stale_files(assignment)
    with tempfile.TemporaryDirectory(prefix="autograder-validate-") as scratch:
        validation = grade_corpus(assignment, Path(scratch) / "corpus", seed, jobs,
                                  out_dir or Path(scratch) / "graded", only, unsafe_no_sandbox)
    if stale:
        validation.problems["release"] = stale
    validation.release_warm_up = release_warm_up(assignment, unsafe_no_sandbox)
    return validation


def release_if_new(assignment):
    """Release an assignment that has no source or release notebook yet, as `autograder release`
    does; the release notebook's path, or None when it was released already (stale or not:
    `stale_files` says, since students may already have that release)."""
    if assignment.source_notebook.is_file() and assignment.release_notebook.is_file():
        return None
    write_source(assignment)
    return generate_assignment(assignment)


def stale_files(assignment):
    """What `autograder release` would now write differently from the committed notebooks:
    one line per stale file (relative to the course), or why it cannot release at all. Built
    in a scratch copy, without a gradebook: the course itself is not touched."""
    with tempfile.TemporaryDirectory(prefix="autograder-validate-") as scratch:
        copy = copy_assignment(assignment, Path(scratch) / "course", grading_only=True)
        try:
            write_source(copy)
            run_nbgrader(copy.course.root, "generate_assignment", copy.name, "--force", "--no-db")
        except (CourseError, NbgraderFailed) as error:  # a malformed notebook.md or solutions file
            return [f"`autograder release {assignment.name}` fails: {error}"]
        pairs = [(assignment.source_notebook, copy.source_notebook),
                 (assignment.release_notebook, copy.release_notebook)]
        stale = [mine for mine, fresh in pairs if _cells(mine) != _cells(fresh)]
    root, name = assignment.course.root, assignment.name
    return [f"{_relative(path, root)} is stale against {_relative(assignment.notebook_text, root)} and"
            f" {_relative(assignment.solutions, root)}: run `autograder release {name}`" for path in stale]


def _cells(path):
    """What a notebook's cells are made of (type, source, metadata); None when it cannot be read."""
    try:
        cells = nbformat.read(path, as_version=4).cells
    except (OSError, ValueError):  # missing, or not a notebook
        return None
    return [(cell.cell_type, cell.source, json.dumps(cell.metadata, sort_keys=True)) for cell in cells]


def _relative(path, root):
    try:
        return str(Path(path).relative_to(root))
    except ValueError:
        return str(path)


def release_warm_up(assignment, unsafe_no_sandbox=False):
    """What a sandbox for `assignment` did with the untouched release before it forks any
    student (see inside/agent.py, _warm_up_on_release): "ok: ...", "skipped: <why>", "no
    release cells", or why it could not tell. Grading is the same either way; a skipped
    warm-up only makes every student pay the release's first-call costs again, which the
    instructor would not otherwise learn (the grader does not fail over it)."""
    box = assignment_sandbox(assignment, assignment.limits, unsafe_no_sandbox)
    try:
        hello = box.start()
    except SandboxBroken as error:
        return f"unknown: {error}"
    finally:
        box.close()
    return str(hello.get("release_warm_up", "unknown: the sandbox did not say"))


def grade_corpus(assignment, folder, seed, jobs, out_dir, only=None, unsafe_no_sandbox=False, repairs=True):
    """Write the submissions to `folder`, grade them all, summarize.

    `only` limits the corpus to the entries with these names; `repairs=False` leaves out grading the
    entries again with their named mistakes undone (check_repairs).
    """
    with tempfile.TemporaryDirectory(prefix="autograder-validate-") as scratch:
        copy = copy_assignment(assignment, Path(scratch) / "course", grading_only=True)
        cells = list(grade_cells(read_source(copy)))
        entries = [e for e in load(assignment, cells) if only is None or e.name in only]
        unknown = set(only or ()) - {e.name for e in entries}
        if unknown:
            raise ValueError(f"no corpus entries named {sorted(unknown)}")
        folder = Path(folder)
        write_submissions(assignment, entries, folder)  # same entries, same bytes
        paths = [folder / f"{name}.ipynb" for name in (SOLUTIONS, STUBS, *(e.name for e in entries))]
        graded = graded_folder(copy, out_dir)  # result files only: no pages, report or gradebook
        report = grade_batch(copy, paths, [ResultFiles(graded)], out_dir=graded,
                             jobs=jobs or os.cpu_count() or 1, force=True, seed=seed,
                             unsafe_no_sandbox=unsafe_no_sandbox)
        results = {r.student_id: r for r in report.results}
        crashes = locate_crashes(copy, folder, results, seed, unsafe_no_sandbox)
        on_reference = reference_cell_errors(read_source(copy), results.get(SOLUTIONS))
        repairs = check_repairs(copy, folder, entries, results, seed, jobs, unsafe_no_sandbox) if repairs else None
    validation = summarize(assignment.name, seed, cells, entries, results, report.seconds, assignment.builds_on)
    validation.repairs = repairs
    if on_reference:
        validation.problems.setdefault(SOLUTIONS, []).extend(on_reference)
    if crashes:
        validation.problems["hidden checks"] = crashes
    validation.diagnoses_min = float(assignment.config.validate.diagnoses_named_min)
    validation.error_model = check_error_model(assignment)
    if validation.error_model.problems:
        validation.problems["error model"] = validation.error_model.problems
    return validation


@dataclass
class RepairReport:
    """What the feedback's "fails because of" promises did once their cause was repaired in the
    entry's own code (`check_repairs`)."""
    promising: int = 0  # mistake entries whose feedback says some check fails because of something
    tested: list = field(default_factory=list)  # entries whose every promise could be tested
    lines: int = 0  # promises tested (a check in a cell), across the corpus
    contradicted: dict = field(default_factory=dict)  # entry -> ["<cell>: <check>", ...] still failing

    @property
    def held(self):
        """The tested entries where every promise held."""
        return [name for name in self.tested if not self.contradicted.get(name)]


def named_causes(result):
    """{graded cell: [mutant names]} the feedback of `result` names (its diagnoses' causes)."""
    return {cell.name: [name for check in cell.checks for name in check.cause] for cell in result.cells
            if any(check.cause for check in cell.checks)}


def promises(result):
    """The checks `result`'s feedback says fail because of something: ({(cell, check)} because of
    the mistake named above them, {(cell, check): {"3", ...}} because of the exercises it names)."""
    own, upstream = set(), {}
    for cell in result.cells:
        for check in cell.checks:
            if check.passed or not check.because or check.because.startswith(UNTESTED):
                continue  # (an untested one promises nothing: it says the check fails too)
            if check.because == "above":
                own.add((cell.name, check.name))
            else:
                upstream[(cell.name, check.name)] = set(re.findall(r"Exercise (\d+)", check.because))
    return own, upstream


def check_repairs(assignment, folder, entries, results, seed, jobs, unsafe_no_sandbox=False):
    """Grade each mistake entry again with the causes its feedback names repaired, and check every
    "fails because of" it promised (RepairReport): a check said to fail because of the mistake
    above passes once the mistakes named there are undone in the entry's own code (checks/repair.py;
    only where they are in the error model's words); one said to wait for Exercise N passes once
    that exercise's answers are the reference's."""
    out = Path(folder) / "repaired"
    out.mkdir(parents=True, exist_ok=True)
    report, claims = RepairReport(), {}
    model, reference = errormodel.load(assignment.folder), read_regions(assignment.solutions)  # read once
    for entry in entries:
        result = results.get(entry.name)
        if entry.outcome == "mistake" and result and result.status == GRADED:
            _write_repairs(model, reference, Path(folder) / f"{entry.name}.ipynb", out, result, report, claims)
    if not claims:
        return report
    graded = graded_folder(assignment, out / "graded")
    again = grade_batch(assignment, [out / f"{student}.ipynb" for student in claims], [ResultFiles(graded)],
                        out_dir=graded, jobs=jobs or os.cpu_count() or 1, force=True, seed=seed,
                        unsafe_no_sandbox=unsafe_no_sandbox)
    after = {r.student_id: r for r in again.results}
    for student, (name, promised) in claims.items():
        now = after.get(student)
        passed = {(cell.name, check.name) for cell in (now.cells if now and now.status == GRADED else [])
                  for check in cell.checks if check.passed}
        report.lines += len(promised)
        wrong = [f"{cell}: {check}" for cell, check in promised if (cell, check) not in passed]
        if wrong:
            report.contradicted.setdefault(name, []).extend(wrong)
    return report


def _write_repairs(model, reference, path, out, result, report, claims):
    """Write `out`/<entry>--own.ipynb (the named mistakes undone) and <entry>--upstream.ipynb (the
    reference's answers to the exercises it waits for), as far as `result`'s promises need them;
    note in `claims` {student id: (entry, promised checks)} what each must show, and in `report`.
    `model` is the error model, `reference` the reference's regions."""
    own, upstream = promises(result)
    if not own and not upstream:
        return
    report.promising += 1
    name, causes, testable = path.stem, named_causes(result), True
    notebook = nbformat.read(path, as_version=4)
    answers = {cell.metadata["nbgrader"]["grade_id"]: cell.source for cell in notebook.cells
               if cell.metadata.get("nbgrader", {}).get("solution") and cell.cell_type == "code"}
    if own:
        mutants = [mutant for cell, names in causes.items() for mutant in model.get(cell, [])
                   if mutant.name in names]
        fixed = repaired(answers, mutants, reference) if {cell for cell, _ in own} <= set(causes) else None
        if fixed is None:
            testable = False  # a mistake named by a check's or the values' words, or in other words
        else:
            _write_notebook(notebook, fixed, out / f"{name}--own.ipynb")
            claims[f"{name}--own"] = (name, sorted(own))
    if upstream:
        numbers = set().union(*upstream.values())
        _write_notebook(notebook, {region: strip_solution_markers(text) for region, text in reference.items()
                                   if exercise_number(region.rsplit("_", 1)[0]) in numbers},
                        out / f"{name}--upstream.ipynb")
        claims[f"{name}--upstream"] = (name, sorted(upstream))
    if testable:
        report.tested.append(name)


def _write_notebook(notebook, sources, path):
    """`notebook` with the code cells named in `sources` ({grade id: source}) replaced, at `path`."""
    notebook = nbformat.from_dict(copy.deepcopy(notebook))
    for cell in notebook.cells:
        grade_id = cell.metadata.get("nbgrader", {}).get("grade_id")
        if grade_id in sources and cell.cell_type == "code":
            cell.source = sources[grade_id]
    nbformat.write(notebook, path)


def reference_cell_errors(source, solved):
    """What a student with every answer right would see fail in the notebook: one line per cell
    of the reference solutions' notebook that raised (a visible check that fails on right answers,
    or given code that does not run), from the graded result's cell report."""
    if solved is None:
        return []
    visible = {meta["grade_id"] for cell in source.cells if cell.cell_type == "code"
               and (meta := cell.metadata.get("nbgrader", {})).get("locked")
               and not meta.get("grade") and not meta.get("solution")}
    return [f"the visible check in {cell_in_words(error.cell)} fails on the reference solutions: {_exception(error.error)}"
            if error.cell in visible else
            f"{cell_in_words(error.cell)} raises on the reference solutions: {_exception(error.error)}"
            for error in solved.cell_errors]


def _exception(traceback_text, limit=300):
    """The exception of a cell's traceback text (what follows its last frame), on one line."""
    lines = traceback_text.rstrip().splitlines()
    frames = [i for i, line in enumerate(lines) if line.startswith("  File ")]
    start = frames[-1] + 1 if frames else 0
    while frames and start < len(lines) and lines[start].startswith("    "):  # the frame's code, its carets
        start += 1
    text = " ".join(line.strip() for line in lines[start:] if line.strip()) or traceback_text.strip()
    return text if len(text) <= limit else text[:limit] + " ..."


def locate_crashes(assignment, folder, results, seed, unsafe_no_sandbox=False):
    """Where each hidden check that could not run broke (outcomes.crash_of: file, line, exception),
    one line each. Students only read that it could not run; the result files keep where, for
    TAs (`CheckOutcome.crash`). A result that does not (one graded before the grader kept it) has
    the first submission it broke on run again in a sandbox, its checks in this process."""
    found = {}  # crash -> its line
    first = {}  # (graded cell, check) -> the first submission it could not run on, the solutions first
    for name, result in sorted(results.items(), key=lambda item: item[0] != SOLUTIONS):
        for cell, check, crash in result.check_crashes():
            found.setdefault(crash, f"{crash} (check {cell} {check}, on {name})")
    located = {(cell, check) for result in results.values() for cell, check, _ in result.check_crashes()}
    for name, result in sorted(results.items(), key=lambda item: item[0] != SOLUTIONS):
        for cell in result.cells:
            for check in cell.checks:
                if check.message.startswith(COULD_NOT_RUN) and (cell.name, check.name) not in located:
                    first.setdefault((cell.name, check.name), name)
    if not first:
        return list(found.values())
    box = assignment_sandbox(assignment, assignment.limits, unsafe_no_sandbox)
    try:
        for name in dict.fromkeys(first.values()):
            try:
                for cell, check in _crashes_on(assignment, box, folder / f"{name}.ipynb", seed):
                    found.setdefault(check.crash, f"{check.crash} (check {cell} {check.name}, on {name})")
            except (SandboxBroken, ChecksBroken) as error:
                checks = ", ".join(f"{cell} {check}" for (cell, check), on in first.items() if on == name)
                found[name] = f"{checks} could not run on {name}; where they broke is not known ({error})"
    finally:
        box.close()
    return list(found.values())


def _crashes_on(assignment, box, path, seed):
    """(graded cell, CheckResult) of every check that broke on the submission at `path`."""
    clean = sanitize(read_notebook(path), nbformat.read(assignment.source_notebook, as_version=4),
                     nbformat.read(assignment.release_notebook, as_version=4))
    try:
        box.run(clean.cells, seed=derive_seed(assignment.seed_key, seed, "cells"))  # as the batch runs them
        checks = run_checks(assignment, SandboxStudent(box), seed=seed)
    finally:
        box.finish()
    return [(cell, check) for cell, result in checks.items() for check in result.checks if check.crash]


def summarize(assignment, seed, cells, entries, results, seconds, builds_on=None):
    reports = {cell: CellReport(cell) for cell in cells}
    problems = {}
    solved, stubs = results.get(SOLUTIONS), results.get(STUBS)
    if solved is None or stubs is None or any(r.status != GRADED for r in (solved, stubs)):
        problems["grader"] = ["the reference solutions or the release could not be graded"]
        return Validation(assignment, seed, reports, problems, results, seconds)

    on_solutions, on_stubs = check_outcomes(solved), check_outcomes(stubs)
    for (cell, check), passed in on_solutions.items():
        report = reports[cell]
        report.checks += 1
        report.solutions_pass += passed
        report.stubs_fail += not on_stubs.get((cell, check), True)
        if not passed:
            problems.setdefault(SOLUTIONS, []).append(f"{cell} {check} fails on the solutions")
        if on_stubs.get((cell, check), True):
            problems.setdefault(STUBS, []).append(f"{cell} {check} passes on the untouched release")
    caught_by_some, diagnoses = set(), {}
    for entry in entries:
        result = results.get(entry.name)
        if entry.outcome == "mistake":
            diagnoses[entry.name] = diagnose(entry, result, builds_on)
        found = judge(entry, result, builds_on) if result else ["no result"]
        rival = results.get(entry.no_better_than)
        if result and rival and result.score > rival.score:
            found.append(f"scores {result.score:g}, more than {entry.no_better_than} ({rival.score:g}),"
                         " the same code without the trick")
        report = reports[entry.exercise]
        if entry.outcome == "mistake":
            report.mistakes += 1
            report.caught += not found
            caught_by_some |= {key for key, passed in (check_outcomes(result) if result else {}).items() if not passed}
        else:
            report.alternatives += 1
            report.accepted += not found
        if found:
            problems[entry.name] = found
    for cell, check in on_solutions:
        if (cell, check) not in caught_by_some:
            reports[cell].idle_checks.append(check)
    return Validation(assignment, seed, reports, problems, results, seconds, diagnoses,
                      from_public_code={entry.name for entry in entries if entry.source},
                      held_out={entry.name: entry.held_out for entry in entries if entry.held_out})
