"""`autograder serve`: the web pages and the JSON API, on Starlette (served by uvicorn).

Students sign in with their token (or their personal link), hand in their notebook on a page
or through the API, and read their feedback as soon as it is graded: before the due date,
only what the assignment shows (service/views.py). A TA with a TA token sees every
student's attempts and what counts, and can regrade everyone after a check changed.

Every answer about a submission first checks that it is the asker's own: anything else is
"not found", the same answer as for an id that does not exist.
"""
import hashlib
import hmac
import html
import json
import secrets
import threading
import time
from datetime import datetime, timezone
from pathlib import Path
from urllib.parse import urlencode

from jinja2 import Environment, PackageLoader, select_autoescape
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.datastructures import UploadFile
from starlette.middleware import Middleware
from starlette.responses import FileResponse, HTMLResponse, RedirectResponse
from starlette.responses import JSONResponse as StarletteJSON
from starlette.routing import Route
from starlette.schemas import SchemaGenerator

from autograder.course import utf8
from autograder.outputs.feedback import _css, inline_code, layout_of
from autograder.record import cell_in_words
from autograder.record import read_result
from autograder.service.guard import BodyLimit, Prefix, RateLimit, TooLarge, csrf_ok, csrf_token, route_path
from autograder.service.hub import LOOKUPS_PER_MINUTE as HUB_LOOKUPS_PER_MINUTE, STATE_COOKIE, page_of
from autograder.service.lti import STATE_SECONDS, LtiRefused, deep_link_response, tool_urls
from autograder.service.store import COURSE, ERROR, GRADED, REPLACED, STUDENT, TA
from autograder.service.submit import Refused, take, when
from autograder.service.views import Visibility, student_view

COOKIE = "autograder"
CLIENT = Path(__file__).with_name("client.py")
SCHEMA = SchemaGenerator({"openapi": "3.0.0",
                          "info": {"title": "Attention autograder: grading on submit", "version": "1"},
                          "components": {"securitySchemes": {"token": {"type": "http", "scheme": "bearer"}}},
                          "security": [{"token": []}]})


class JSONResponse(StarletteJSON):
    """JSON with every character outside ASCII escaped: a student's error text can hold a lone
    surrogate (bytes that are not UTF-8), which must reach them as text, never as a server error."""

    def render(self, content):
        return json.dumps(content, ensure_ascii=True, separators=(",", ":")).encode("ascii")


def environment():
    env = Environment(loader=PackageLoader("autograder.service", "templates"),
                      autoescape=select_autoescape(["html", "j2"]), trim_blocks=True, lstrip_blocks=True)
    env.filters["points"] = lambda value: f"{value:g}"
    env.filters["when"] = lambda text: when(datetime.fromisoformat(text)) if text else ""
    env.filters["code"] = inline_code  # `names` as code, the text escaped
    env.filters["cell"] = cell_in_words
    return env


class Web:
    """The handlers, around one Service (service/core.py)."""

    def __init__(self, service, secure_cookies=False, base="", hub=None):
        """`base`: the path the service is served under ("" at the root; a Hub service's
        /services/<name>); `hub`: a service/hub.py Hub when students sign in through JupyterHub."""
        self.service, self.secure = service, secure_cookies
        self.base, self.hub = base, hub
        self.cookie_path = base + "/"  # the sign-in cookie goes to this service alone, not to the rest of the Hub
        self.assignments = {a.name: a for a in service.assignments}
        self.layouts = {a.name: layout_of(service.counting.records[a.name].source) for a in service.assignments}
        self.visibility = {a.name: Visibility.of(a) for a in service.assignments}
        self.rates = RateLimit()
        self.env = environment()
        self.env.globals["base"] = base  # every link of every page starts with it
        self.regrading = {}  # assignment -> what the last regrade said
        self.lti = service.lti  # LTI 1.3 (lti.py): the platforms of the course's lti.toml, the tool's key

    # -- who is asking -------------------------------------------------------------------------
    def _who(self, request, api):
        token = None
        scheme, _, given = request.headers.get("authorization", "").partition(" ")
        if scheme.lower() in ("bearer", "token"):  # ("token": as JupyterHub's own clients send theirs)
            token = given.strip()
        elif not api:
            token = request.cookies.get(COOKIE)
        if not token:
            return None
        who = self.service.store.who(token)
        if who is None and self.hub is not None:  # a Hub token: the Hub says whose (hub.py), within a rate
            who = self.hub.who(token, lambda: self._within(f"hub:{_address(request)}", HUB_LOOKUPS_PER_MINUTE))
        return who

    def signed_in(self, response, token):
        """`response`, signing its browser in with `token` (the service's own or a Hub's)."""
        response.set_cookie(COOKIE, token, httponly=True, samesite="strict", secure=self.secure,
                            max_age=180 * 24 * 3600, path=self.cookie_path)
        return response

    async def who(self, request, api=True):
        """The Who of a valid token within its rate; else Refused (signing in is one dependency:
        every handler that needs it starts with this call and repeats nothing of it)."""
        who = await run_in_threadpool(self._who, request, api)
        if who is None:
            self._within(f"ip:{_address(request)}", 30)  # guessing tokens is slow
            if api:
                raise Refused(401, "Give your token: Authorization: Bearer <token>.",
                              headers={"WWW-Authenticate": "Bearer"})
            raise Refused(303, "Sign in first.", redirect=self.sign_in_path(request))
        # a course-wide token: the most any of its assignments allows (each keeps its other rules)
        rates = [a.config.service.requests_per_minute for name, a in self.assignments.items() if who.may(name)]
        self._within(f"token:{who.token_id}", max(rates) if rates else 60)
        return who

    def _within(self, key, per_minute):
        allowed, wait = self.rates.allow(key, per_minute)
        if not allowed:
            raise Refused(429, f"Too many requests: please wait {wait} seconds and try again.",
                          headers={"Retry-After": str(wait)})

    def page(self, template, status=200, **values):
        """A page as UTF-8, whatever a student's text holds (course.utf8 replaces what cannot be encoded)."""
        return HTMLResponse(utf8(self.env.get_template(template).render(css=_css(), **values)), status)

    def _assignment(self, who, name, missing="No such assignment for your token."):
        """The assignment `name` if `who` may use it, else Refused (404, `missing`): the same answer
        for every other name."""
        if isinstance(name, str) and who.may(name) and name in self.assignments:
            return self.assignments[name]
        raise Refused(404, missing)

    def _own(self, who, submission_id):
        """The submission `submission_id` if it is `who`'s (any, for a TA), else None."""
        row = self.service.store.get(submission_id) if isinstance(submission_id, str) else None
        if row is None or not who.may(row.assignment) or (who.role != TA and row.student_id != who.student_id):
            return None
        return row

    async def _own_or_refused(self, who, submission_id, ta=False):
        row = await run_in_threadpool(self._own, who, submission_id)
        if row is None or (ta and who.role != TA):
            raise Refused(404, "No such submission of yours." if not ta else "No such page for you.")
        return row

    # -- what a student may see of one submission ------------------------------------------------
    def due(self, assignment, student_id):
        return self.service.counting.records[assignment].due_for(student_id)

    def result_of(self, row):
        """The result to show for an attempt: for the one that counts, graded/'s (a TA's regrade
        included); else the attempt's own, with its late penalty."""
        record = self.service.counting.records[row.assignment]
        if row.counted:
            graded = record.folder.result(row.student_id)
            if graded is not None and graded.notebook_sha256 == row.sha256:
                return graded
        raw = read_result(None, None, self.service.lanes[row.assignment].result_path(row.id))
        return None if raw is None else record.late(row).apply(raw)

    def view(self, row, everything=False):
        result = self.result_of(row) if row.status == GRADED else None
        if result is None:
            return None, None
        due = self.due(row.assignment, row.student_id)
        due_passed = due is not None and datetime.now(timezone.utc) >= due
        visibility = Visibility() if everything else self.visibility[row.assignment]
        layout = self.layouts[row.assignment]
        return student_view(result, visibility, due_passed, layout.titles, layout.owners), due

    def submission_json(self, request, row):
        body = {"id": row.id, "assignment": row.assignment, "status": row.status, "received_at": row.received_at,
                "graded_at": row.graded_at, "counted": bool(row.counted), "attempt_counts": bool(row.attempt),
                "queue_position": self.service.lanes[row.assignment].position(row),
                "score": None, "max_score": None, "feedback": None,
                "feedback_url": str(request.url_for("submission_page", submission_id=row.id)),
                "status_url": str(request.url_for("api_submission", submission_id=row.id))}
        if row.status == ERROR:
            body["detail"] = ("The grader could not grade this notebook (its own fault, not yours); your TA has"
                              " been told, and it did not cost you an attempt.")
        elif row.status == REPLACED:
            body["replaced_by"] = row.detail
            body["detail"] = ("Your newer upload took this one's place in the queue before it was graded, so this"
                              " one was not graded and did not cost you an attempt.")
        body["replaced"] = self.service.store.replaced_by(row.id)
        if body["replaced"]:
            body["note"] = replaced_note(len(body["replaced"]))
        view, due = self.view(row)
        if view is not None:
            body.update(score=view.score, max_score=view.max_score, feedback=view.to_json(),
                        hidden_until=due.isoformat() if due is not None and view.hidden_until_due else None)
        return body

    # -- the API ------------------------------------------------------------------------------
    async def api_submit(self, request):
        """
        summary: Hand in a notebook.
        description: multipart/form-data with the field `notebook`. Answers 202 with the new submission.
        responses:
          202: {description: "Taken: {id, status, queue_position, status_url, feedback_url, attempts_left}"}
          401: {description: No or a wrong token.}
          403: {description: The assignment is not open, or closed.}
          404: {description: No such assignment for this token.}
          413: {description: Over the size limit.}
          422: {description: Not a notebook (costs no attempt).}
          429: {description: Attempts used up, or too many requests.}
        """
        who = await self.who(request)
        assignment = self._assignment(who, request.path_params["assignment"])
        try:
            row, left = await self._take(request, who, assignment)
        except Refused as refused:
            counted = self._own(who, refused.extra.get("counted")) if refused.extra.get("counted") else None
            if counted is not None:  # attempts used up: answered with the result that counts
                refused.extra["counted"] = await run_in_threadpool(self.submission_json, request, counted)
            raise
        return JSONResponse({**self.submission_json(request, row), "attempts_left": left}, 202)

    async def _form(self, request, assignment):
        """The upload's form (read once: Starlette keeps it), or Refused."""
        try:
            return await request.form(max_files=1, max_fields=4)
        except TooLarge:
            raise Refused(413, f"The upload is over the {assignment.config.service.max_upload_mb} MB this assignment"
                               " takes. Clear your notebook's outputs, save it and submit again. It did not cost"
                               " you an attempt.") from None
        except Exception as error:  # noqa: BLE001 (a broken multipart body: the student's to send again)
            raise Refused(400, f"The upload could not be read ({type(error).__name__}); please send it again."
                               " It did not cost you an attempt.") from None

    async def _take(self, request, who, assignment):
        incoming = self.service.uploads(assignment.name) / f".incoming-{secrets.token_hex(8)}"
        form = await self._form(request, assignment)
        try:
            upload = form.get("notebook")
            if not isinstance(upload, UploadFile):
                raise Refused(422, "Send the notebook as the form field `notebook` (multipart/form-data).")
            with open(incoming, "wb") as handle:
                while chunk := await upload.read(1 << 20):
                    handle.write(chunk)
            await form.close()
        except Refused:
            raise
        except Exception as error:  # noqa: BLE001 (the upload vanished or the disk is full: said, never silent)
            if incoming.exists():
                incoming.unlink()
            raise Refused(503, f"The upload could not be stored ({type(error).__name__}); please send it again in a"
                               " minute. It did not cost you an attempt.") from None
        return await run_in_threadpool(take, self.service, who, assignment, str(incoming))

    async def api_submission(self, request):
        """
        summary: One of your submissions.
        description: Its status (queued, running, graded, error), its place in the queue, and once graded
          what you may see of it (before the due date, the checks that are shown).
        responses:
          200: {description: The submission.}
          404: {description: Not one of yours.}
        """
        who = await self.who(request)
        row = await self._own_or_refused(who, request.path_params["submission_id"])
        return JSONResponse(await run_in_threadpool(self.submission_json, request, row))

    async def api_list(self, request):
        """
        summary: Your submissions of an assignment, oldest first.
        responses:
          200: {description: "A list of submissions."}
          404: {description: No such assignment for this token.}
        """
        who = await self.who(request)
        assignment = self._assignment(who, request.path_params["assignment"])
        rows = await run_in_threadpool(self.service.store.of_student, assignment.name, who.student_id)
        return JSONResponse([self.submission_json(request, row) for row in rows])

    async def openapi(self, request):
        return JSONResponse(SCHEMA.get_schema(routes=request.app.routes))

    async def client(self, request):
        return FileResponse(CLIENT, media_type="text/x-python", filename="autograder_client.py")

    # -- the pages ------------------------------------------------------------------------------
    async def home(self, request):
        who = await run_in_threadpool(self._who, request, False)
        if who is not None:
            return self._landing(who)
        if self.hub is not None:  # signed in by the Hub, never by a pasted token
            return RedirectResponse(self.sign_in_path(request), 303)
        return self.page("home.html.j2", title="Hand in your notebook")

    def sign_in_path(self, request):
        """Where a browser that is not signed in goes: the start page, or the Hub's sign-in, back to here."""
        if self.hub is None:
            return self.base + "/"
        return f"{self.base}/hub-login?{urlencode({'next': request.url.path})}"

    async def hub_login(self, request):
        """The Hub's OAuth sign-in (hub.py): a state bound to this browser by a cookie, then the Hub."""
        if self.hub is None:
            raise Refused(404, "This service does not sign in through JupyterHub.")
        url, state = self.hub.start(page_of(self.base, request.query_params.get("next", "")))
        response = RedirectResponse(url, 302)
        response.set_cookie(STATE_COOKIE, state, max_age=STATE_SECONDS, httponly=True, samesite="lax",
                            secure=self.secure, path=self.cookie_path)
        return response

    async def hub_callback(self, request):
        """The Hub's answer: its code for the user's token, if the state is the one this browser started."""
        if self.hub is None:
            raise Refused(404, "This service does not sign in through JupyterHub.")
        code, state = request.query_params.get("code", ""), request.query_params.get("state", "")
        kept = request.cookies.get(STATE_COOKIE, "")
        if request.query_params.get("error"):
            raise Refused(403, "JupyterHub did not sign you in to the grading service"
                               f" ({request.query_params['error']}). Ask your TA for access.")
        if not code or not state or not hmac.compare_digest(state, kept) or not self.hub.known_state(state):
            raise Refused(400, "This sign-in did not start in this browser or has expired: open the grading"
                               " service's page again.")
        try:
            token, next_path = await run_in_threadpool(self.hub.finish, code, state)
        except Exception:  # noqa: BLE001 (the Hub refused the code or is away: said, and logged by HubAuth)
            raise Refused(502, "JupyterHub did not confirm this sign-in: open the grading service's page"
                               " again.") from None
        response = self.signed_in(RedirectResponse(next_path, 303), token)
        response.delete_cookie(STATE_COOKIE, path=self.cookie_path)
        return response

    def _landing(self, who):
        """Where a signed-in token goes: its assignment's page, or with a course-wide token for
        several assignments, the list of them."""
        mine = [a for name, a in self.assignments.items() if who.may(name)]
        kind = "ta" if who.role == TA else "assignments"
        if len(mine) == 1:
            return RedirectResponse(f"{self.base}/{kind}/{mine[0].name}", 303)
        return self.page("home.html.j2", title="Your assignments", mine=mine, kind=kind, student=who.student_id)

    async def login(self, request):
        if request.method == "POST":
            _same_origin(request, "Sign in from this site's own page.")  # another site may not sign a student in as another
            form = await request.form(max_files=0, max_fields=2)
            token = str(form.get("token", "")).strip()
        else:
            token = request.path_params["token"]
        who = await run_in_threadpool(self.service.store.who, token)
        if who is None:
            self._within(f"ip:{_address(request)}", 30)
            return self.page("home.html.j2", 401, title="Hand in your notebook",
                             error="That token is not valid (or no longer). Ask your TA for your personal link.")
        mine = [name for name in self.assignments if who.may(name)]
        target = f"/{'ta' if who.role == TA else 'assignments'}/{mine[0]}" if len(mine) == 1 else "/"
        return self.signed_in(RedirectResponse(self.base + target, 303), token)  # the token leaves the address bar

    async def logout(self, request):
        _same_origin(request, "Sign out from this site's own page.")  # another site's page cannot sign a student out
        response = RedirectResponse(self.hub.logout_url if self.hub else self.base + "/", 303)
        response.delete_cookie(COOKIE, path=self.cookie_path)
        return response

    async def _signed_in(self, request, ta=False):
        """(Who, the assignment of the path) for a student signed in to it (a TA with `ta`), else
        Refused: the same "not found" for every other name."""
        who = await self.who(request, api=False)
        if ta and who.role != TA:
            raise Refused(404, "No such page for you.")
        return who, self._assignment(who, request.path_params["assignment"], "No such page for you.")

    async def assignment_page(self, request, error=None, status=200):
        who, assignment = await self._signed_in(request)
        rows = await run_in_threadpool(self.service.store.of_student, assignment.name, who.student_id)
        due = self.due(assignment.name, who.student_id)
        return self.page("assignment.html.j2", status, title=assignment.title, assignment=assignment, rows=rows,
                         error=error, csrf=csrf_token(self.service.secret, who.token_id), student=who.student_id,
                         due=due, attempts=assignment.config.service.attempts,
                         window=assignment.config.service.attempt_window_hours)

    async def upload(self, request):
        who, assignment = await self._signed_in(request)
        _same_origin(request, "This form must be sent from its own page.")
        try:
            form = await self._form(request, assignment)
            if not csrf_ok(self.service.secret, who.token_id, form.get("csrf")):
                raise Refused(403, "This form is out of date: reload the page and hand in your notebook again.")
            row, _ = await self._take(request, who, assignment)
        except Refused as refused:
            counted = refused.extra.get("counted")
            if counted and self._own(who, counted) is not None:  # attempts used up: show what counts
                return RedirectResponse(f"{self.base}/submissions/{counted}?used_up=1", 303)
            return await self.assignment_page(request, error=refused.message, status=refused.status)
        return RedirectResponse(f"{self.base}/submissions/{row.id}", 303)

    async def submission_page(self, request):
        who = await self.who(request, api=False)
        row = await self._own_or_refused(who, request.path_params["submission_id"])
        view, due = await run_in_threadpool(self.view, row)
        assignment = self.assignments[row.assignment]
        position = self.service.lanes[row.assignment].position(row) or 1
        used_up = request.query_params.get("used_up") == "1"
        replaced = await run_in_threadpool(self.service.store.replaced_by, row.id)
        return self.page("submission.html.j2", title=assignment.title, assignment=assignment, row=row, view=view,
                         due=due, position=position, student=row.student_id, used_up=used_up,
                         replaced=replaced_note(len(replaced)) if replaced else "")

    # -- the TA's pages ---------------------------------------------------------------------------
    async def ta_page(self, request):
        who, assignment = await self._signed_in(request, ta=True)
        store = self.service.store
        rows = await run_in_threadpool(store.of_assignment, assignment.name)
        tokens = await run_in_threadpool(store.active_tokens, assignment.name)
        # Every student of the class, those without an attempt too: the roster's, and those given a token.
        students = {student: [] for student in self.service.roster or {}}
        students.update({token["student_id"]: [] for token in tokens if token["role"] == STUDENT})
        lms_roster = await run_in_threadpool(store.lti_roster)  # the LMS course's students (Names and Roles)
        students.update({student: [] for student, row in lms_roster.items() if row["role"] == "student"})
        for row in rows:
            students.setdefault(row.student_id, []).append(row)
        record = self.service.counting.records[assignment.name]
        graded = {r.student_id: r for r in await run_in_threadpool(record.folder.results)}
        regrading = self.regrading.get(assignment.name)
        lms = None
        if self.service.passback is not None:  # grades to the LMS: how many are there, and what waits
            lms = {"sent": len(await run_in_threadpool(store.lti_sent, assignment.name)),
                   "backlog": await run_in_threadpool(store.lti_backlog, assignment.name)}
        return self.page("ta.html.j2", title=assignment.title, assignment=assignment, students=students,
                         graded=graded, csrf=csrf_token(self.service.secret, who.token_id), regrading=regrading,
                         problems=list(reversed(record.problems)), lms=lms,
                         refresh=bool(regrading and regrading.startswith("running")))

    async def ta_submission(self, request):
        who = await self.who(request, api=False)
        row = await self._own_or_refused(who, request.path_params["submission_id"], ta=True)
        view, due = await run_in_threadpool(self.view, row, True)
        return self.page("submission.html.j2", title=self.assignments[row.assignment].title,
                         assignment=self.assignments[row.assignment], row=row, view=view, due=due, position=1,
                         student=row.student_id, ta=True)

    async def _ta_form(self, request):
        """(Who, assignment) of a TA's form post from this service's own TA page, else Refused."""
        who, assignment = await self._signed_in(request, ta=True)
        form = await request.form(max_files=0, max_fields=2)
        _same_origin(request, "Reload the page and try again.")
        if not csrf_ok(self.service.secret, who.token_id, form.get("csrf")):
            raise Refused(403, "Reload the page and try again.")
        return who, assignment

    async def ta_regrade(self, request):
        _, assignment = await self._ta_form(request)
        if self.regrading.get(assignment.name, "").startswith("running"):
            return RedirectResponse(f"{self.base}/ta/{assignment.name}", 303)
        self.regrading[assignment.name] = "running since " + when(datetime.now(timezone.utc))
        threading.Thread(target=self._regrade, args=(assignment,), daemon=True).start()
        return RedirectResponse(f"{self.base}/ta/{assignment.name}", 303)

    async def ta_lti_resend(self, request):
        """The TA's "send again now": every score of the assignment waiting for the LMS is due at once."""
        _, assignment = await self._ta_form(request)
        if self.service.passback is not None:
            await run_in_threadpool(self.service.store.lti_resend, assignment.name)
            self.service.passback.wake()
        return RedirectResponse(f"{self.base}/ta/{assignment.name}", 303)

    def _regrade(self, assignment):
        from autograder.service.regrade import regrade

        try:
            self.regrading[assignment.name] = regrade(self.service, assignment)
        except Exception as error:  # noqa: BLE001 (said on the TA's page)
            self.regrading[assignment.name] = f"failed: {type(error).__name__}: {error}"

    # -- LTI 1.3: signed in by the course's LMS (lti.py) ------------------------------------
    async def lti_login(self, request):
        """The platform's login initiation: back to it with a one-time state and nonce."""
        source = request.query_params if request.method == "GET" else await request.form(max_files=0, max_fields=20)
        params = {key: str(value) for key, value in source.items()}
        try:
            url, state = await run_in_threadpool(self.lti.login, params, self.base + "/lti/launch")
        except LtiRefused as refusal:
            await self._lti_refused(request, refusal, params.get("iss", ""))
        response = RedirectResponse(url, 302)
        # The launch comes back as the platform's cross-site POST: only a SameSite=None cookie (which
        # must be Secure) is sent with it. One cookie per login, so two tabs' logins do not collide.
        response.set_cookie(lti_state_cookie(state), state, max_age=STATE_SECONDS, httponly=True, secure=True,
                            samesite="none", path=self.base + "/lti/")
        return response

    async def lti_launch(self, request):
        """The platform's signed launch: checked whole (lti.py), then signed in, as the token login does."""
        form = await request.form(max_files=0, max_fields=20)
        try:
            given = {key: str(value) for key, value in form.items()}
            kept = request.cookies.get(lti_state_cookie(given.get("state", "")), "")
            launch = await run_in_threadpool(self.lti.launch, given, kept)
        except LtiRefused as refusal:
            await self._lti_refused(request, refusal)
        if launch.role == "ta" and launch.members_url and self.service.passback is not None:
            threading.Thread(target=self._refresh_roster, args=(launch,), daemon=True).start()  # (not in the launch)
        if launch.deep_link is not None:  # an instructor adding a link: they pick what it opens
            pick = secrets.token_urlsafe(24)
            await run_in_threadpool(self.service.store.lti_new_pick, pick, json.dumps(
                {**launch.deep_link, "issuer": launch.issuer}), time.time())
            await run_in_threadpool(self.service.store.lti_record, "accepted", launch.issuer, launch.student_id,
                                    "a deep linking request")
            return self.page("lti_pick.html.j2", title="Add an assignment", pick=pick,
                             assignments=list(self.assignments.values()))
        role = TA if launch.role == "ta" else STUDENT
        token = await run_in_threadpool(self.service.store.issue, launch.student_id, launch.assignment or COURSE, role)
        await run_in_threadpool(self.service.store.lti_record, "accepted", launch.issuer, launch.student_id,
                                f"{role} for {launch.assignment or 'every assignment'}")
        if launch.assignment and role == STUDENT and self.service.passback is not None:
            await run_in_threadpool(self._send_counted, launch)
        target = f"/{'ta' if role == TA else 'assignments'}/{launch.assignment}" if launch.assignment else "/"
        # The launch is a cross-site POST: a strict cookie set now is sent only with a navigation this
        # site starts, so this page starts it (a redirect would still count as the LMS's navigation).
        target = html.escape(self.base + target)  # (an assignment's name, checked: escaped all the same)
        response = self.signed_in(HTMLResponse(f'<!doctype html><meta http-equiv="refresh" content="0;url={target}">'
                                               f'<title>Signed in</title><p>Signed in. <a href="{target}">Continue</a></p>'),
                                  token)
        response.delete_cookie(lti_state_cookie(given["state"]), path=self.base + "/lti/", secure=True, httponly=True,
                               samesite="none")  # (spent: the login's state is good once)
        return response

    async def lti_deep_link(self, request):
        """The instructor's pick: the signed deep-linking response, posted back to the LMS by the page."""
        form = await request.form(max_files=0, max_fields=4)
        detail = await run_in_threadpool(self.service.store.lti_take_pick, str(form.get("pick", "")),
                                         time.time() - STATE_SECONDS)
        if detail is None:
            raise Refused(401, "This page has expired or was already used: add the tool from your course again.")
        pick, name = json.loads(detail), str(form.get("assignment", ""))
        if name not in self.assignments:  # (the page lists only real ones: this is no instructor's pick)
            raise Refused(404, "No such assignment here: add the tool from your course again.")
        assignment = self.assignments[name]
        points = self.service.counting.records[name].points_possible
        launch_url = tool_urls(str(request.base_url))["launch"]
        column = await run_in_threadpool(self._existing_column, pick, name)
        token = deep_link_response(self.lti.key, pick, name, assignment.title, launch_url, points,
                                   new_column=column is None)
        await run_in_threadpool(self.service.store.lti_record, "accepted", pick["issuer"], "",
                                f"a link to {name} added")
        return self.page("lti_return.html.j2", title="Back to your course", return_url=pick["return_url"],
                         token=token, title_of=assignment.title)

    def _refresh_roster(self, launch):
        """The LMS course's members (Names and Role Provisioning), fetched when an instructor or TA
        launches: the TA page lists every student of the LMS course, those who never opened a link too."""
        store = self.service.store
        try:
            platform = self.lti.platform_for(launch.issuer, launch.client_id)
            count = store.lti_set_roster(launch.issuer, launch.context,
                                         self.service.passback.roster_of(platform, launch.members_url))
        except Exception as error:  # noqa: BLE001 (said in the record; the list stays as it was)
            store.lti_record("note", launch.issuer, launch.student_id, "the LMS's roster could not be read"
                             f" ({type(error).__name__}: {error})")
            return
        store.lti_record("note", launch.issuer, launch.student_id, f"the LMS's roster: {count} members")

    def _existing_column(self, pick, name):
        """The column the LMS course already has for assignment `name` (a link made again, or copied),
        recorded for the launches from the new link; None when it has none, or cannot be asked (then
        the link gets a column of its own: better a second column than no link)."""
        if not pick.get("lineitems") or self.service.passback is None:
            return None
        try:
            platform = self.lti.platform_for(pick["issuer"], pick["client_id"])
            column = self.service.passback.column_of(platform, pick["lineitems"], name)
        except Exception as error:  # noqa: BLE001 (said in the record; the link is still made)
            self.service.store.lti_record("note", pick["issuer"], "", f"the LMS's columns could not be read"
                                          f" ({type(error).__name__}: {error}); the link gets a column of its own")
            return None
        return self.service.store.lti_column(pick["lineitems"], name, column) if column else None

    def _send_counted(self, launch):
        """A score counted before the student first came from this link goes to its column now
        (queued as any other: unchanged scores are not sent twice)."""
        record = self.service.counting.records[launch.assignment]
        result = record.folder.result(launch.student_id)
        if result is not None:
            record.lms.add(result)

    async def _lti_refused(self, request, refusal, issuer=""):
        """Record a refused login or launch for the TA, then refuse it (nobody is signed in)."""
        await run_in_threadpool(self.service.store.lti_record, "refused", issuer, "", refusal.why)
        self._within(f"ip:{_address(request)}", 30)
        raise Refused(401, refusal.student)

    async def lti_jwks(self, request):
        """The tool's public key, for the platforms (where they ask for this tool's JWKS URL)."""
        if self.lti.key is None:
            raise Refused(404, "This service has no LTI platforms: register one in the course's lti.toml.")
        return JSONResponse(self.lti.key.jwks())

    async def health(self, request):
        return JSONResponse({"ok": True, "assignments": sorted(self.assignments)})


def lti_state_cookie(state):
    """The name of the cookie that keeps one LTI login's state in the browser that began it."""
    return "autograder-lti-" + hashlib.sha256(state.encode("utf-8", "replace")).hexdigest()[:16]


def _address(request):
    return request.client.host if request.client else "?"


def replaced_note(count):
    """What a student reads on the upload that replaced `count` of their waiting ones."""
    earlier = "upload" if count == 1 else f"{count} uploads"
    return (f"This upload took the place of your earlier {earlier} still waiting in the queue: only your newest"
            " notebook is graded, and the one it replaced did not cost you an attempt.")


def _same_origin(request, refusal):
    """Refused (403, `refusal`) unless the POST is from a page of this service (or from no page,
    as a script sends it)."""
    origin = request.headers.get("origin")  # "null" or "" (a sandboxed page, a file) never matches
    if origin is not None and origin.rstrip("/") != f"{request.url.scheme}://{request.url.netloc}":
        raise Refused(403, refusal)


TITLES = {403: "Refused", 404: "Not found", 429: "Too many requests"}


async def answer_refused(request, refusal):
    """Every refusal, answered in one place: JSON on the API, a page (or a redirect) elsewhere."""
    if refusal.redirect:
        return RedirectResponse(refusal.redirect, 303)
    if route_path(request.scope).startswith("/api/"):
        return JSONResponse({"error": refusal.message, **refusal.extra}, refusal.status, headers=refusal.headers)
    page = request.app.state.web.page("message.html.j2", refusal.status, title=TITLES.get(refusal.status, "Refused"),
                                      message=refusal.message)
    page.headers.update(refusal.headers)
    return page


async def _server_error(request, error):
    """The service's own fault: one clear line for the student (the traceback is in the service's log)."""
    import traceback

    traceback.print_exception(error)
    return JSONResponse({"error": "The service failed on this request (its fault, not yours): please try again in a"
                                  " minute; your TA can see what happened in its log."}, 500)


# Every route, and who may ask it: "anyone"; "signed in" (a student's or a TA's token, refused
# alike without one); "ta". Every handler but the first kind starts with Web.who (or _signed_in).
ROUTES = [
    ("/", "home", ["GET"], "anyone"),
    ("/login", "login", ["POST"], "anyone"),
    ("/login/{token}", "login", ["GET"], "anyone"),
    ("/logout", "logout", ["POST"], "anyone"),
    ("/assignments/{assignment}", "assignment_page", ["GET"], "signed in"),
    ("/assignments/{assignment}/upload", "upload", ["POST"], "signed in"),
    ("/submissions/{submission_id}", "submission_page", ["GET"], "signed in"),
    ("/ta/{assignment}", "ta_page", ["GET"], "ta"),
    ("/ta/{assignment}/submissions/{submission_id}", "ta_submission", ["GET"], "ta"),
    ("/ta/{assignment}/regrade", "ta_regrade", ["POST"], "ta"),
    ("/ta/{assignment}/lti-resend", "ta_lti_resend", ["POST"], "ta"),
    ("/api/assignments/{assignment}/submissions", "api_submit", ["POST"], "signed in"),
    ("/api/assignments/{assignment}/submissions", "api_list", ["GET"], "signed in"),
    ("/api/submissions/{submission_id}", "api_submission", ["GET"], "signed in"),
    ("/openapi.json", "openapi", ["GET"], "anyone"),
    ("/client.py", "client", ["GET"], "anyone"),
    ("/healthz", "health", ["GET"], "anyone"),
    ("/hub-login", "hub_login", ["GET"], "anyone"),
    ("/lti/login", "lti_login", ["GET", "POST"], "anyone"),
    ("/lti/launch", "lti_launch", ["POST"], "anyone"),
    ("/lti/deep-link", "lti_deep_link", ["POST"], "anyone"),
    ("/.well-known/jwks.json", "lti_jwks", ["GET"], "anyone"),
]


def make_app(service, secure_cookies=False, base="", hub=None):
    """The Starlette application for a started Service, served under the path `base` ("": the root),
    its students signed in by `hub` (a service/hub.py Hub) as well as by their tokens."""
    base = hub.prefix if hub is not None else base.rstrip("/")
    web = Web(service, secure_cookies, base, hub)
    limits = {a.name: a.config.service.max_upload_mb * 2**20 + 64 * 1024 for a in service.assignments}

    def limit_of(scope):
        parts = route_path(scope).strip("/").split("/")
        if len(parts) >= 3 and parts[0] in ("api", "assignments"):
            name = parts[2] if parts[0] == "api" else parts[1]
            return limits.get(name, min(limits.values(), default=1 << 20))
        return 64 * 1024  # a login or a regrade: a form of a few fields

    unlisted = ("openapi", "client", "health", "hub_login", "lti_login", "lti_launch", "lti_jwks", "lti_deep_link",
                "ta_lti_resend")  # not the students' API
    routes = [Route(path, getattr(web, handler), methods=methods, name=handler,
                    include_in_schema=handler not in unlisted)
              for path, handler, methods, _ in ROUTES]
    if hub is not None:  # the Hub's callback path, as the Hub was told it
        routes.append(Route(hub.callback_path[len(base):], web.hub_callback, methods=["GET"], name="hub_callback",
                            include_in_schema=False))
    app = Starlette(routes=routes, middleware=[Middleware(Prefix, base=base), Middleware(BodyLimit, limit_of=limit_of)],
                    exception_handlers={Refused: answer_refused, Exception: _server_error})
    app.state.web = web
    return app
