"""pytest plugin that lets hidden checks talk to one submission.

Fixtures: `student` (the probe API), `reference` (the solutions namespace),
`seed` and `rng` (inputs drawn from the grading run's seed, different for every
check so hard-coded outputs cannot pass). Results are collected per check with
a student-facing message, never a traceback or the check's code.

One submission's checks run by *levels* (course/visibility.py: 0 shown always, 1 shown after the
due date, 2 for the TA alone; `GradingPlugin.run_views`), so that what a student may read at a
level is made as if the checks of higher levels never ran, and before any of them runs. For each
level present, lowest first:

1. its checks: the lowest level in the submission's own process, each higher one in a fork of the
   process the level below ran in (`student.forked()`: nothing it does comes back to that one, and
   it starts from what the level below left, as a run with nothing hidden would);
2. then every diagnosis of the levels so far, from the outcomes so far (what each found is kept:
   it asks the submission its questions once), each asking its questions of that process;
3. then the diagnoses' what-if runs, which hand the reference's values to the student's code, so
   they run sealed (`student.what_ifs()`): in a fork that ends afterwards, or, after the highest
   level, in that process itself, sealed for its last questions.

The outcomes after each level below the highest are that level's view (`views`). With nothing
hidden there is one level, and one view: the whole result.
"""
import contextlib
import dataclasses
import time

import pytest
import torch

from autograder.course import derive_seed
from autograder.course import reference as reference_module
from autograder.checks import errormodel, localise
from autograder.checks.outcomes import CheckResult, crash_of, crashed, grade_id_of, message_of, message_of_text
from autograder.checks.rootcause import still_wrong_once_fixed
from autograder.checks.verdict import MistakeApart, NamedMistake, repairs_begin, repairs_end, use_hints


def _short_repr(excinfo, style=None):
    return f"{excinfo.typename}: {excinfo.value}"


# The markers a hidden check may carry: name(arguments) -> what it does. Each one's behaviour is
# in this module (collection order, credit, quieting); docs/checks.md lists them from here.
MARKERS = {
    "weight(n)": "relative weight of a check in its grade cell",
    "fixed_inputs(*checks)": "a check on the notebook's own inputs; it earns credit only when the named checks"
                             " on random inputs pass too",
    "after(*checks)": "a check that uses what the named checks (same file) test; while one of them fails, its own"
                      " failure says nothing more",
    "diagnosis": "runs after the file's other checks and names the mistake (from the error model, or by another"
                 " test of the cause) when one of them failed; costs no points and is not listed when it names"
                 " nothing",
}


class GradingPlugin:
    def __init__(self, assignment, student=None, seed=0):
        self.assignment = assignment
        self.seed_key = assignment.seed_key
        use_hints(assignment.hints())
        self.collect_errors = []  # why check files failed to load, for the instructor
        self.begin(student, seed)

    def pytest_collectreport(self, report):
        if report.failed:
            self.collect_errors.append(report.longreprtext)

    def begin(self, student, seed, levels=None, cells=None, diagnoses=True):
        """Grade `student` with inputs from `seed` from now on, with fresh results. `levels(grade id,
        check name)` is each check's level (see the module's docstring; None: every check is shown);
        `cells`: only these graded cells' checks (None: all); `diagnoses`: run the diagnoses too."""
        if getattr(student, "resources", False) is None:  # answered in this process: the assignment's own
            student.resources = self.assignment.resources()
        self._student, self.run_seed, self.results = student, seed, []
        self.levels = levels
        self.views = {}  # level -> (its CheckResults, the submission's state then), below the highest
        self.found = {}  # grade id -> what its diagnosis found in this submission (said in every view)
        self.pending = []  # diagnoses waiting for their what-if runs
        self.causes = {}  # grade id -> the mutants its diagnosis named (CheckResult.cause)
        self.repaired = {}  # grade id -> (kind, {check name: passed}) once a repair run fixed its named mistake
        self.repaired_views = {}  # level -> `repaired` as it was for that level's view
        self.repair_seconds = 0.0  # what the repair runs took, all levels together
        self.only, self.with_diagnoses = (set(cells) if cells is not None else None), diagnoses
        self._order, self._cells = {}, set()

    # -- one submission, in views ---------------------------------------------------------------
    def run_views(self, items, protocol):
        """Run `items` (the session's, in collection order) for the current student, level by level
        as the module's docstring says; `protocol(item, nextitem)` runs one. Afterwards `results`
        holds every outcome and `views` each lower level's."""
        if self.only is not None:
            items = [item for item in items if grade_id_of(item) in self.only]
        if not self.with_diagnoses:
            items = [item for item in items if not item.get_closest_marker("diagnosis")]
        self._order = {item.nodeid: index for index, item in enumerate(items)}
        self._cells = {grade_id_of(item) for item in items}
        level_of = {item.nodeid: self._level(item) for item in items}
        checks = [item for item in items if not item.get_closest_marker("diagnosis")]
        diagnoses = [item for item in items if item.get_closest_marker("diagnosis")]
        levels = sorted(set(level_of.values()))
        forked = getattr(self._student, "forked", None)  # a sandbox: a fork of the submission
        with contextlib.ExitStack() as forks:
            for level in levels:
                own = [item for item in checks if level_of[item.nodeid] == level]
                if level != levels[0]:
                    if forked is not None:
                        forks.enter_context(forked())
                    self.results = [result for result in self.results if not result.diagnosis]  # said anew
                _run_in_order(protocol, own)
                _run_in_order(protocol, [item for item in diagnoses if level_of[item.nodeid] <= level])
                repairs = getattr(self._student, "repairs", None) is not None and any(
                    not result.passed and not result.diagnosis for result in self.results)
                self.finish_pending(last=level == levels[-1] and not repairs)
                if repairs:
                    started = time.perf_counter()
                    self.run_repairs(protocol, [item for item in items if level_of[item.nodeid] <= level])
                    self.repair_seconds += time.perf_counter() - started
                if level != levels[-1]:
                    state = getattr(self._student, "state_now", None)
                    self.views[level] = ([dataclasses.replace(result) for result in self.results],
                                         state() if state is not None else {})
                    self.repaired_views[level] = dict(self.repaired)

    def _level(self, item):
        return 0 if self.levels is None else self.levels(grade_id_of(item), item.name)

    @pytest.fixture
    def diagnose(self, request):
        """`diagnose(finding, say)` for a diagnosis (checklib.diagnosis): `finding()` is a generator
        that asks the submission its questions and yields the what-if runs it needs (localise.WhatIf);
        `say(found)` is what the student reads in this view, "" for nothing. Returns what to say
        now, or "" while the what-ifs wait (they run after every other question of the view, and
        what they lead to is recorded then: `finish_pending`). A cell's finding is found once."""
        grade_id = grade_id_of(request.node)

        def diagnose(finding, say, cause=None):
            if grade_id in self.found:
                return self._said(grade_id, self.found[grade_id], say, cause)
            started = localise.Started(finding())
            if started.request is None:
                self.found[grade_id] = started.result
                return self._said(grade_id, started.result, say, cause)
            self.pending.append((request.node, grade_id, started, (say, cause)))
            return ""
        return diagnose

    def _said(self, grade_id, found, say, cause):
        """What the diagnosis says of `found`, with the mutants it names (`cause(found)`) kept."""
        said = say(found)
        self.causes[grade_id] = tuple(cause(found)) if said and cause is not None else ()
        return said

    def finish_pending(self, last):
        """Answer the waiting diagnoses' what-if runs and record what each then says. In a sandbox
        they run sealed (`student.what_ifs`): in a fork of the submission, or, when they are the
        `last` questions of the submission, in the submission itself."""
        pending, self.pending = self.pending, []
        if not pending:
            return
        what_ifs = getattr(self._student, "what_ifs", None)
        with what_ifs(last) if what_ifs is not None else contextlib.nullcontext():
            for item, grade_id, started, (say, cause) in pending:
                try:
                    found = localise.complete(started.rest(), self._student)
                    said = self._said(grade_id, found, say, cause)
                except Exception:  # noqa: BLE001 (a diagnosis that breaks says nothing, as during its run)
                    continue
                self.found[grade_id] = found
                if said:
                    self._insert_diagnosis(item, message_of_text(said))

    def run_repairs(self, protocol, items):
        """Ask each failing cell's failing checks (among `items`, run so far) again where the
        mistake its feedback names is fixed: a repair run (grading/repairs.py) from the student's
        `repairs` planner, in a sealed fork (`student.repairing`), one for the repairs that change
        the same cells. Sets `repaired`: {grade id: (the repair's kind, {check name: passed})}, a
        fixed-inputs check passing only with the checks it needs, and None for a check that still
        fails where what it builds on still fails too (a second mistake there); a cell whose repair
        could not be made, or told nothing, has none. Only pass or fail is kept: what the fork said
        is never quoted; after a repair with the reference's answers in it, only whether all passed
        (grading/repairs.py says why)."""
        planner, builds_on = self._student.repairs, self.assignment.builds_on
        failed = {(result.grade_id, result.name) for result in self.results
                  if not result.passed and not result.diagnosis}
        failing = {grade_id for grade_id, _ in failed}
        self.repaired, groups = {}, {}
        for grade_id in sorted(failing, key=lambda cell: min(self._order.get(item.nodeid, 0) for item in items
                                                             if grade_id_of(item) == cell)):
            upstream = [cell for cell in builds_on.get(grade_id, ()) if cell in failing]
            causes = self.causes.get(grade_id, ())
            repair = planner.upstream(grade_id, {cell: self.causes.get(cell, ()) for cell in upstream}) if upstream \
                else planner.own(grade_id, causes) if causes else None
            if repair is not None:  # repairs that change the same cells share one run (a fork, the cells once)
                groups.setdefault((repair.kind == "reference", repair.fixed), []).append((grade_id, upstream, repair))
        for members in groups.values():
            for grade_id, upstream, repair, passed, own in self._repair_together(protocol, items, failed, planner,
                                                                                 members):
                self._record_repair(items, grade_id, upstream, repair, passed, own)

    def _repair_together(self, protocol, items, failed, planner, members):
        """[(grade id, upstream, repair, {check name: passed}, what its diagnosis named there)] for
        `members` ([(grade id, upstream cells, Repair)] that change the same cells), asked in one
        repair run; [] when it could not be made or told nothing."""
        run = planner.merged([repair for _, _, repair in members])
        mine = {cell for grade_id, upstream, _ in members for cell in (grade_id, *upstream)}
        saved, self.results = self.results, [result for result in self.results if result.grade_id not in mine]
        kept = self.found, self.causes, self.pending
        self.found, self.causes, self.pending = dict(self.found), dict(self.causes), []
        found = []
        try:
            with self._student.repairing(run.cells) as raised:
                if not run.lines_up(raised):
                    return []
                for grade_id, upstream, repair in members:
                    passed = self._ask_again(protocol, items, grade_id, failed)
                    if passed is None:
                        return []
                    still = repair.kind == "upstream" and not all(passed.values())
                    if still and not self._upstream_passes(protocol, items, upstream, failed):
                        # What it builds on still fails here (a second mistake there): a check that passes
                        # follows from the mistakes undone; of one that still fails this run tells nothing.
                        found.append((grade_id, upstream, repair, {name: ok or None for name, ok in passed.items()}, ""))
                        continue
                    # the cell's own mistake, once what it builds on is fixed: its diagnosis, asked there
                    # too (a fork with the student's code alone: what it names is theirs; checks/rootcause.py)
                    found.append((grade_id, upstream, repair, passed,
                                  self._diagnose_again(protocol, items, grade_id) if still else ""))
        finally:
            self.results = saved
            self.found, self.causes, self.pending = kept
        return found

    def _record_repair(self, items, grade_id, upstream, repair, passed, own):
        """Keep what a repair run showed of `grade_id` (`repaired`), and say it where it still fails
        once what it builds on is repaired."""
        if repair.kind == "reference":  # one bit: its fork held a reference answer
            passed = dict.fromkeys(passed, all(passed.values()))
        self.repaired[grade_id] = (repair.kind, passed)
        diagnosis = next((item for item in items if grade_id_of(item) == grade_id
                          and item.get_closest_marker("diagnosis")), None)
        if (repair.kind in ("upstream", "reference") and not all(passed.values()) and None not in passed.values()
                and diagnosis is not None):
            self._insert_diagnosis(diagnosis, message_of_text(
                still_wrong_once_fixed(upstream, own, right=repair.kind == "reference")))

    def _diagnose_again(self, protocol, items, grade_id):
        """What `grade_id`'s diagnosis names in the repair the student is in now ("" for nothing)."""
        diagnosis = [item for item in items if grade_id_of(item) == grade_id and item.get_closest_marker("diagnosis")]
        if not diagnosis or getattr(self._student, "lost", None):
            return ""
        _run_in_order(protocol, diagnosis)
        self.finish_pending(last=False)
        return next((result.message for result in self.results if result.grade_id == grade_id and result.diagnosis
                     and result.message), "") if not getattr(self._student, "lost", None) else ""

    def _upstream_passes(self, protocol, items, upstream, failed):
        """Whether every failing check of the `upstream` cells passes in the repair the student is in
        now (False when the submission was lost meanwhile: it showed nothing)."""
        for cell in upstream:
            passed = self._ask_again(protocol, items, cell, failed)
            if passed is None or not all(passed.values()):
                return False
        return True

    def _ask_again(self, protocol, items, grade_id, failed):
        """{check name: passed} of `grade_id`'s checks among `failed` ({(grade id, name)}), asked
        again with the student in a repair (and the checks a fixed-inputs one needs: it passes only
        with them); None when the submission was lost meanwhile (it showed nothing)."""
        asked = {name for cell, name in failed if cell == grade_id}
        needed = {need for item in items if (grade_id, item.name) in failed
                  for need in getattr(item.get_closest_marker("fixed_inputs"), "args", ())}
        _run_in_order(protocol, [item for item in items if grade_id_of(item) == grade_id
                                 and not item.get_closest_marker("diagnosis")
                                 and (item.name in asked or item.name.split("[")[0] in needed)])
        if getattr(self._student, "lost", None):
            return None
        again = [result for result in self.results if result.grade_id == grade_id]
        still = {result.name.split("[")[0] for result in again if not result.passed}
        return {result.name: result.passed and not set(result.needs) & still for result in again}

    def pytest_configure(self, config):
        for name, description in MARKERS.items():
            config.addinivalue_line("markers", f"{name}: {description}")

    @pytest.fixture
    def student(self):
        return self._student

    @pytest.fixture
    def reference(self):
        return reference_module.load(self.assignment.solutions)

    @pytest.fixture
    def error_model(self):
        """{exercise: [Mutant]} of the assignment (checks/errormodel.py)."""
        return errormodel.load(self.assignment.folder)

    @pytest.fixture
    def step_names(self):
        """{reference variable: words} of the assignment's errors.toml `[steps]` (checks/localise.py)."""
        return errormodel.step_names(self.assignment.folder)

    @pytest.fixture
    def solutions(self):
        return self.assignment.solutions

    @pytest.fixture
    def resources(self):
        """The assignment's RESOURCES, for mutants probed in this process."""
        return self.assignment.resources()

    @pytest.fixture
    def cell_failed(self, request):
        """Whether a check of this test's graded cell has failed so far."""
        grade_id = grade_id_of(request.node)
        return any(r.grade_id == grade_id and not r.passed for r in self.results)

    @pytest.fixture
    def upstream_failed(self, request):
        """Whether a cell this test's cell builds on (`[builds_on]`) failed, or is not graded in this
        session (in-kernel grading runs one cell at a time): either way its own code is not known right.
        In the view before the due date a cell whose checks are all hidden has not failed."""
        upstream = set(self.assignment.builds_on.get(grade_id_of(request.node), ()))
        return bool(upstream - self._cells) or any(r.grade_id in upstream and not r.passed for r in self.results)

    @pytest.fixture
    def named_failed(self, request):
        """Whether a check of this test's cell failed naming the mistake it saw (verdict.NamedMistake)."""
        grade_id = grade_id_of(request.node)
        return any(r.grade_id == grade_id and not r.passed and r.named for r in self.results)

    @pytest.fixture
    def failed_checks(self, request):
        """Names (without parameters) of this test's cell's checks that failed so far."""
        grade_id = grade_id_of(request.node)
        return {r.name.split("[")[0] for r in self.results if r.grade_id == grade_id and not r.passed}

    @pytest.fixture
    def seed(self, request):
        # A keyed hash of the batch's seed (course.derive_seed): student code sees some checks' seeds
        # (what-ifs and traces are asked with one), and must learn nothing of the batch's from them.
        return derive_seed(self.seed_key, self.run_seed, request.node.name)

    @pytest.fixture
    def rng(self, seed):
        return torch.Generator().manual_seed(seed)

    def pytest_collection_modifyitems(self, items):
        # We report our own message, never pytest's failure report, which re-parses
        # the check's source for every failure (about 30 ms each).
        for item in items:
            item.repr_failure = _short_repr
            item._repr_failure_py = _short_repr
        # A diagnosis speaks only when another check of its cell failed: it runs after all of them,
        # wherever the file defines it (an instructor may append checks below it); run_views runs
        # every diagnosis after every check.
        files = {}
        for item in items:
            files.setdefault(item.module, len(files))
        items.sort(key=lambda item: (files[item.module], bool(item.get_closest_marker("diagnosis"))))
        names = {(grade_id_of(item), item.name.split("[")[0]) for item in items}
        for item in items:
            fixed = item.get_closest_marker("fixed_inputs")
            unknown = [n for n in (fixed.args if fixed else ()) if (grade_id_of(item), n) not in names]
            if fixed and (unknown or not fixed.args):
                self.collect_errors.append(f"{item.nodeid}: fixed_inputs needs the names of checks on random"
                                           f" inputs in the same file; unknown: {unknown or 'none given'}")
            after = item.get_closest_marker("after")
            unknown = [n for n in (after.args if after else ()) if (grade_id_of(item), n) not in names]
            if after and (unknown or not after.args):
                self.collect_errors.append(f"{item.nodeid}: after needs the names of checks in the same file;"
                                           f" unknown: {unknown or 'none given'}")

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_call(self, item):
        """A mistake the check repaired to go on (verdict.expect_tensor: several values returned) fails
        it all the same, said with what the check found past it."""
        if item.get_closest_marker("diagnosis"):  # (it names mistakes from its probe's observations)
            yield
            return
        token = repairs_begin()
        outcome = yield
        ending = repairs_end(token, outcome.exception)
        if ending is not None:
            outcome.force_exception(ending)

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_makereport(self, item, call):
        outcome = yield
        report = outcome.get_result()
        if item.get_closest_marker("diagnosis"):
            self._record_diagnosis(item, call, report)
        elif report.when == "call" or (report.when == "setup" and not report.passed):
            marker = item.get_closest_marker("weight")
            fixed = item.get_closest_marker("fixed_inputs")
            after = item.get_closest_marker("after")
            doc = (item.function.__doc__ or item.name).strip().splitlines()[0]
            self.results.append(CheckResult(
                grade_id=grade_id_of(item), name=item.name, description=doc,
                weight=float(marker.args[0]) if marker else 1.0,
                passed=report.passed,
                message="" if report.passed or call.excinfo is None else message_of(call.excinfo),
                needs=tuple(fixed.args) if fixed else (),
                after=tuple(after.args) if after else (),
                named=bool(not report.passed and call.excinfo is not None and call.excinfo.errisinstance(NamedMistake)),
                apart=bool(not report.passed and call.excinfo is not None and call.excinfo.errisinstance(MistakeApart)),
                crash=self._crash(item, call, report), order=self._order.get(item.nodeid, 0),
            ))

    def _crash(self, item, call, report):
        """`crash_of` the check when it broke, else ""."""
        if report.passed or call.excinfo is None or not crashed(call.excinfo):
            return ""
        return crash_of(item, call.excinfo, self.assignment.course.root)

    def _record_diagnosis(self, item, call, report):
        """A diagnosis is listed only when it names a mistake, first in its cell, for no points.
        One that fails otherwise (it could not probe) says nothing: the cell's checks speak."""
        if report.when != "call" or report.passed or call.excinfo is None:
            return
        if not call.excinfo.errisinstance(NamedMistake):
            return
        self._insert_diagnosis(item, message_of(call.excinfo))

    def _insert_diagnosis(self, item, message):
        grade_id = grade_id_of(item)
        result = CheckResult(grade_id=grade_id, name=item.name,
                             description=(item.function.__doc__ or item.name).strip().splitlines()[0],
                             weight=0.0, passed=False, message=message, named=True, diagnosis=True,
                             order=self._order.get(item.nodeid, 0), cause=self.causes.get(grade_id, ()))
        first = next((i for i, r in enumerate(self.results) if r.grade_id == grade_id), len(self.results))
        self.results.insert(first, result)


def _run_in_order(protocol, items):
    for index, item in enumerate(items):
        protocol(item, items[index + 1] if index + 1 < len(items) else None)


