"""Grades back to the LMS by themselves: LTI Assignment and Grade Services (AGS) score passback.

A launch whose link has a gradebook column (the AGS claim's `lineitem`) records where that
student's score goes (`lti_targets`). Each counted result of theirs is then an `LtiScores`
output: its score is queued in the database (`lti_scores`, one row per column and student, the
newest score replacing an unsent one), never sent from the grading path, so an LMS that is slow
or down never delays grading. A `Sender` thread sends what is due: an OAuth 2 access token from
the platform's token endpoint (the client-credentials grant with a JWT assertion signed by the
tool's key, as the IMS Security Framework asks), then the score to `<lineitem>/scores`. A failure
is kept with why and tried again with a growing pause (5 s, 10 s, ... at most 10 minutes); the TA
reads the backlog (`backlog`), and a regrade's new score replaces the waiting one.
"""
import json
import logging
import secrets
import threading
import time
import urllib.error
import urllib.request
from datetime import datetime, timezone
from urllib.parse import urlencode, urlsplit, urlunsplit

import jwt

from autograder.outputs import final
from autograder.outputs.base import Output
from autograder.record import ERROR
from autograder.service.lti import COLUMNS_SCOPE, ROSTER_SCOPE, SCORE_SCOPE, LtiRefused, role_of, student_id_of

SCORE_TYPE = "application/vnd.ims.lis.v1.score+json"
FIRST_PAUSE, LONGEST_PAUSE = 5.0, 600.0  # seconds before a failed score is tried again, doubling
TIMEOUT = 15  # seconds for one request to the LMS
LOG = logging.getLogger("autograder.service")


class _NoRedirects(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args, **kwargs):
        return None  # a redirect is an error: never a token sent on, nor a POST turned into a GET


# Only http(s), and never following a redirect: the bearer token goes where the LMS's own claims say.
OPENER = urllib.request.OpenerDirector()
for _handler in (urllib.request.ProxyHandler, urllib.request.HTTPHandler, urllib.request.HTTPSHandler,
                 urllib.request.HTTPErrorProcessor,
                 urllib.request.HTTPDefaultErrorHandler, _NoRedirects):
    OPENER.add_handler(_handler())


def _open(request):
    if urlsplit(request.full_url).scheme not in ("http", "https"):
        raise RuntimeError(f"not an http(s) address: {request.full_url[:200]}")
    return OPENER.open(request, timeout=TIMEOUT)


class LtiScores(Output):
    """Queues each counted result's score for the LMS columns its student launched from: its
    autograded points (late penalty applied) out of the assignment's whole `out_of`, written
    answers included; with written answers (`written`), "PendingManual", since a TA's points for
    them come later (formgrader), else "FullyGraded"."""

    what = "the score for the LMS"

    def __init__(self, store, sender=None, out_of=None, written=False):
        self.store, self.sender, self.out_of = store, sender, out_of
        self.progress = "PendingManual" if written else "FullyGraded"

    def add(self, result):
        if result.status == ERROR:
            return  # not a grade: the grader tries again
        out_of = float(self.out_of if self.out_of is not None else result.max_score)
        queued = self.store.lti_queue_score(result.assignment, result.student_id, float(result.score), out_of,
                                            _now(), self.progress)
        if queued and self.sender is not None:
            self.sender.wake()


def queue_final_grades(store, grades):
    """Queue `grades`' (final.AssignmentGrades) grades for the LMS columns their students launched
    from: a final grade (written answers graded in formgrader, extra credit and late penalty
    counted) as FullyGraded; points so far as PendingManual while written answers wait. Returns
    {"final": n, "so far": n} of the scores queued (one already in a column is not queued again)."""
    queued = {"final": 0, "so far": 0}
    for grade in grades.grades.values():
        if grade.total is not None:
            kind, points, progress = "final", grade.total, "FullyGraded"
        elif grade.status == final.NEEDS_GRADING:
            kind, points, progress = "so far", max(0.0, grade.points_so_far), "PendingManual"
        else:
            continue  # nothing handed in, or not graded yet: nothing to send
        queued[kind] += bool(store.lti_queue_score(grades.name, grade.student_id, float(points),
                                                   float(grades.out_of), _now(), progress))
    return queued


def scores_url(lineitem):
    """`<lineitem>/scores`, the line item's query string kept (Canvas's and Moodle's carry one)."""
    parts = urlsplit(lineitem)
    return urlunsplit(parts._replace(path=parts.path.rstrip("/") + "/scores"))


class Sender(threading.Thread):
    """Sends queued scores, one platform's token reused until it expires."""

    def __init__(self, store, lti):
        super().__init__(name="autograder-lti-scores", daemon=True)
        self.store, self.lti = store, lti
        self.tokens = {}  # (issuer, client id, scope) -> (access token, expires at)
        self.woken, self.stopping = threading.Event(), threading.Event()

    def wake(self):
        self.woken.set()

    def stop(self):
        self.stopping.set()
        self.woken.set()

    def run(self):
        while not self.stopping.is_set():
            self.woken.clear()
            try:
                wait = self.send_due()
            except Exception:  # noqa: BLE001 (the database was busy: try again soon)
                LOG.exception("sending scores to the LMS")
                wait = FIRST_PAUSE
            self.woken.wait(wait)

    def send_due(self):
        """Send every score that is due; the seconds until the next one is."""
        for row in self.store.lti_due_scores(time.time()):
            try:
                self.send(row)
            except Exception as error:  # noqa: BLE001 (kept with why, tried again later)
                if isinstance(error, urllib.error.HTTPError) and error.code == 401:
                    self.tokens.clear()  # the LMS no longer takes its token: ask for a new one
                pause = min(LONGEST_PAUSE, FIRST_PAUSE * 2 ** min(row["tries"], 16))
                self.store.lti_score_failed(row["id"], row["version"], _brief(error), time.time() + pause)
            else:
                self.store.lti_score_sent(row["id"], row["version"])
        due = self.store.lti_next_due()
        return 60.0 if due is None else max(0.05, min(60.0, due - time.time()))

    def send(self, row):
        platform = self.lti.platform_for(row["issuer"], row["client_id"])
        if not platform.token_url:
            raise RuntimeError(f"lti.toml gives no token_url for {platform.issuer}: scores cannot be sent")
        body = json.dumps({"userId": row["subject"], "scoreGiven": row["score"], "scoreMaximum": row["maximum"],
                           "activityProgress": "Completed", "gradingProgress": row["progress"],
                           "timestamp": row["timestamp"]}).encode()
        request = urllib.request.Request(scores_url(row["lineitem"]), data=body, method="POST", headers={
            "Content-Type": SCORE_TYPE, "Authorization": f"Bearer {self.token(platform)}"})
        with _open(request) as answer:
            answer.read()

    def roster_of(self, platform, members_url):
        """The LMS course's members (Names and Role Provisioning, every page): [(subject, student id,
        name, email, "student" or "ta")]; members who are neither, or inactive, are left out."""
        found, url = [], members_url
        for _ in range(100):  # pages, bounded
            request = urllib.request.Request(url, headers={
                "Accept": "application/vnd.ims.lti-nrps.v2.membershipcontainer+json",
                "Authorization": f"Bearer {self.token(platform, ROSTER_SCOPE)}"})
            with _open(request) as answer:
                page, links = json.loads(answer.read()), answer.headers.get("Link", "")
            for member in page.get("members", []) if isinstance(page, dict) else []:
                if not isinstance(member, dict) or member.get("status", "Active") != "Active":
                    continue
                try:
                    role = role_of(member.get("roles", []))
                except LtiRefused:
                    continue
                subject = str(member.get("user_id", ""))
                claims = {"sub": subject, "https://purl.imsglobal.org/spec/lti/claim/lis":
                          {"person_sourcedid": member.get("lis_person_sourcedid")}}
                found.append((subject, student_id_of(claims), str(member.get("name", ""))[:200],
                              str(member.get("email", ""))[:200], role))
            following = [part.split(";")[0].strip(" <>") for part in links.split(",") if 'rel="next"' in part]
            if not following or urlsplit(following[0]).netloc != urlsplit(members_url).netloc:
                return found  # (a next page on another host is never asked: the token stays with the LMS)
            url = following[0]
        return found

    def column_of(self, platform, lineitems, assignment):
        """The gradebook column the LMS course (its columns at `lineitems`) has for `assignment` (its
        resourceId), or None; an error when the LMS cannot be asked."""
        if not platform.token_url:
            raise RuntimeError(f"lti.toml gives no token_url for {platform.issuer}")
        parts = urlsplit(lineitems)
        query = "&".join(filter(None, [parts.query, urlencode({"resource_id": assignment})]))
        request = urllib.request.Request(urlunsplit(parts._replace(query=query)), headers={
            "Accept": "application/vnd.ims.lis.v2.lineitemcontainer+json",
            "Authorization": f"Bearer {self.token(platform, COLUMNS_SCOPE)}"})
        with _open(request) as answer:
            columns = json.loads(answer.read())
        found = [c["id"] for c in columns if isinstance(c, dict) and c.get("resourceId") == assignment
                 and isinstance(c.get("id"), str)] if isinstance(columns, list) else []
        return found[0] if found else None

    def token(self, platform, scope=SCORE_SCOPE):
        """An access token for `scope` (the client-credentials grant, RFC 7523 assertion)."""
        key = (platform.issuer, platform.client_id, scope)
        found = self.tokens.get(key)
        if found and found[1] > time.time() + 30:
            return found[0]
        now = int(time.time())
        assertion = jwt.encode({"iss": platform.client_id, "sub": platform.client_id, "aud": platform.token_url,
                                "iat": now, "exp": now + 300, "jti": secrets.token_urlsafe(16)},
                               self.lti.key.private, algorithm="RS256", headers={"kid": self.lti.key.kid})
        form = urlencode({"grant_type": "client_credentials", "scope": scope,
                          "client_assertion_type": "urn:ietf:params:oauth:client-assertion-type:jwt-bearer",
                          "client_assertion": assertion}).encode()
        request = urllib.request.Request(platform.token_url, data=form, method="POST",
                                         headers={"Content-Type": "application/x-www-form-urlencoded"})
        with _open(request) as answer:
            reply = json.loads(answer.read())
        token = reply.get("access_token")
        if not isinstance(token, str) or not token:
            raise RuntimeError(f"the token endpoint of {platform.issuer} gave no access token")
        self.tokens[key] = (token, time.time() + float(reply.get("expires_in", 3600)))
        return token


def _now():
    return datetime.now(timezone.utc).isoformat(timespec="milliseconds")


def _brief(error):
    if isinstance(error, urllib.error.HTTPError):
        return f"HTTP {error.code} from the LMS"
    text = " ".join(str(error).split())
    return f"{type(error).__name__}: {text[:300]}"
