"""`SandboxStudent`: the probe API of `inside/student.NamespaceStudent`, each call sent to the
submission in its sandbox and its answer read back as plain data. The names it answers are
`wire.PROBES`, the contract both sides share; answers that are claims (`CHECKED`) are checked
before a check reads them."""
import contextlib
import time

from autograder import wire


PROBES = wire.PROBES  # the contract, in one place
MAX_ERROR_TEXT = 2000  # characters of an error text from the sandbox that the grader reads
REPAIR_MARGIN = 3.0  # seconds of the submission's time that must be left to start a repair run


class SandboxStudent:
    """The probe API, answered by the submission running in a sandbox."""

    def __init__(self, sandbox):
        self.sandbox = sandbox
        self.lost = None  # why later probes cannot reach the submission (student-facing)
        self.lost_kind = None
        self.fork_lost = None  # (kind, message, how it ended) when a fork of the hidden checks was lost
        self._sealed = self._unanswered = self._repairing = False
        self.repairs = None  # grading/repairs.Planner: the repair runs this submission's feedback can have

    def lose(self, kind, detail):
        self.lost_kind, self.lost = kind, lost_message(kind, detail)

    def state_now(self):
        """What a view made now says of the submission: whether it was lost, its memory bound."""
        return {"lost": self.lost, "lost_kind": self.lost_kind, "memory": self.sandbox.memory_note()}

    @contextlib.contextmanager
    def forked(self):
        """Probes inside go to a fork of the process they went to, whose state never comes back to it
        (the checks of a higher visibility level run there, after every check below it; see
        checks/plugin.py). Forks nest. Where it cannot fork (a process bound reached), they go where
        they went: nothing a lower level shows is asked afterwards."""
        if self.lost:
            yield
            return
        why = self.sandbox.open_fork(sealed=False)
        if why:
            yield
            return
        saved = self.lost, self.lost_kind
        try:
            yield
        finally:
            lost = self.lost_kind, self.lost
            ending = self.sandbox.close_fork()
            self.lost, self.lost_kind = saved
            if lost[1] and self.fork_lost is None:  # the innermost loss: where the checks stopped
                self.fork_lost = (lost[0], lost[1], ending[1] if len(ending) > 1 and type(ending[1]) is str else "")
            if ending[0] not in ("joined", "refused"):  # the process it was forked from is gone too
                self.lose(ending[0], ending[1] if len(ending) > 1 else None)

    @contextlib.contextmanager
    def what_ifs(self, last=False):
        """The what-if runs of localisation inside go to a sealed fork of the process probes go to,
        which can pass nothing back and ends afterwards: the reference's values they carry never
        reach a process that answers later. When they are the `last` questions that process will be
        asked, it seals itself instead (a fork would cost its time for nothing). Where neither can
        be done, they go unanswered."""
        if self.lost:
            yield
            return
        saved = self.lost, self.lost_kind
        why = self.sandbox.seal() if last else self.sandbox.open_fork(sealed=True)
        self._sealed, self._unanswered = True, bool(why)
        try:
            yield
        finally:
            self._sealed = self._unanswered = False
            ending = ("sealed" if last else "refused", why) if last or why else self.sandbox.close_fork()
            self.lost, self.lost_kind = saved  # a what-if that ended the process costs the student nothing
            if ending[0] not in ("joined", "refused", "sealed"):
                self.lose(ending[0], ending[1] if len(ending) > 1 else None)

    @contextlib.contextmanager
    def repairing(self, cells):
        """Inside, every probe goes to a sealed fork of the process probes go to, which has first run
        `cells` ([(name, source)]: a repair, grading/repairs.py). Yields what each cell raised (its
        exception's name, or ""), or None where it could not be done (then nothing inside is
        asked). Only whether checks pass there is used: what the fork says is never quoted, since it
        ran a named fix or the reference's code. A repair that ends the fork costs the student
        nothing."""
        deadline = self.sandbox.deadline
        left = deadline - time.monotonic() if deadline is not None else 0
        if self.lost or left < REPAIR_MARGIN:
            yield None  # (a repair never spends the time the submission's own checks may need)
            return
        saved = self.lost, self.lost_kind
        why = self.sandbox.open_fork(sealed=True)
        if why:
            yield None
            return
        # its cells get a third of what is left: the checks asked there, and those of any level after, the rest
        reply = self.sandbox.probe("repair", [list(map(list, cells)), round(left / 3, 2)], {})
        raised = reply[1] if (type(reply) in (list, tuple) and len(reply) > 1 and reply[0] == "repaired"
                              and type(reply[1]) is list and len(reply[1]) == len(cells)
                              and all(type(what) is str for what in reply[1])) else None
        self._repairing = raised is not None
        try:
            # (exception names, bounded, and compared with a list: never quoted)
            yield [what[:80] for what in raised] if raised is not None else None
        finally:
            self._repairing = False
            ending = self.sandbox.close_fork()
            self.lost, self.lost_kind = saved
            if ending[0] not in ("joined", "refused"):
                self.lose(ending[0], ending[1] if len(ending) > 1 else None)

    def _probe(self, method, args, kwargs):
        from autograder.wire import StudentError

        if self.lost:
            raise StudentError(self.lost)
        if self._repairing:
            pass  # a repair run: every question, whose answers only say whether a check passes
        elif self._sealed != (method == "trace" and bool(kwargs.get("trials"))) or self._unanswered:
            # what-if runs only in the sealed fork, and nothing else there: what a page quotes is
            # never what a process with the reference's values said
            raise StudentError("this question is not asked here")
        reply = self.sandbox.probe(method, args, kwargs)
        if type(reply) not in (list, tuple) or not reply:
            reply = ("unreadable", None)
        kind, detail = reply[0], reply[1] if len(reply) > 1 else None
        if kind == "ok":
            return detail
        if kind == "student_error" and type(detail) is str:
            from autograder.untrusted import without_controls

            # the student's code wrote it: bounded, and without a terminal's escapes, before use
            raise StudentError(without_controls(detail[:MAX_ERROR_TEXT]))
        self.lose(kind, detail)
        raise StudentError(self.lost)


def lost_message(kind, detail):
    """Why the submission's process cannot answer any more (student-facing)."""
    if kind == "timeout":
        limit = f"the {detail:g} s time limit" if type(detail) in (int, float) else "the time limit"
        return (f"your code did not finish within {limit} and was stopped."
                " Look for an endless loop or a much bigger computation than needed.")
    if kind == "died":
        return ("your code ended or crashed the Python process (for example with os._exit, or by"
                " running out of memory), so the checks after that point could not run.")
    if kind == "gone":
        return "your code had already been stopped, so this check could not run."
    return "your code sent back something that is not plain data (tensors, numbers, strings)."


def _origin(answer):
    """`origin`'s answer as the grader may believe it: the sandbox watches every module call, so
    "not watched" (what in-process grading says) is a claim of the student's code, and counts as
    "not found"; so does an answer that is not of origin's form."""
    found = answer if type(answer) is dict else {}
    if found.get("watched") is not True or found.get("found") is not True:
        return {"watched": True, "found": False}
    inputs = found.get("inputs")
    if (type(found.get("handle")) is not str or type(found.get("type")) is not str
            or type(found.get("is_class")) is not bool or type(inputs) is not list
            or not all(type(shape) is list and all(type(n) is int for n in shape) for shape in inputs)):
        return {"watched": True, "found": False}
    return {"watched": True, "found": True, "handle": found["handle"], "type": found["type"],
            "is_class": found["is_class"], "inputs": inputs, "training": found.get("training") is True,
            "changed": found.get("changed") is True}


CHECKED = {"origin": _origin}  # probes whose answer is a claim, checked before a check reads it


def _make_probe(method):
    check = CHECKED.get(method)

    def probe(self, *args, **kwargs):
        answer = self._probe(method, args, kwargs)
        return check(answer) if check is not None else answer

    probe.__name__ = method
    probe.__doc__ = f"`NamespaceStudent.{method}`, answered in the sandbox."
    return probe


for _method in PROBES:
    setattr(SandboxStudent, _method, _make_probe(_method))
