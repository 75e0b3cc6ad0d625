"""Whose id is this? The LMS's own ids mapped to the course's student ids, through the roster.

Canvas names each file with the student's Canvas user id, which the roster's `canvas_id`
column maps to our student id. Moodle names each student by full name and a participant
number that differs between assignments, so the roster's `moodle_participant` column (where
a TA copied it from the grading worksheet) or else its `name` column maps it (in any order
of the words, case and accents aside: "Doe, Jane" is "Jane Doe"). nbgrader's tree,
a pattern and a folder of <student id>.ipynb already use our ids; a roster then says who
is not on it (a test folder, a stray file).

Without a roster, Canvas's students are `<name>-<user id>` and Moodle's `<first>-<last>`:
stable from one assignment to the next, so the course's grade file can join them. Two
students the LMS tells apart are never graded under one id: they are kept apart and named.
"""
import re
import unicodedata
from collections import defaultdict

from autograder.untrusted import moodle_student_id


def name_key(text):
    """A name as a set of words, case, accents and punctuation aside: "Doe, Jane" == "jane  DOE"."""
    text = unicodedata.normalize("NFKD", str(text)).casefold()
    text = "".join(c for c in text if not unicodedata.combining(c))
    return tuple(sorted(re.findall(r"\w+", text)))




def canvas_student_id(name, user_id):
    """The id of a Canvas student graded without a roster: the name in Canvas's file names, lower case."""
    return f"{name.lower()}-{user_id}"


class Identities:
    """Maps each Found's key to a student id; `problems` says what could not be mapped."""

    def __init__(self, roster=None):
        self.roster = roster  # {student id: row}, or None
        self.by_canvas, self.by_participant = {}, {}
        self.by_name = defaultdict(list)
        for student, row in (roster or {}).items():
            if row.get("canvas_id"):
                self.by_canvas[row["canvas_id"]] = student
            if row.get("moodle_participant"):  # copied from the assignment's grading worksheet
                self.by_participant[row["moodle_participant"]] = student
            if row.get("name"):
                self.by_name[name_key(row["name"])].append(student)
        self.problems = []  # (file or student, why)

    def assign(self, found):
        """Set `student_id` on every Found (a list); two LMS students never share one."""
        for item in found:
            item.student_id = self._student(item)
        self._keep_apart(found)

    def _student(self, item):
        if item.layout == "canvas":
            student = self.by_canvas.get(item.key)
            if student is None and self.roster is not None:
                self._not_on_roster(item, f"Canvas user {item.key} ({item.name})", "canvas_id")
            return student or canvas_student_id(item.name, item.key)
        if item.layout == "moodle":
            if item.lms["moodle_participant"] in self.by_participant:
                return self.by_participant[item.lms["moodle_participant"]]
            matches = self.by_name.get(name_key(item.name), []) if self.roster is not None else []
            if len(matches) == 1:
                return matches[0]
            if self.roster is not None:
                if matches:
                    self.problems.append((item.shown, f"the roster has {len(matches)} students called {item.name}"
                                                      f" ({', '.join(matches)}): graded as {moodle_student_id(item.name)};"
                                                      " tell them apart in the roster's name column"))
                else:
                    self._not_on_roster(item, f"Moodle's {item.name}", "name")
            return moodle_student_id(item.name)
        if self.roster is not None and item.key not in self.roster:
            self.problems.append((item.shown, f"{item.key} is not on the roster (a test folder or a stray file?);"
                                              " graded all the same"))
        return item.key

    def _not_on_roster(self, item, who, column):
        self.problems.append((item.shown, f"{who} is not on the roster (no row with this {column}); graded as"
                                          f" {self._fallback(item)}: add them to the roster and grade again"))

    @staticmethod
    def _fallback(item):
        return canvas_student_id(item.name, item.key) if item.layout == "canvas" else moodle_student_id(item.name)

    def _keep_apart(self, found):
        """Two LMS students (two Canvas users, two Moodle participants) that map to one id each get
        an id of their own, with their LMS number, and the TA is told."""
        owners = defaultdict(set)
        for item in found:
            if item.layout in ("canvas", "moodle"):
                owners[item.student_id].add((item.layout, _lms_number(item)))
        for student, who in owners.items():
            if len(who) < 2:
                continue
            for item in found:
                if item.student_id == student and item.layout in ("canvas", "moodle"):
                    item.student_id = f"{student}-{_lms_number(item)}"
            self.problems.append((student, f"{len(who)} students of the LMS map to the id {student}; each is"
                                           f" graded under its own id ({student}-<LMS number>) until the roster"
                                           " tells them apart"))


def _lms_number(item):
    return item.lms.get("canvas_id") or item.lms.get("moodle_participant") or item.key
