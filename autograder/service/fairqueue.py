"""The submissions of one assignment waiting for a worker, taken in turn between students.

Each student's own are taken in the order they came, and the students take turns: one of each
student's, then the next. A student who hands in 60 notebooks delays another student's by at
most one of theirs per turn, where one queue in arrival order made everyone wait for all 60
(PrairieLearn's grader queue is per user for the same reason). A new upload replaces what its
student still has waiting (`put(..., replace=True)`), in the same place: each student has at
most one notebook waiting, and the one graded is the newest. And at most one is graded at a
time: a student whose notebook is being graded is passed over (keeping their place) until the
lane says it is `done`, so one student never holds two workers while others wait.
"""
import threading
from collections import deque


class FairQueue:
    def __init__(self):
        self.changed = threading.Condition()
        self.waiting = {}  # student -> deque of items, in the order they came
        self.turns = deque()  # the students with something waiting, the next to be served first
        self.taken = {}  # submission id -> its student, for what was taken and is not done yet
        self.closed = False

    def put(self, student, item, replace=False):
        """`item` = (submission id, anything) waits for its student's turn. With `replace`, it
        takes the place of whatever that student has waiting; returns the items it replaced."""
        with self.changed:
            if student not in self.waiting:
                self.waiting[student] = deque()
                self.turns.append(student)
            replaced = list(self.waiting[student]) if replace else []
            if replace:
                self.waiting[student].clear()
            self.waiting[student].append(item)
            self.changed.notify()
            return replaced

    def get(self):
        """The next item in turn whose student has nothing being graded, waiting for one; None
        once closed and nothing can be taken."""
        with self.changed:
            while True:
                busy = set(self.taken.values())
                student = next((s for s in self.turns if s not in busy), None)
                if student is not None:
                    break
                if self.closed:
                    return None
                self.changed.wait()
            self.turns.remove(student)
            items = self.waiting[student]
            item = items.popleft()
            if items:
                self.turns.append(student)  # their next one waits for everyone else's turn
            else:
                del self.waiting[student]
            self.taken[item[0]] = student
            return item

    def done(self, submission_id):
        """The item of `submission_id`, taken by `get`, is graded (or will not be): its student's
        next one may be taken."""
        with self.changed:
            if self.taken.pop(submission_id, None) is not None:
                self.changed.notify_all()

    def close(self):
        with self.changed:
            self.closed = True
            self.changed.notify_all()

    def ahead(self, submission_id):
        """How many waiting items are taken before the one of `submission_id`; None when it is not
        waiting (taken already, or never put)."""
        with self.changed:
            for student, items in self.waiting.items():
                place = next((k for k, item in enumerate(items) if item[0] == submission_id), None)
                if place is not None:
                    break
            else:
                return None
            count = place  # its student's earlier ones
            turn = self.turns.index(student)
            for position, other in enumerate(self.turns):
                if other != student:  # others take one a turn: `place` turns before it, one more if first
                    count += min(len(self.waiting[other]), place + (1 if position < turn else 0))
            return count

    def running(self):
        """How many taken items are not done yet."""
        with self.changed:
            return len(self.taken)

    def __len__(self):
        with self.changed:
            return sum(len(items) for items in self.waiting.values())
