"""The service's database: who may submit, and every submission (SQLite in the course folder).

Everything acknowledged is on disk first: a submission's notebook is written and synced,
then its row committed (SQLite in WAL mode with full syncs), and only then does the
student get its id. After a crash, every row still queued or running is graded again, and
a row whose result file is already written is finished without grading twice.

Tokens are stored as the SHA-256 of their secret, never the secret itself; a token is
"<id>.<secret>", looked up by id and compared in constant time.
"""
import hashlib
import hmac
import secrets
import sqlite3
import threading
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

SCHEMA = """
CREATE TABLE IF NOT EXISTS tokens (
    id TEXT PRIMARY KEY,
    secret_sha256 TEXT NOT NULL,
    student_id TEXT NOT NULL,
    role TEXT NOT NULL DEFAULT 'student',
    assignment TEXT NOT NULL,
    created_at TEXT NOT NULL,
    revoked_at TEXT
);
CREATE TABLE IF NOT EXISTS submissions (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    id TEXT UNIQUE NOT NULL,
    assignment TEXT NOT NULL,
    student_id TEXT NOT NULL,
    received_at TEXT NOT NULL,
    sha256 TEXT NOT NULL,
    path TEXT NOT NULL,
    status TEXT NOT NULL,
    attempt INTEGER NOT NULL DEFAULT 1,
    counted INTEGER NOT NULL DEFAULT 0,
    tries INTEGER NOT NULL DEFAULT 0,
    answers_key TEXT NOT NULL DEFAULT '',
    score REAL,
    detail TEXT NOT NULL DEFAULT '',
    graded_at TEXT
);
CREATE INDEX IF NOT EXISTS by_student ON submissions (assignment, student_id);
CREATE INDEX IF NOT EXISTS by_status ON submissions (status);
CREATE TABLE IF NOT EXISTS lti_states (
    state TEXT PRIMARY KEY,
    nonce TEXT UNIQUE NOT NULL,
    issuer TEXT NOT NULL,
    client_id TEXT NOT NULL,
    created REAL NOT NULL,
    used INTEGER NOT NULL DEFAULT 0
);
CREATE TABLE IF NOT EXISTS lti_people (
    issuer TEXT NOT NULL,
    subject TEXT NOT NULL,
    student_id TEXT NOT NULL,
    PRIMARY KEY (issuer, subject)
);
CREATE TABLE IF NOT EXISTS lti_targets (
    lineitem TEXT NOT NULL,
    subject TEXT NOT NULL,
    issuer TEXT NOT NULL,
    client_id TEXT NOT NULL,
    assignment TEXT NOT NULL,
    student_id TEXT NOT NULL,
    PRIMARY KEY (lineitem, subject)
);
CREATE TABLE IF NOT EXISTS lti_scores (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    lineitem TEXT NOT NULL,
    subject TEXT NOT NULL,
    issuer TEXT NOT NULL,
    client_id TEXT NOT NULL,
    assignment TEXT NOT NULL,
    student_id TEXT NOT NULL,
    score REAL NOT NULL,
    maximum REAL NOT NULL,
    timestamp TEXT NOT NULL,
    progress TEXT NOT NULL DEFAULT 'FullyGraded',
    version INTEGER NOT NULL DEFAULT 1,
    sent_version INTEGER NOT NULL DEFAULT 0,
    tries INTEGER NOT NULL DEFAULT 0,
    next_at REAL NOT NULL DEFAULT 0,
    error TEXT NOT NULL DEFAULT '',
    sent_at TEXT,
    UNIQUE (lineitem, subject)
);
CREATE TABLE IF NOT EXISTS lti_columns (
    lineitems TEXT NOT NULL,
    assignment TEXT NOT NULL,
    lineitem TEXT NOT NULL,
    PRIMARY KEY (lineitems, assignment)
);
CREATE TABLE IF NOT EXISTS lti_roster (
    issuer TEXT NOT NULL,
    context TEXT NOT NULL,
    student_id TEXT NOT NULL,
    name TEXT NOT NULL DEFAULT '',
    email TEXT NOT NULL DEFAULT '',
    role TEXT NOT NULL,
    PRIMARY KEY (issuer, context, student_id)
);
CREATE TABLE IF NOT EXISTS lti_picks (
    pick TEXT PRIMARY KEY,
    detail TEXT NOT NULL,
    created REAL NOT NULL,
    used INTEGER NOT NULL DEFAULT 0
);
CREATE TABLE IF NOT EXISTS lti_launches (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    at TEXT NOT NULL,
    outcome TEXT NOT NULL,
    issuer TEXT NOT NULL DEFAULT '',
    student_id TEXT NOT NULL DEFAULT '',
    detail TEXT NOT NULL DEFAULT ''
);
"""
QUEUED, RUNNING, GRADED, ERROR = "queued", "running", "graded", "error"
COURSE = "*"  # a token's assignment when it is for every assignment the service grades
REPLACED = "replaced"  # a newer upload took its place in the queue before it was graded (detail: the newer's id)
STUDENT, TA = "student", "ta"


def now():
    return datetime.now(timezone.utc)


def stamp(moment=None):
    return (moment or now()).isoformat(timespec="microseconds")


@dataclass(frozen=True)
class Who:
    """The holder of a token: a student (or a TA) of one assignment, or of every assignment of
    the course (`assignment` is COURSE) with each assignment's own rules."""

    student_id: str
    role: str
    assignment: str
    token_id: str

    def may(self, assignment):
        return self.assignment in (assignment, COURSE)


@dataclass
class Row:
    seq: int
    id: str
    assignment: str
    student_id: str
    received_at: str
    sha256: str
    path: str
    status: str
    attempt: int
    counted: int
    tries: int
    answers_key: str
    score: float
    detail: str
    graded_at: str


class Store:
    """One SQLite database, shared by the web handlers and the grading threads (one connection
    per thread; SQLite serialises the writes)."""

    def __init__(self, path):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.local = threading.local()
        self._db().executescript(SCHEMA)  # (executescript commits by itself)

    def _db(self):
        db = getattr(self.local, "db", None)
        if db is None:
            db = sqlite3.connect(self.path, timeout=30, isolation_level=None)
            db.row_factory = sqlite3.Row
            db.execute("PRAGMA journal_mode=WAL")
            db.execute("PRAGMA synchronous=FULL")  # a committed submission survives a power cut
            db.execute("PRAGMA busy_timeout=30000")
            self.local.db = db
        return db

    @contextmanager
    def write(self):
        """A transaction: committed when the block ends, rolled back if it raises."""
        db = self._db()
        db.execute("BEGIN IMMEDIATE")
        try:
            yield db
        except BaseException:
            db.execute("ROLLBACK")
            raise
        db.execute("COMMIT")

    def read(self, sql, *args):
        return [dict(row) for row in self._db().execute(sql, args).fetchall()]

    # -- tokens --------------------------------------------------------------------------------
    def issue(self, student_id, assignment, role=STUDENT):
        """A new token ("<id>.<secret>") for the student; only its hash is kept."""
        token_id, secret = secrets.token_hex(6), secrets.token_urlsafe(24)
        with self.write() as db:
            db.execute("INSERT INTO tokens (id, secret_sha256, student_id, role, assignment, created_at)"
                       " VALUES (?, ?, ?, ?, ?, ?)", (token_id, _sha256(secret), student_id, role, assignment, stamp()))
        return f"{token_id}.{secret}"

    def active_tokens(self, assignment):
        """The active tokens that open `assignment`: its own and the course's (COURSE: the course's alone)."""
        return self.read("SELECT id, student_id, role, assignment, created_at FROM tokens WHERE assignment IN (?, ?)"
                         " AND revoked_at IS NULL ORDER BY student_id", assignment, COURSE)

    def revoke(self, assignment, student_id):
        """Revoke every token of the student for the assignment (COURSE: the course-wide ones);
        returns how many."""
        with self.write() as db:
            cursor = db.execute("UPDATE tokens SET revoked_at = ? WHERE assignment = ? AND student_id = ? AND"
                                " revoked_at IS NULL", (stamp(), assignment, student_id))
            return cursor.rowcount

    def who(self, token):
        """The Who a token stands for, or None (unknown, malformed or revoked). The secret is
        compared in constant time, so no answer's timing says how much of it was right."""
        if not isinstance(token, str) or token.count(".") != 1 or len(token) > 200:
            _sha256("x" * 32)  # the same work as a real comparison
            return None
        token_id, secret = token.split(".")
        rows = self.read("SELECT * FROM tokens WHERE id = ?", token_id)
        expected = rows[0]["secret_sha256"] if rows else _sha256(secrets.token_urlsafe(24))
        if not hmac.compare_digest(expected, _sha256(secret)) or not rows or rows[0]["revoked_at"]:
            return None
        row = rows[0]
        return Who(row["student_id"], row["role"], row["assignment"], row["id"])

    # -- LTI launches (lti.py) ------------------------------------------------------------------
    def lti_new_state(self, state, nonce, issuer, client_id, created):
        with self.write() as db:
            db.execute("DELETE FROM lti_states WHERE created < ?", (created - 86400,))  # spent or abandoned
            db.execute("INSERT INTO lti_states (state, nonce, issuer, client_id, created) VALUES (?, ?, ?, ?, ?)",
                       (state, nonce, issuer, client_id, created))

    def lti_take_state(self, state, not_before):
        """The login `state` made (its nonce, issuer, client id), spent now; None when it is unknown,
        spent already or made before `not_before`."""
        with self.write() as db:
            row = db.execute("SELECT * FROM lti_states WHERE state = ?", (str(state)[:200],)).fetchone()
            if row is None or row["used"]:
                return None
            db.execute("UPDATE lti_states SET used = 1 WHERE state = ?", (row["state"],))
        return dict(row) if row["created"] >= not_before else None

    def lti_column(self, lineitems, assignment, lineitem=None):
        """The gradebook column of `assignment` in the LMS course whose columns are at `lineitems`:
        recorded when `lineitem` is given (a launch that names it), else the one recorded, or None."""
        with self.write() as db:
            if lineitem:
                db.execute("INSERT OR REPLACE INTO lti_columns (lineitems, assignment, lineitem) VALUES (?, ?, ?)",
                           (lineitems, assignment, lineitem))
                return lineitem
            row = db.execute("SELECT lineitem FROM lti_columns WHERE lineitems = ? AND assignment = ?",
                             (lineitems, assignment)).fetchone()
            return row["lineitem"] if row else None

    def lti_set_roster(self, issuer, context, members):
        """The LMS course's members as Names and Role Provisioning gave them: [(subject, student id, name,
        email, role)], replacing the course's earlier list; each subject maps to its student id as a
        launch would map it (the first id seen for a person is kept)."""
        kept = []
        for subject, student_id, name, email, role in members:
            if subject.strip():  # (a member without an id is nobody's)
                kept.append((self.lti_person(issuer, subject, student_id), name, email, role))
        with self.write() as db:
            db.execute("DELETE FROM lti_roster WHERE issuer = ? AND context = ?", (issuer, context))
            db.executemany("INSERT OR REPLACE INTO lti_roster (issuer, context, student_id, name, email, role)"
                           " VALUES (?, ?, ?, ?, ?, ?)", [(issuer, context, *row) for row in kept])
        return len(kept)

    def lti_roster(self):
        """Every LMS course's members, by student id (a student in two LMS courses once)."""
        return {row["student_id"]: row for row in self.read("SELECT * FROM lti_roster ORDER BY student_id")}

    def lti_new_pick(self, pick, detail, created):
        """A deep-linking request waiting for the instructor's pick (`detail`: JSON of Launch.deep_link)."""
        with self.write() as db:
            db.execute("DELETE FROM lti_picks WHERE created < ?", (created - 86400,))
            db.execute("INSERT INTO lti_picks (pick, detail, created) VALUES (?, ?, ?)", (pick, detail, created))

    def lti_take_pick(self, pick, not_before):
        """The request's detail, spent now; None when it is unknown, spent or older than `not_before`."""
        with self.write() as db:
            row = db.execute("SELECT * FROM lti_picks WHERE pick = ?", (str(pick)[:200],)).fetchone()
            if row is None or row["used"]:
                return None
            db.execute("UPDATE lti_picks SET used = 1 WHERE pick = ?", (row["pick"],))
        return row["detail"] if row["created"] >= not_before else None

    def lti_person(self, issuer, subject, student_id):
        """The student id the LMS's person (issuer, subject) is graded as: the first one seen for them,
        kept, so a changed SIS id never splits one student's results in two. An id another person (of
        another LMS, or another subject) holds already is never theirs: they get it with a suffix of
        their own, so no launch can read or score as someone else."""
        with self.write() as db:
            row = db.execute("SELECT student_id FROM lti_people WHERE issuer = ? AND subject = ?",
                             (issuer, subject)).fetchone()
            if row is not None:
                return row["student_id"]
            if db.execute("SELECT 1 FROM lti_people WHERE student_id = ?", (student_id,)).fetchone():
                student_id = f"{student_id}-{_sha256(issuer + chr(0) + subject)[:8]}"
            db.execute("INSERT INTO lti_people (issuer, subject, student_id) VALUES (?, ?, ?)",
                       (issuer, subject, student_id))
            return student_id

    def lti_record(self, outcome, issuer="", student_id="", detail=""):
        """One launch, "accepted" or "refused" (with why), or a "note" on what came of one, for the TA."""
        with self.write() as db:
            db.execute("INSERT INTO lti_launches (at, outcome, issuer, student_id, detail) VALUES (?, ?, ?, ?, ?)",
                       (stamp(), outcome, issuer[:300], student_id[:200], detail[:1000]))

    def lti_add_target(self, lineitem, subject, issuer, client_id, assignment, student_id):
        """Where this student's score for `assignment` goes: the gradebook column of the link they launched."""
        with self.write() as db:
            db.execute("INSERT OR REPLACE INTO lti_targets (lineitem, subject, issuer, client_id, assignment,"
                       " student_id) VALUES (?, ?, ?, ?, ?, ?)", (lineitem, subject, issuer, client_id, assignment, student_id))

    def lti_queue_score(self, assignment, student_id, score, maximum, timestamp, progress="FullyGraded"):
        """Queue the student's counted score for each column they launched `assignment` from, unless
        that column has this very score already (sent or waiting); how many were queued."""
        queued = 0
        with self.write() as db:
            targets = db.execute("SELECT * FROM lti_targets WHERE assignment = ? AND student_id = ?",
                                 (assignment, student_id)).fetchall()
            for target in targets:
                row = db.execute("SELECT * FROM lti_scores WHERE lineitem = ? AND subject = ?",
                                 (target["lineitem"], target["subject"])).fetchone()
                if row is not None and (row["score"], row["maximum"], row["progress"]) == (score, maximum, progress):
                    continue
                if row is not None and row["progress"] == "FullyGraded" and progress == "PendingManual":
                    continue  # a final grade (`lti send`, written answers counted) is never replaced by a part of it
                db.execute("INSERT INTO lti_scores (lineitem, subject, issuer, client_id, assignment, student_id,"
                           " score, maximum, timestamp, progress) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT"
                           " (lineitem, subject) DO UPDATE SET score = excluded.score, maximum = excluded.maximum,"
                           " timestamp = excluded.timestamp, progress = excluded.progress, version = version + 1,"
                           " tries = 0, next_at = 0, error = ''",
                           (target["lineitem"], target["subject"], target["issuer"], target["client_id"], assignment,
                            student_id, score, maximum, timestamp, progress))
                queued += 1
        return queued

    def lti_due_scores(self, moment, limit=50):
        return self.read("SELECT * FROM lti_scores WHERE sent_version < version AND next_at <= ?"
                         " ORDER BY next_at, id LIMIT ?", moment, limit)

    def lti_next_due(self):
        rows = self.read("SELECT MIN(next_at) AS due FROM lti_scores WHERE sent_version < version")
        return rows[0]["due"] if rows else None

    def lti_score_sent(self, score_id, version):
        """Score `score_id` reached the LMS as its `version` (a newer one, queued meanwhile, still goes)."""
        with self.write() as db:
            db.execute("UPDATE lti_scores SET sent_version = MAX(sent_version, ?), sent_at = ?, tries = 0, error = ''"
                       " WHERE id = ?", (version, stamp(), score_id))

    def lti_score_failed(self, score_id, version, why, next_at):
        """Score `score_id` (as its `version`) did not reach the LMS; a newer version queued meanwhile goes at once."""
        with self.write() as db:
            db.execute("UPDATE lti_scores SET tries = tries + 1, error = ?, next_at = ? WHERE id = ? AND version = ?",
                       (why[:500], next_at, score_id, version))

    def lti_backlog(self, assignment=None):
        """The scores not in the LMS yet (with why the last try failed), for the TA."""
        return self.read("SELECT * FROM lti_scores WHERE sent_version < version" +
                         (" AND assignment = ?" if assignment else "") + " ORDER BY student_id",
                         *([assignment] if assignment else []))

    def lti_resend(self, assignment):
        """Every waiting score of `assignment` is due now (the TA's "send again"); how many."""
        with self.write() as db:
            return db.execute("UPDATE lti_scores SET next_at = 0 WHERE assignment = ? AND sent_version < version",
                              (assignment,)).rowcount

    def lti_sent(self, assignment):
        return self.read("SELECT * FROM lti_scores WHERE assignment = ? AND sent_version = version"
                         " ORDER BY student_id", assignment)

    def lti_launches(self):
        return self.read("SELECT * FROM lti_launches ORDER BY seq")

    # -- submissions ---------------------------------------------------------------------------
    def add(self, submission_id, assignment, student_id, received_at, sha256, path):
        with self.write() as db:
            db.execute("INSERT INTO submissions (id, assignment, student_id, received_at, sha256, path, status)"
                       " VALUES (?, ?, ?, ?, ?, ?, ?)",
                       (submission_id, assignment, student_id, received_at, sha256, str(path), QUEUED))

    def get(self, submission_id):
        rows = self.read("SELECT * FROM submissions WHERE id = ?", submission_id)
        return Row(**rows[0]) if rows else None

    def of_student(self, assignment, student_id):
        return [Row(**row) for row in self.read("SELECT * FROM submissions WHERE assignment = ? AND student_id = ?"
                                                " ORDER BY seq", assignment, student_id)]

    def of_assignment(self, assignment):
        return [Row(**row) for row in self.read("SELECT * FROM submissions WHERE assignment = ? ORDER BY seq",
                                                assignment)]

    def unfinished(self):
        """Every submission still queued or running, oldest first (to grade after a restart)."""
        return [Row(**row) for row in self.read("SELECT * FROM submissions WHERE status IN (?, ?) ORDER BY seq",
                                                QUEUED, RUNNING)]

    def running(self, assignment):
        """How many submissions of the assignment are being graded now."""
        return self.read("SELECT COUNT(*) AS n FROM submissions WHERE assignment = ? AND status = ?", assignment,
                         RUNNING)[0]["n"]

    def set_counted(self, assignment, student_id, submission_id):
        """Mark `submission_id` as the student's attempt that counts (and no other)."""
        with self.write() as db:
            db.execute("UPDATE submissions SET counted = (id = ?) WHERE assignment = ? AND student_id = ?",
                       (submission_id, assignment, student_id))

    def finish(self, row, score, answers_key, counted_id=None):
        """The submission graded, and (when it changed) the student's attempt that counts, in one
        transaction: nobody ever reads a graded submission whose counting is not done."""
        with self.write() as db:
            db.execute("UPDATE submissions SET status = ?, score = ?, answers_key = ?, graded_at = ?, detail = ''"
                       " WHERE id = ?", (GRADED, score, answers_key, stamp(), row.id))
            if counted_id is not None:
                db.execute("UPDATE submissions SET counted = (id = ?) WHERE assignment = ? AND student_id = ?",
                           (counted_id, row.assignment, row.student_id))

    def replace(self, submission_ids, by_id):
        """The still-waiting `submission_ids` were replaced by the upload `by_id`: never graded,
        and no attempt spent on them."""
        with self.write() as db:
            db.executemany("UPDATE submissions SET status = ?, attempt = 0, detail = ? WHERE id = ? AND status = ?",
                           [(REPLACED, by_id, old, QUEUED) for old in submission_ids])

    def replaced_by(self, submission_id):
        """The ids of the uploads `submission_id` replaced, oldest first."""
        return [row["id"] for row in self.read("SELECT id FROM submissions WHERE status = ? AND detail = ? ORDER BY seq",
                                               REPLACED, submission_id)]

    def set_status(self, submission_id, status, **fields):
        columns = {"status": status, **fields}
        with self.write() as db:
            db.execute(f"UPDATE submissions SET {', '.join(f'{k} = ?' for k in columns)} WHERE id = ?",
                       (*columns.values(), submission_id))


def _sha256(text):
    return hashlib.sha256(text.encode()).hexdigest()
