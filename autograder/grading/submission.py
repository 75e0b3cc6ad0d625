"""Grade one submission: sanitize, run it in a sandbox, check it on the trusted side.

A `GradingWorker` holds one worker's warm state (its sandbox and collected checks)
and grades submissions one after another into `record.Result`s. The local pool
makes one per process (`worker_setup`, `grade_job`); a Dask worker one per course
bundle (cluster/).
"""
import gc
import os
import time
from dataclasses import dataclass, field
from pathlib import Path

import nbformat

from autograder.course import Course, derive_seed
from autograder.record import GRADED, INVALID, CellError, CellScore, CheckOutcome, Result, cell_in_words
from autograder.grading.sandbox.isolation import NoSandbox
from autograder.checks.errormodel import load as load_error_model, mark_unexplained, reproduced
from autograder.checks.errormodel import warm_up as warm_up_reproductions
from autograder.course.regions import read_regions
from autograder.grading.repairs import Planner
from autograder.checks.rootcause import (consequences, missing_because_crashed, one_cause_per_cell, root_cause_once,
                                         still_failing_wait, what_fixing_earns)
from autograder.course.visibility import Visibility
from autograder.grading.selfcheck import PoisonedInterpreter
from autograder.untrusted import without_controls
from autograder.grading.notebook import (MAX_NOTEBOOK_BYTES, InvalidNotebook, Sanitized, grade_cells, owners,
                                         read_notebook, sanitize, sha256, stub_errors, unanswered)

FAILED_CELLS_SHOWN = 5
REUSABLE = "ran every cell and answered every check, in a sandbox found clean afterwards"


@dataclass
class BatchSpec:
    """Everything a worker needs to grade submissions of one assignment."""

    assignment: str  # its name
    course: str  # the course folder that holds it
    seed: int
    limits: dict = field(default_factory=dict)
    keep_notebook: bool = False  # hand each result's sanitized notebook back (result.graded_notebook)
    isolation: str = "bubblewrap"  # or "none": no sandbox here and the TA passed --unsafe-no-sandbox
    max_notebook_bytes: int = MAX_NOTEBOOK_BYTES  # a notebook's size without outputs (see notebook.py)


class GradingWorker:
    """One worker's warm grading state: its sandbox, its collected checks and the
    assignment's source and release notebooks. A local pool process holds one; so does
    a Dask worker, per course bundle (see cluster/workers.py).

    A failure while starting is kept and raised on every submission, in words.
    """

    def __init__(self, spec):
        self.spec = spec
        self.setup_error = None
        self.sandbox = self.checks = self.assignment = self.source = self.release = self.owners = self.stubs = None
        self._mutant_outcomes = {}  # (grade id, mutant names, seed) -> the checks the mistake alone passes
        self._repair_parts = None  # (error model, reference regions), read once: grading/repairs.py
        self.last_notebook = None  # the sanitized notebook of the last submission graded, if any

    def setup(self, slot=0, pin=False, handover=None):
        try:
            self._setup(slot, pin, handover)
        except (NoSandbox, PoisonedInterpreter) as refusal:  # the whole batch must stop: see LocalScheduler
            self.setup_error = refusal
        except Exception as error:
            self.setup_error = RuntimeError(f"this grading worker could not start: {type(error).__name__}: {error}")
        return self

    def _setup(self, slot, pin, handover):
        spec = self.spec
        if pin:
            _pin_to_one_core(slot)
        assignment = Course(Path(spec.course)).assignment(spec.assignment)
        self.sandbox = slot_sandbox(spec, assignment, slot)
        if handover is not None:
            try:
                self.sandbox.adopt(handover)  # launched for us by the grader, already warming up
            except OSError:  # its error file is gone: the grader closes it, we start our own
                handover.control.close()
                handover = None
        if handover is None:
            self.sandbox.launch()  # first: it starts (about 1.5 s) while this process gets ready below
        from autograder.checks.runner import CheckSession  # torch and pytest, unless preloaded
        from autograder.grading.selfcheck import verify

        self._prepare(assignment)
        verify()  # this process compares answers: its comparisons must be torch's own
        self.checks = CheckSession(assignment)
        self._warm_up()
        self.sandbox.await_hello()
        # This process lives for the whole batch: keep the garbage collector from
        # walking torch's and pytest's objects again and again.
        gc.freeze()

    def _prepare(self, assignment):
        """torch, and the assignment's source and release notebooks for sanitizing."""
        import torch

        from autograder.wire import keep_freed_memory

        torch.set_num_threads(1)
        keep_freed_memory()  # replies of many megabytes arrive all the time
        self.assignment = assignment
        self.visibility = Visibility.of(assignment)  # checks hidden until the due date run last, in views
        self.source = nbformat.read(assignment.source_notebook, as_version=4)
        self.release = nbformat.read(assignment.release_notebook, as_version=4)
        self.owners, self.stubs = owners(self.source), stub_errors(self.release)

    def _warm_up(self):
        """torch's first-call costs, paid here while the sandbox starts, not by the first
        submission whose diagnosis the grader reproduces in this process (checks/errormodel.py)."""
        try:
            if load_error_model(self.assignment.folder):
                warm_up_reproductions()
        except Exception:  # noqa: BLE001 (only a speed-up: a real problem shows when the checks run)
            pass

    def close(self):
        checks, self.checks = self.checks, None
        if checks:
            checks.close()
        sandbox, self.sandbox = self.sandbox, None
        if sandbox:
            sandbox.close(graceful=False)

    def grade(self, submission):
        """Grade one Submission; never raises for a student's fault."""
        spec, started, cpu = self.spec, time.perf_counter(), time.process_time()
        if self.setup_error is not None:
            raise self.setup_error
        base = {"student_id": submission.student_id, "path": str(submission.path)}
        self.last_notebook = None
        clean = getattr(submission, "clean", None)  # the batch already read and sanitized it
        if clean is not None and submission.sha256:
            base["notebook_sha256"] = submission.sha256
            clean = Sanitized(clean.notebook, clean.cells, list(clean.tampering))
        else:
            try:
                base["notebook_sha256"] = sha256(submission.path)
            except OSError as error:
                return self.invalid_result(base, f"the file could not be read ({error.strerror})", started)
            try:
                clean = sanitize(read_notebook(submission.path, spec.max_notebook_bytes), self.source, self.release)
            except InvalidNotebook as error:
                return self.invalid_result(base, str(error), started)
        base["timings"] = {"read_and_sanitize": round(time.perf_counter() - started, 4)}
        if submission.ignored:
            clean.tampering.append(ignored_note(submission))
        result = self.grade_clean(clean, base, started)
        self.last_notebook = clean.notebook
        if spec.keep_notebook:  # for the outputs that write it (autograded/), in the grader's process
            result.graded_notebook = clean.notebook
        # The grader's own CPU for this submission (sanitizing, checks, outputs), as
        # opposed to "sandbox_cpu", the student's process.
        result.timings["grader_cpu"] = round(time.process_time() - cpu, 4)
        return result

    def grade_clean(self, clean, base, started):
        from autograder.grading.sandbox.proxy import SandboxStudent

        spec, sandbox = self.spec, self.sandbox
        points = grade_cells(self.source)
        notes, cell_errors, clean_cells = list(clean.tampering), [], clean.cells
        untouched = unanswered(self.owners, self.release, clean_cells)  # as released: one line, no repairs
        timings, clock = base["timings"], time.perf_counter()
        # Student code's own random numbers come from a seed derived from the batch's with a key no
        # student knows: torch.initial_seed() must not tell the batch's seed.
        first = _run_cells(sandbox, clean.cells, derive_seed(self.assignment.seed_key, spec.seed, "cells"))
        timings["run_cells"] = round(time.perf_counter() - clock, 4)
        student = SandboxStudent(sandbox)
        try:
            report = _cell_report(first, [name for name, _ in clean.cells])
            if report is not None:
                cell_errors = [entry for entry in report if entry["error"]]
                student.repairs = self._planner(clean.cells, report, untouched)
                timings["cells_own_time"] = round(sum(entry["seconds"] for entry in report), 4)
            else:
                kind = first[0] if first[0] in ("timeout", "died") else "unreadable"
                student.lose(kind, first[1] if kind == "timeout" else None)
                notes.append("the notebook did not finish running: " + student.lost)
            clock = time.perf_counter()
            views = self.checks.run_views(student, spec.seed, self.visibility.level if self.visibility.hides_any()
                                          else None)
            timings["checks"] = round(time.perf_counter() - clock, 4)
            if views.repair_seconds:  # (part of "checks": the repair runs, grading/repairs.py)
                timings["repair_runs"] = round(views.repair_seconds, 4)
        finally:
            ending, clean, memory = None, False, None
            if sandbox.process:
                ending = sandbox.finish()
                clean, memory = sandbox.last_clean, sandbox.last_memory
                if sandbox.last_cpu is not None:  # the submission's own process, cells and probes
                    timings["sandbox_cpu"] = round(sandbox.last_cpu, 4)
                if sandbox.last_peak is not None:  # what its cgroup held at most: memory, files and all
                    timings["sandbox_peak_bytes"] = sandbox.last_peak
        builds_on = self.assignment.builds_on
        for cells, repaired in [(views.cells, views.repaired)] + [
                (cells, views.repaired_levels.get(level, {})) for level, (cells, _) in views.levels.items()]:
            mark_unexplained(cells, self._reproduced, builds_on, {cell: passed for cell, (_, passed) in repaired.items()})
            what_fixing_earns(still_failing_wait(cells, repaired), repaired, points)
        whole = explained(views.cells, cell_errors, builds_on)
        state = {"lost": student.lost, "lost_kind": student.lost_kind, "memory": memory}
        # An exercise left as released: its checks' messages and its cells' tracebacks (a stub's
        # NotImplementedError, a check cell's NameError) say nothing more.
        shown_errors = [error for error in cell_errors if not self._says_unanswered(error, untouched)]
        result = build_result(spec, base, points, whole, ending_notes(notes, state, ending, student.fork_lost),
                              shown_errors, started, untouched)
        if self.visibility.hides_any():
            result.visibility = self.visibility.key()
            result.levels = sorted({self.visibility.level(cell, check.name) for cell, found in views.cells.items()
                                    for check in found.checks})
            result.views = [build_view(level, points, explained(cells, cell_errors, builds_on), views.cells,
                                       ending_notes(notes, then, ending if then.get("lost_kind") else None), untouched)
                            for level, (cells, then) in sorted(views.levels.items())]
        if report is not None and student.lost is None and student.fork_lost is None and clean:
            result.reusable = REUSABLE
        return result

    def _planner(self, cells, report, untouched):
        """The repair runs this submission can have (grading/repairs.py), or None without an error model."""
        if self._repair_parts is None:
            folder = self.assignment.folder
            self._repair_parts = (load_error_model(folder), read_regions(self.assignment.solutions))
        model, reference = self._repair_parts
        if not model:
            return None
        return Planner(cells, {entry["cell"]: bool(entry["error"]) for entry in report}, self.owners, model, reference,
                       untouched)

    def _reproduced(self, grade_id, causes):
        """errormodel.reproduced for this batch's seed, once per mistake and worker."""
        key = (grade_id, tuple(causes), self.spec.seed)
        if key not in self._mutant_outcomes:
            if len(self._mutant_outcomes) > 500:
                self._mutant_outcomes.clear()
            try:
                self._mutant_outcomes[key] = reproduced(self.checks, self.assignment, grade_id, causes, self.spec.seed)
            except Exception:  # noqa: BLE001 (not verified: the cell reads as it did before the check)
                self._mutant_outcomes[key] = None
        return self._mutant_outcomes[key]

    def _says_unanswered(self, error, untouched):
        """Whether a cell's error says only that exercises are not answered yet: it is a cell of an
        exercise left as released (its answer, its check), or it stopped in a release stub."""
        last = (error["error"].rstrip().splitlines() or [""])[-1]
        return bool(untouched) and (self.owners.get(error["cell"]) in untouched or last in self.stubs)

    def invalid_result(self, base, message, started):
        return invalid_result(self.spec, grade_cells(self.source), base, message, started)


_worker = None  # this pool process's GradingWorker


def worker_setup(spec, slots=None, pin=False, handovers=(), lifeline=None):
    """Per local pool process: start a sandbox (or adopt the one launched for this slot, see
    `sandbox.Handover`) and, while it warms up, the checks (called once)."""
    global _worker
    _die_with_parent()
    if lifeline is not None:
        _die_with_grader(lifeline)
    slot = slots.get() if slots is not None else 0
    mine = None
    for handover in handovers:
        if handover.slot == slot and mine is None:
            mine = handover
        else:
            handover.control.close()  # another worker's: its sandbox must see that worker alone
    _worker = GradingWorker(spec).setup(slot, pin, mine)
    # Forked pool workers leave through os._exit, skipping atexit; multiprocessing's
    # finalizers do run.
    from multiprocessing.util import Finalize

    Finalize(None, worker_teardown, exitpriority=10)


def grade_job(submission):
    """Grade one Submission on this pool process (see worker_setup)."""
    return _worker.grade(submission)


def slot_sandbox(spec, assignment, slot):
    """The sandbox (not started yet) of a worker slot in this batch."""
    return assignment_sandbox(assignment, spec.limits, spec.isolation == "none", slot, conceal=spec.course)


def assignment_sandbox(assignment, limits, unsafe_no_sandbox=False, slot=0, conceal=None):
    """A sandbox (not started yet) for `assignment`'s submissions: its limits, its sandbox
    code and settings, and `conceal` (default: the assignment's course folder) hidden."""
    from autograder.grading.sandbox.limits import Limits
    from autograder.grading.sandbox.process import Sandbox

    return Sandbox(slot, Limits(**limits), unsafe_no_sandbox, conceal=[conceal or str(assignment.course.root)],
                   extra_files=assignment.sandbox_files())


def core_of(slot, cores=None):
    """The core a local worker's slot runs on (its sandbox's too), of `cores` (default: this
    thread's usable cores)."""
    cores = sorted(cores if cores is not None else os.sched_getaffinity(0))
    return cores[slot % len(cores)]


def _pin_to_one_core(slot):
    """Keep this worker and its sandbox (which inherits the mask) on one core.

    They take turns (the checks wait for the sandbox's answers and the other way
    round), so one core is all they can use; on one core each hand-over is a
    plain context switch instead of waking a process on another core. Only the
    local scheduler asks for this, with no more workers than usable cores.
    """
    try:
        os.sched_setaffinity(0, {core_of(slot)})
    except (AttributeError, OSError):
        pass


def worker_teardown():
    if _worker is not None:
        _worker.close()
    # Skip the interpreter's slow tear-down of torch and friends: results were sent.
    os._exit(0)


def _die_with_grader(lifeline):
    """Leave at once when the grader is gone, even killed with kill -9.

    A worker made by the fork server has the server as its parent, and the server
    lives as long as any worker does, so PR_SET_PDEATHSIG cannot say that the grader
    died. `lifeline` is one end of a socket pair whose other end only the grader holds:
    reading it ends (empty) when the grader closes that end or dies. This worker's own
    sandboxes then die with it (bubblewrap's --die-with-parent)."""
    import threading

    def watch():
        try:
            lifeline.recv(1)
        finally:
            os._exit(1)

    threading.Thread(target=watch, name="lifeline", daemon=True).start()


def _die_with_parent():
    """If the grader is killed (even with kill -9), its workers and sandboxes go too."""
    import ctypes
    import signal

    try:
        ctypes.CDLL(None).prctl(1, signal.SIGKILL, 0, 0, 0)  # PR_SET_PDEATHSIG
    except OSError:
        pass


def _run_cells(sandbox, cells, seed):
    """The child's first reply. A sandbox that fails to start or to take the job is
    the grader's problem, not the student's: restart it once, then give up (the
    submission is then graded again on the next run)."""
    from autograder.grading.sandbox.process import SandboxBroken

    for attempt in range(2):
        try:
            return sandbox.run(cells, seed=seed)
        except SandboxBroken as error:
            sandbox.close(graceful=False)
            if attempt:
                raise RuntimeError(f"the sandbox could not run this submission: {error}") from None


MAX_CELL_ERROR = 2000  # characters of one cell's error kept (the sandbox sends no more unless tampered with)


IGNORED_NAMED = 5  # other notebooks of the same student named in the note; the rest are counted


def ignored_note(submission):
    """The note for a student who handed in several notebooks (their names bounded and made visible)."""
    from autograder.untrusted import listed, visible

    others = listed((Path(name).name for name in submission.ignored), IGNORED_NAMED)
    return f"more than one notebook was handed in; graded {visible(submission.path.name, 120)}, not {others}"


def _cell_report(reply, names):
    """The cell report if `reply` is a well-formed ("ran", [...]) message about the cells named
    `names` (those sent, in order), else None.

    The child is the student's process: it may send anything, so check everything. One entry per
    cell sent, in order, under the name it was sent with (a forged name would become a grade id's
    neighbour on every page); finite seconds (a NaN would reach the result file); and the error
    text bounded and without control characters (an escape sequence would reach the TA's terminal
    and every page)."""
    if len(reply) != 2 or reply[0] != "ran" or type(reply[1]) is not list or len(reply[1]) != len(names):
        return None
    report = []
    for entry, name in zip(reply[1], names):
        if (type(entry) is not dict or entry.get("cell") != name
                or type(entry.get("error")) not in (str, type(None))
                or type(entry.get("seconds")) not in (int, float) or not 0 <= entry["seconds"] < float("inf")):
            return None
        error = entry["error"] if entry["error"] is None else without_controls(entry["error"][-MAX_CELL_ERROR:])
        report.append({"cell": name, "error": error, "seconds": float(entry["seconds"])})
    return report


def explained(cells, cell_errors, builds_on):
    """One view's cells ({grade id: CellResult}) with one cause said once, consequences under
    their cause, and a crash named where it explains a missing name (checks/rootcause.py)."""
    missing_because_crashed(cells, cell_errors)
    one_cause_per_cell(cells)
    root_cause_once(cells, builds_on)
    return consequences(cells)


def ending_notes(notes, state, ending, fork_lost=None):
    """`notes` and what a view says of how the submission's process fared: `state` is
    SandboxStudent's then (lost, lost_kind, memory: its memory bound reached), `ending` how its
    process ended; `fork_lost` (kind, message, how it ended) what a fork of it met, where the
    checks of a higher visibility level ran (said as a run with nothing hidden would say it)."""
    if fork_lost and not state.get("lost"):
        state = {**state, "lost_kind": fork_lost[0], "lost": fork_lost[1]}
        ending = fork_lost[2] if fork_lost[2] != "ok" else ending
    notes = list(notes)
    if state.get("lost_kind") == "died" and ending:
        notes.append(f"how your code's process ended: {ending}")
    if state.get("memory"):
        notes.append(state["memory"])
    elif state.get("lost") and state["lost"] not in " ".join(notes):
        notes.append(state["lost"])
    return notes


def build_view(level, points, cells, whole, notes, untouched=()):
    """The record.View at `level` of the cells judged at that level: each cell's points are the
    share of its checks at that level (the weights of the whole result's checks make the whole)."""
    from autograder.record import View

    scores = []
    for grade_id, cell_points in points.items():
        total = sum(check.weight for check in whole[grade_id].checks)
        here = cells[grade_id].checks
        share = (lambda checks: round(cell_points * sum(c.weight for c in checks) / total, 2) if total else 0.0)
        earned, out_of = share([c for c in here if c.passed]), share(here)
        scores.append(_cell_score(grade_id, min(earned, out_of), out_of, cells[grade_id], grade_id in untouched)
                      if here else CellScore(name=grade_id, score=0.0, max_score=0.0))
    return View(level, scores, notes)


def _cell_score(grade_id, score, out_of, checked, untouched):
    """The CellScore of one graded cell: its feedback text and its checks; a cell left as released
    reads "not answered yet" alone."""
    from autograder.checks.runner import feedback_lines

    output = (f"{grade_id}: {score:g} / {out_of:g} points\n  Not answered yet." if untouched
              else "\n".join(feedback_lines(checked, out_of)))
    return CellScore(name=grade_id, score=score, max_score=out_of, output=output,
                     checks=[_outcome(c) for c in checked.checks], unanswered=untouched)


def _outcome(check):
    return CheckOutcome(name=check.name, description=check.description, passed=check.passed, weight=check.weight,
                        message=check.message, crash=check.crash, because=getattr(check, "because", ""),
                        cause=list(getattr(check, "cause", ()) or ()))


def build_result(spec, base, points, checks, notes, cell_errors, started, untouched=()):
    cells = [_cell_score(grade_id, checks[grade_id].score(cell_points), cell_points, checks[grade_id],
                         grade_id in untouched)
             for grade_id, cell_points in points.items()]
    total = round(sum(cell.score for cell in cells), 2)
    output = [f"{base['student_id']}: {total:g} / {sum(points.values()):g} points"]
    output += [f"Note: {note}" for note in notes]
    for entry in cell_errors[:FAILED_CELLS_SHOWN]:
        output.append(f"{cell_in_words(entry['cell'], capital=True)} raised an error:\n{entry['error'].rstrip()}")
    return Result(**base, assignment=spec.assignment, status=GRADED, score=total, cells=cells,
                  output="\n".join(output), notes=notes, seed=spec.seed, sandbox=spec.isolation,
                  cell_errors=[CellError(cell=e["cell"], error=e["error"]) for e in cell_errors],
                  execution_time=round(time.perf_counter() - started, 3))


def invalid_result(spec, points, base, message, started):
    """A submission that cannot be graded (unreadable, not a notebook, ...): zero, with the reason."""
    cells = [CellScore(name=grade_id, score=0.0, max_score=cell_points, output=f"Not graded: {message}.")
             for grade_id, cell_points in points.items()]
    return Result(**base, assignment=spec.assignment, status=INVALID, cells=cells, seed=spec.seed,
                  output=f"This submission could not be graded: {message}.", notes=[message],
                  execution_time=round(time.perf_counter() - started, 3))
