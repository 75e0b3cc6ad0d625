"""The service's parts, started and stopped together: the database, one lane per assignment,
the recorder and what counts. The web layer (service/app.py) talks to this alone."""
import secrets
import threading
from pathlib import Path

from autograder.course import write_atomically
from autograder.service.counting import Counting
from autograder.service.engine import Lane, Recorder
from autograder.service.lti import Lti
from autograder.service.passback import Sender
from autograder.service.store import Store


class Service:
    def __init__(self, course, assignments, jobs=2, roster=None, isolation="bubblewrap", cluster=None):
        """`cluster`: a grading/cluster/client.py DaskScheduler to grade on (its workers' sandboxes), else
        `jobs` local warm workers."""
        self.course, self.assignments, self.cluster = course, list(assignments), cluster
        self.root = course.root / "service"
        self.root.mkdir(parents=True, exist_ok=True)
        self.store = Store(self.root / "service.db")
        self.secret = _secret(self.root / "secret")
        self.roster = roster
        # LTI 1.3 (lti.py): the course's platforms and the tool's key; scores go back by a thread of their own
        self.lti = Lti(course.root, self.root, self.store, [a.name for a in self.assignments])
        self.passback = Sender(self.store, self.lti) if self.lti.platforms else None
        per_lane = max(1, int(jobs) // max(1, len(self.assignments)))
        self.lanes = {a.name: Lane(self, a, per_lane, isolation) for a in self.assignments}
        self.recorder = Recorder(self)
        self.counting = Counting(self, roster)
        self.locks = {}  # (assignment, student) -> a lock around "may they submit?" and the row's insert
        self.locks_lock = threading.Lock()

    def start(self):
        if self.passback is not None:
            self.passback.start()
        self.counting.start()
        self.recorder.start()
        for lane in self.lanes.values():
            lane.start()
        for row in self.store.unfinished():  # acknowledged before a crash or a stop: graded now, once
            if row.assignment in self.lanes:
                self.lanes[row.assignment].put(row.id)
        return self

    def make_pool(self, spec, jobs):
        """A lane's workers: warm local processes, or the Dask cluster's."""
        if self.cluster is not None:
            from autograder.grading.cluster.client import DaskPool

            return DaskPool(self.cluster, spec)
        from autograder.grading.scheduler import WarmPool

        return WarmPool(spec, jobs)

    def lock(self, assignment, student_id):
        with self.locks_lock:
            return self.locks.setdefault((assignment, student_id), threading.Lock())

    def uploads(self, assignment):
        folder = self.root / "uploads" / assignment
        folder.mkdir(parents=True, exist_ok=True)
        return folder

    def close(self):
        for lane in self.lanes.values():
            lane.close()
        self.recorder.close()
        self.counting.close()  # after the recorder: the last results are in grades.csv and the report
        if self.passback is not None:
            self.passback.stop()  # what is not sent yet stays queued in the database for the next start


def _secret(path):
    """This service's own secret (for the upload form's CSRF tokens), made once, readable by it alone."""
    path = Path(path)
    if not path.exists():
        write_atomically(path, secrets.token_hex(32), mode=0o600)
    return bytes.fromhex(path.read_text().strip())
