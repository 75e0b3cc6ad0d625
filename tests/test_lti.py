"""LTI 1.3 launches (service/lti.py) from a third-party platform: `lti1p3platform` from PyPI acts
as the LMS. It makes the login initiation and signs the launch with its own key, served as a
JWKS on 127.0.0.1; a real `autograder serve` is the tool. Every bad launch must be refused,
recorded as refused, and sign nobody in."""
import json
from datetime import datetime
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qsl, urlencode, urlsplit

import jwt
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa
# the LMS: a third-party platform, installed by the [test] extra (never skipped: these are security tests)
from lti1p3platform.ags import LtiAgs
from lti1p3platform.deep_linking import LtiDeepLinking
from lti1p3platform.ltiplatform import LTI1P3PlatformConfAbstract
from lti1p3platform.message_launch import MessageLaunchAbstract
from lti1p3platform.oidc_login import OIDCLoginAbstract
from lti1p3platform.registration import Registration

from autograder.service.lti import ToolKey, read_platforms
from autograder.service.store import Store

from helpers import ASSIGNMENT, cli, example, new_course
from service_helpers import notebook_bytes, request, serve, submit, wait_graded


ISSUER, CLIENT, DEPLOYMENT = "https://lms.example.edu", "tool-client-1", "deployment-1"
SCORE = "https://purl.imsglobal.org/spec/lti-ags/scope/score"
COLUMNS = "https://purl.imsglobal.org/spec/lti-ags/scope/lineitem"
ROSTER = "https://purl.imsglobal.org/spec/lti-nrps/scope/contextmembership.readonly"
LEARNER = "http://purl.imsglobal.org/vocab/lis/v2/membership#Learner"
INSTRUCTOR = "http://purl.imsglobal.org/vocab/lis/v2/membership#Instructor"


def key_pair():
    private = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    pem = private.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                serialization.NoEncryption()).decode()
    public = private.public_key().public_bytes(serialization.Encoding.PEM,
                                               serialization.PublicFormat.SubjectPublicKeyInfo).decode()
    return pem, public


class KeyServer:
    """The platform's web side on 127.0.0.1: its JWKS (what Canvas serves at /api/lti/security/jwks),
    its OAuth 2 token endpoint and its line items' score endpoints (AGS), each through the
    platform library's own checks. `down`: every token and score request answers 503."""

    def __init__(self):
        self.jwks, self.fetches, self.platform, self.down = {"keys": []}, 0, None, False
        self.scores = []  # (line item path, score JSON) the platform accepted
        self.columns = []  # the course's gradebook columns: {"id": URL, "resourceId": ...}
        self.members = []  # the course's members, as Names and Role Provisioning lists them
        self.returned = []  # the deep-linking responses a browser posted back
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def answer(self, status, reply):
                body = json.dumps(reply).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_GET(self):
                if "/names_and_roles" in self.path:  # the course's members (Names and Role Provisioning)
                    auth = self.headers.get("Authorization", "").removeprefix("Bearer ")
                    if owner.down or not owner.platform.validate_token(auth, [ROSTER]):
                        return self.answer(403, {"error": "not allowed"})
                    return self.answer(200, {"id": self.path, "context": {"id": "course-1"}, "members": owner.members})
                if "/line_items" not in self.path:
                    owner.fetches += 1
                    return self.answer(200, owner.jwks)
                auth = self.headers.get("Authorization", "").removeprefix("Bearer ")  # the course's columns (AGS)
                if owner.down or not owner.platform.validate_token(auth, [COLUMNS, COLUMNS + ".readonly"]):
                    return self.answer(403, {"error": "not allowed"})
                wanted = dict(parse_qsl(urlsplit(self.path).query)).get("resource_id")
                self.answer(200, [c for c in owner.columns if wanted in (None, c["resourceId"])])

            def do_POST(self):
                data = self.rfile.read(int(self.headers.get("Content-Length", 0))).decode()
                if owner.down:
                    return self.answer(503, {"error": "down for maintenance"})
                if self.path == "/deep_link_return":  # the tool's page posts the instructor's pick back
                    owner.returned.append(dict(parse_qsl(data)))
                    return self.answer(200, {"added": True})
                try:
                    if self.path == "/token":  # the tool's signed assertion, checked against the tool's JWKS
                        return self.answer(200, owner.platform.get_access_token(dict(parse_qsl(data))))
                    auth = self.headers.get("Authorization", "").removeprefix("Bearer ")
                    if not owner.platform.validate_token(auth, [SCORE]) or not self.path.split("?")[0].endswith(
                            "/scores") or self.headers.get("Content-Type") != "application/vnd.ims.lis.v1.score+json":
                        return self.answer(403, {"error": "not allowed"})
                    owner.scores.append((self.path, json.loads(data)))
                    return self.answer(200, {})
                except Exception as error:  # noqa: BLE001 (the platform refused it)
                    return self.answer(401, {"error": str(error)})

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()


class Lms(LTI1P3PlatformConfAbstract):
    """The platform: its registration of the tool, and its key pair."""

    def init_platform_config(self, tool, private, public, issuer=ISSUER, deployment=DEPLOYMENT):
        self._registration = (Registration().set_iss(issuer).set_client_id(CLIENT).set_deployment_id(deployment)
                              .set_launch_url(f"{tool}/lti/launch").set_oidc_login_url(f"{tool}/lti/login")
                              .set_tool_key_set_url(f"{tool}/.well-known/jwks.json")
                              .set_platform_public_key(public).set_platform_private_key(private))

    def get_registration_by_params(self, **kwargs):
        return self._registration


class Login(OIDCLoginAbstract):
    def set_lti_message_hint(self, **kwargs):
        self._lti_message_hint = "link-1"

    def get_redirect(self, url):
        return url


class Launch(MessageLaunchAbstract):
    """The platform's launch, made from the tool's authorization request (the preflight)."""

    def __init__(self, platform, preflight):
        super().__init__(None, platform)
        self.preflight = preflight
        self._registration = platform.get_registration()
        self.validate_preflight_response(preflight)  # the platform's own checks of the tool's request

    def get_preflight_response(self):
        return self.preflight

    def render_launch_form(self, launch_data, **kwargs):
        return launch_data


@pytest.fixture(scope="module")
def lms(tmp_path_factory):
    """A course served with lti.toml naming the platform, the platform's keys served, and the platform."""
    folder = tmp_path_factory.mktemp("lti")
    keys = KeyServer()
    private, public = key_pair()
    course = new_course(folder)
    assert cli("release", ASSIGNMENT, "--course", course).returncode == 0
    (course / "lti.toml").write_text(
        f'[[platform]]\nissuer = "{ISSUER}"\nclient_id = "{CLIENT}"\ndeployment_ids = ["{DEPLOYMENT}"]\n'
        f'login_url = "{keys.url}/authorize"\nkeys_url = "{keys.url}/jwks"\ntoken_url = "{keys.url}/token"\n')
    served = serve(course, ASSIGNMENT)
    platform = Lms(tool=served.base, private=private, public=public)
    keys.jwks, keys.platform = platform.get_jwks(), platform
    try:
        yield served, platform, keys, (private, public)
    finally:
        served.stop()
        keys.close()


def authorize(served, platform, user="ada-sub"):
    """The platform's login initiation, followed to the tool: the tool's authorization request."""
    login = Login(None, platform)
    login.set_lti_message_hint()
    status, _, headers = request(login.prepare_preflight_url(user))
    assert status == 302, (status, headers)
    preflight = dict(parse_qsl(urlsplit(headers["location"]).query))
    LOGIN_COOKIES[preflight["state"]] = cookie_of(headers)  # what the browser keeps for its launch
    return preflight


LOGIN_COOKIES = {}  # state -> the cookie its login set (the browser of that login sends it with the launch)


def launch(served, platform, user="ada-sub", roles=(LEARNER,), custom=None, claims=None, preflight=None,
           sourcedid="ada", lineitem=None):
    """A whole launch: (status, body, headers) of the POST of the platform's signed id_token."""
    data = launch_form(served, platform, user, roles, custom, claims, preflight, sourcedid, lineitem)
    return request(f"{served.base}/lti/launch", data=urlencode(data).encode(),
                   content_type="application/x-www-form-urlencoded", cookie=LOGIN_COOKIES.get(data["state"]))


def launch_form(served, platform, user="ada-sub", roles=(LEARNER,), custom=None, claims=None, preflight=None,
                sourcedid="ada", lineitem=None):
    """The form the platform's page posts to the tool's /lti/launch: its signed id_token and the state."""
    preflight = preflight or authorize(served, platform, user)
    message = Launch(platform, preflight)
    message.set_user_data(user, list(roles), full_name="Ada L")
    message.set_resource_link_claim("link-1", title="Causal attention")
    message.set_custom_parameters_claim({"assignment": ASSIGNMENT} if custom is None else custom)
    extra = {"https://purl.imsglobal.org/spec/lti/claim/lis": {"person_sourcedid": sourcedid}}
    if lineitem:  # the link's gradebook column, as Canvas sends it for an assignment
        extra.update(LtiAgs(lineitems_url=lineitem.rsplit("/", 1)[0], lineitem_url=lineitem).get_lti_ags_launch_claim())
    message.set_extra_claims({**extra, **(claims or {})})
    return message.generate_launch_request()


def cookie_of(headers):
    """The first cookie an answer sets (a launch's: the sign-in, then the spent state's removal)."""
    return headers["set-cookie"].split(";", 1)[0]


def launches(served):
    return Store(served.course / "service" / "service.db").lti_launches()


def test_a_learner_launched_from_the_lms_lands_on_their_assignment_signed_in(lms):
    served, platform, _, _ = lms
    preflight = authorize(served, platform)
    assert preflight["client_id"] == CLIENT and preflight["redirect_uri"] == f"{served.base}/lti/launch"
    assert preflight["response_mode"] == "form_post" and preflight["lti_message_hint"] == "link-1"
    status, page, headers = launch(served, platform, preflight=preflight)
    assert status == 200 and f"/assignments/{ASSIGNMENT}" in page
    status, text, _ = request(f"{served.base}/assignments/{ASSIGNMENT}", cookie=cookie_of(headers))
    assert status == 200 and "ada" in text  # graded as the LMS's SIS id for her
    assert launches(served)[-1]["outcome"] == "accepted" and launches(served)[-1]["student_id"] == "ada"
    kept = LOGIN_COOKIES[preflight["state"]]  # the login kept its state in the browser, for the launch alone ...
    assert kept.startswith("autograder-lti-") and kept.endswith("=" + preflight["state"])
    spent = headers["set-cookie"].splitlines()[1].lower()  # ... and the launch clears it
    assert spent.startswith(kept.split("=", 1)[0] + '=""') and "max-age=0" in spent and "path=/lti/" in spent


def test_an_instructor_is_a_ta(lms):
    served, platform, _, _ = lms
    status, page, headers = launch(served, platform, user="tim-sub", roles=(INSTRUCTOR,), sourcedid="tim")
    assert status == 200 and f"/ta/{ASSIGNMENT}" in page
    status, _, _ = request(f"{served.base}/ta/{ASSIGNMENT}", cookie=cookie_of(headers))
    assert status == 200


def test_the_tool_serves_its_public_key_and_keeps_it(lms):
    served, _, _, _ = lms
    status, first, _ = request(f"{served.base}/.well-known/jwks.json")
    assert status == 200 and first["keys"][0]["kty"] == "RSA" and first["keys"][0]["alg"] == "RS256"
    assert "d" not in first["keys"][0]  # never the private part
    assert request(f"{served.base}/.well-known/jwks.json")[1] == first
    assert (served.course / "service" / "lti-key.pem").stat().st_mode & 0o077 == 0


def tokens(served):
    return Store(served.course / "service" / "service.db").read("SELECT COUNT(*) AS n FROM tokens")[0]["n"]


def refused(served, answer, before):
    """The launch was refused with a page, signed nobody in, and is recorded as refused. `before`:
    (launches recorded, tokens issued) before it."""
    status, page, headers = answer
    assert status == 401 and "set-cookie" not in headers, (status, headers)
    assert tokens(served) == before[1]  # no token issued for anyone
    assert any(words in page for words in ("not signed in", "expired", "tell your TA", "Only an instructor"))
    records = launches(served)[before[0]:]
    assert [r["outcome"] for r in records] == ["refused"], records
    return records[0]["detail"]


@pytest.mark.parametrize("case", ["bad signature", "unknown key", "replayed", "expired", "wrong audience", "unknown deployment",
                                  "wrong nonce", "a student role nobody knows", "begun in another browser"])
def test_a_bad_launch_is_refused_recorded_and_signs_nobody_in(lms, case):
    served, platform, _, (private, public) = lms
    before = len(launches(served)), tokens(served)
    if case == "bad signature":  # signed by another key, under the platform's own key id
        other, other_public = key_pair()
        forger = Lms(tool=served.base, private=other, public=other_public)
        forger.get_registration().get_kid = platform.get_registration().get_kid
        why = refused(served, launch(served, forger, preflight=authorize(served, platform)), before)
        assert "InvalidSignatureError" in why
    elif case == "unknown key":  # signed by a key the platform does not publish
        other, other_public = key_pair()
        forger = Lms(tool=served.base, private=other, public=other_public)
        why = refused(served, launch(served, forger, preflight=authorize(served, platform)), before)
        assert "Unable to find a signing key" in why
    elif case == "replayed":
        preflight = authorize(served, platform)
        message = Launch(platform, preflight)
        message.set_user_data("ada-sub", [LEARNER])
        data = urlencode(message.generate_launch_request()).encode()
        url, cookie = f"{served.base}/lti/launch", LOGIN_COOKIES[preflight["state"]]
        assert request(url, data=data, content_type="application/x-www-form-urlencoded", cookie=cookie)[0] == 200
        before = len(launches(served)), tokens(served)
        why = refused(served, request(url, data=data, content_type="application/x-www-form-urlencoded",
                                      cookie=cookie), before)
        assert "already used" in why
    elif case == "expired":
        preflight = authorize(served, platform)
        message = Launch(platform, preflight)
        message.set_user_data("ada-sub", [LEARNER])
        message.set_id_token_expiration(-3600)  # expired an hour ago (beyond the minute of leeway)
        data = urlencode(message.generate_launch_request()).encode()
        why = refused(served, request(f"{served.base}/lti/launch", data=data, cookie=LOGIN_COOKIES[preflight["state"]],
                                      content_type="application/x-www-form-urlencoded"), before)
        assert "ExpiredSignature" in why
    elif case == "begun in another browser":  # login CSRF: someone's own valid launch posted to a student's browser
        for cookie in (None, LOGIN_COOKIES[authorize(served, platform)["state"]]):  # none, or another login's
            preflight = authorize(served, platform, user="mallory-sub")
            data = urlencode(launch_form(served, platform, user="mallory-sub", preflight=preflight)).encode()
            why = refused(served, request(f"{served.base}/lti/launch", data=data, cookie=cookie,
                                          content_type="application/x-www-form-urlencoded"), before)
            assert "did not start in this browser" in why
            before = len(launches(served)), tokens(served)
    elif case == "wrong audience":
        why = refused(served, launch(served, platform, claims={"aud": "another-tool", "azp": "another-tool"}), before)
        assert "InvalidAudience" in why
    elif case == "unknown deployment":
        stranger = Lms(tool=served.base, private=private, public=public, deployment="deployment-9")
        why = refused(served, launch(served, stranger, preflight=authorize(served, platform)), before)
        assert "unknown deployment" in why
    elif case == "wrong nonce":
        preflight = {**authorize(served, platform), "nonce": "not-the-one-it-made"}
        why = refused(served, launch(served, platform, preflight=preflight), before)
        assert "nonce" in why
    else:
        why = refused(served, launch(served, platform, roles=("http://example.org/role#Visitor",)), before)
        assert "neither a learner's nor an instructor's" in why


def test_a_login_from_an_unregistered_platform_is_refused(lms):
    served, _, _, _ = lms
    before = len(launches(served))
    query = urlencode({"iss": "https://unknown.example", "login_hint": "x", "target_link_uri": f"{served.base}/lti/launch"})
    status, page, headers = request(f"{served.base}/lti/login?{query}")
    assert status == 401 and "location" not in headers and "not signed in" in page
    assert launches(served)[before]["outcome"] == "refused"


@pytest.mark.slow  # (it waits out the refresh cooldown)
def test_the_platforms_new_key_is_fetched_when_it_rotates(lms):
    from autograder.service.lti import KEY_REFRESH_SECONDS

    served, platform, keys, _ = lms
    time.sleep(KEY_REFRESH_SECONDS)  # (a forged key id above made it fetch the keys just now)
    new_private, new_public = key_pair()
    rotated = Lms(tool=served.base, private=new_private, public=new_public)
    keys.jwks = {"keys": [*platform.get_jwks()["keys"], *rotated.get_jwks()["keys"]]}  # both, during the change
    fetched = keys.fetches
    status, _, _ = launch(served, rotated, preflight=authorize(served, platform))
    assert status == 200 and keys.fetches > fetched  # a kid it did not know: the JWKS was fetched again


def test_a_launch_left_open_past_ten_minutes_is_refused(lms, monkeypatch):
    from autograder.service import lti

    store = Store(lms[0].course / "service" / "service.db")
    store.lti_new_state("old-state", "old-nonce", ISSUER, CLIENT, time.time() - lti.STATE_SECONDS - 5)
    assert store.lti_take_state("old-state", time.time() - lti.STATE_SECONDS) is None
    assert store.lti_take_state("old-state", 0) is None  # and spent: never tried twice


def test_lti_register_prints_the_tools_addresses_and_key_and_adds_the_platform(tmp_path):
    course = new_course(tmp_path)
    done = cli("lti", "register", "--url", "https://grader.example.edu", "--course", course)
    assert done.returncode == 0, done.stdout + done.stderr
    canvas = json.loads(done.stdout[done.stdout.index("{"):done.stdout.index("\nMoodle")])
    assert canvas["oidc_initiation_url"] == "https://grader.example.edu/lti/login"
    assert canvas["target_link_uri"] == "https://grader.example.edu/lti/launch"
    assert canvas["public_jwk"]["kid"] == ToolKey(course / "service").kid  # the key the service will sign with
    assert "Initiate login URL: https://grader.example.edu/lti/login" in done.stdout
    values = ["--issuer", ISSUER, "--client-id", CLIENT, "--deployment", DEPLOYMENT, "--login-url",
              "https://lms.example.edu/authorize", "--keys-url", "https://lms.example.edu/jwks"]
    done = cli("lti", "register", "--url", "https://grader.example.edu", "--course", course, *values)
    assert done.returncode == 0 and [(p.issuer, p.deployment_ids) for p in read_platforms(course)] == [
        (ISSUER, (DEPLOYMENT,))]
    again = cli("lti", "register", "--url", "https://grader.example.edu", "--course", course, *values)
    assert again.returncode == 2 and "already has the platform" in again.stdout and "Traceback" not in again.stderr
    half = cli("lti", "register", "--url", "https://grader.example.edu", "--course", course, "--issuer", ISSUER)
    assert half.returncode == 2 and "five values together" in " ".join(half.stdout.split())


def test_a_link_names_its_assignment_by_custom_parameter_or_by_its_signed_address():
    from autograder.service.lti import CLAIM, assignment_of, role_of, student_id_of

    target = CLAIM + "target_link_uri"
    assert assignment_of({CLAIM + "custom": {"assignment": "self_attention"},
                          target: "https://g/lti/launch?assignment=causal_attention"}) == "self_attention"
    assert assignment_of({target: "https://g/lti/launch?assignment=causal_attention"}) == "causal_attention"
    assert assignment_of({target: "https://g/lti/launch"}) == ""
    assert role_of(["http://purl.imsglobal.org/vocab/lis/v2/membership/Instructor#TeachingAssistant"]) == "ta"
    assert role_of([LEARNER, INSTRUCTOR]) == "ta"
    assert student_id_of({"sub": "a/b c"}).startswith("lti-")  # never a path or a space in a student id


def points_possible(course):
    import nbformat

    from autograder.grading.notebook import grade_cells, manual_cells

    source = nbformat.read(course / "source" / ASSIGNMENT / f"{ASSIGNMENT}.ipynb", as_version=4)
    assert manual_cells(source)  # (the assignment has written answers)
    return sum(grade_cells(source).values()) + sum(manual_cells(source).values())


def scores_for(keys, user, count, timeout=60):
    """The scores the platform accepted for `user`, once there are `count` of them (bounded in time)."""
    deadline = time.monotonic() + timeout
    while True:
        found = [score for _, score in keys.scores if score["userId"] == user]
        if len(found) >= count or time.monotonic() > deadline:
            return found
        time.sleep(0.2)


def backlog_drained(store, timeout=10):
    """The assignment's LTI backlog once it is empty, or as it stands after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while (waiting := store.lti_backlog(ASSIGNMENT)) and time.monotonic() < deadline:
        time.sleep(0.1)
    return waiting


def test_a_counted_score_reaches_the_lms_column_and_waits_out_an_lms_that_is_down(lms):
    served, platform, keys, _ = lms
    column = f"{keys.url}/api/lti/courses/1/line_items/7?include=results"
    status, _, headers = launch(served, platform, user="cy-sub", sourcedid="cy", lineitem=column)
    assert status == 200
    served.tokens["cy"] = cookie_of(headers).split("=", 1)[1]  # the sign-in cookie is the student's token
    status, answer = submit(served, "cy", notebook_bytes(example("ada")))
    assert status == 202, answer
    graded = wait_graded(served, "cy", answer["id"])
    sent = scores_for(keys, "cy-sub", 1)
    assert len(sent) == 1 and sent[0]["scoreGiven"] == pytest.approx(graded["score"])
    # out of the whole assignment's points (its written answers too, as the LMS's column and `export` count
    # them), and pending a TA's points for the written answers
    assert sent[0]["scoreMaximum"] == pytest.approx(points_possible(served.course))
    assert sent[0]["scoreMaximum"] > graded["score"]
    assert sent[0]["gradingProgress"] == "PendingManual" and sent[0]["activityProgress"] == "Completed"
    assert keys.scores[-1][0] == "/api/lti/courses/1/line_items/7/scores?include=results"
    store = Store(served.course / "service" / "service.db")
    # (the platform holds the score a moment before the sending thread records it as sent)
    assert backlog_drained(store) == []
    keys.down = True  # the LMS is down: grading goes on, the score waits
    status, answer = submit(served, "cy", notebook_bytes(example("cy")))
    assert status == 202, answer
    regraded = wait_graded(served, "cy", answer["id"])
    deadline = time.monotonic() + 30
    while not store.lti_backlog(ASSIGNMENT) or not store.lti_backlog(ASSIGNMENT)[0]["error"]:
        assert time.monotonic() < deadline, "the failed score was not kept"
        time.sleep(0.2)
    backlog = store.lti_backlog(ASSIGNMENT)
    assert [row["student_id"] for row in backlog] == ["cy"] and "503" in backlog[0]["error"]
    _, _, headers = launch(served, platform, user="tim-sub", roles=(INSTRUCTOR,), sourcedid="tim")
    ta = cookie_of(headers)
    status, page, _ = request(f"{served.base}/ta/{ASSIGNMENT}", cookie=ta)
    assert status == 200 and "Grades to the LMS" in page and "1\nwaits" in page and "HTTP 503 from the LMS" in page
    keys.down = False
    csrf = page.split('name="csrf" value="', 2)[2].split('"', 1)[0]  # the second form's: "send them again now"
    status, _, _ = request(f"{served.base}/ta/{ASSIGNMENT}/lti-resend", data=urlencode({"csrf": csrf}).encode(),
                           content_type="application/x-www-form-urlencoded", cookie=ta)
    assert status == 303
    sent = scores_for(keys, "cy-sub", 2, timeout=20)  # sent at once, not after its pause
    assert len(sent) == 2 and sent[1]["scoreGiven"] == pytest.approx(regraded["score"])
    deadline = time.monotonic() + 10  # (the platform has it; the tool marks it sent when the answer arrives)
    while store.lti_backlog(ASSIGNMENT):
        assert time.monotonic() < deadline, store.lti_backlog(ASSIGNMENT)
        time.sleep(0.1)


def test_a_score_counted_before_the_first_launch_from_a_column_is_sent_then(lms):
    served, platform, keys, _ = lms
    _, _, headers = launch(served, platform, user="eve-sub", sourcedid="eve")  # a link without a column
    served.tokens["eve"] = cookie_of(headers).split("=", 1)[1]
    status, answer = submit(served, "eve", notebook_bytes(example("ben")))
    assert status == 202, answer
    graded = wait_graded(served, "eve", answer["id"])
    assert scores_for(keys, "eve-sub", 1, timeout=2) == []  # nowhere to send it yet
    column = f"{keys.url}/api/lti/courses/1/line_items/8"
    assert launch(served, platform, user="eve-sub", sourcedid="eve", lineitem=column)[0] == 200
    sent = scores_for(keys, "eve-sub", 1)
    assert len(sent) == 1 and sent[0]["scoreGiven"] == pytest.approx(graded["score"])
    assert launch(served, platform, user="eve-sub", sourcedid="eve", lineitem=column)[0] == 200
    time.sleep(1)
    assert len(scores_for(keys, "eve-sub", 2, timeout=1)) == 1  # the same score is not sent twice


@pytest.mark.slow
def test_a_class_of_30_from_the_lms_gets_each_counted_score_in_its_column_once_within_10_s(lms):
    """Issue 46's class: 30 students launch one assignment's link (one gradebook column) and hand in;
    every counted score reaches the column once, within 10 s of its grading, and is the score
    grades.csv records for them."""
    import csv

    served, platform, keys, _ = lms
    column = f"{keys.url}/api/lti/courses/2/line_items/30"
    students = [f"class{n:02d}" for n in range(30)]
    submissions = {}
    for index, student in enumerate(students):
        status, _, headers = launch(served, platform, user=f"{student}-sub", sourcedid=student, lineitem=column)
        assert status == 200
        served.tokens[student] = cookie_of(headers).split("=", 1)[1]
        status, answer = submit(served, student, notebook_bytes(example(("ada", "ben", "cy", "dee")[index % 4])))
        assert status == 202, answer
        submissions[student] = answer["id"]
    graded = {student: wait_graded(served, student, submission, timeout=300)
              for student, submission in submissions.items()}
    deadline = time.monotonic() + 60
    while len({score["userId"] for path, score in keys.scores if "/line_items/30/" in path}) < 30:
        assert time.monotonic() < deadline, "not every score reached the column"
        time.sleep(0.2)
    time.sleep(1)  # (anything sent twice would be in by now)
    in_column = [score for path, score in keys.scores if "/line_items/30/" in path]
    assert sorted(score["userId"] for score in in_column) == sorted(f"{s}-sub" for s in students)  # once each
    grades, recorded = served.course / "graded" / ASSIGNMENT / "grades.csv", {}
    deadline = time.monotonic() + 30  # written two quiet seconds after the last result (counting.py)
    while not set(students) <= set(recorded):
        assert time.monotonic() < deadline, "grades.csv does not list the class"
        time.sleep(0.5)
        if grades.exists():
            with open(grades, newline="") as handle:
                recorded = {row["student_id"]: float(row["total"]) for row in csv.DictReader(handle)}
    for score in in_column:
        student = score["userId"].removesuffix("-sub")
        assert score["scoreGiven"] == pytest.approx(graded[student]["score"]) == pytest.approx(recorded[student])
    store = Store(served.course / "service" / "service.db")
    took = []
    for student in students:
        row = store.read("SELECT sent_at FROM lti_scores WHERE student_id = ? AND lineitem = ?", student, column)[0]
        done = store.read("SELECT graded_at FROM submissions WHERE id = ?", submissions[student])[0]
        took.append((datetime.fromisoformat(row["sent_at"]) - datetime.fromisoformat(done["graded_at"])).total_seconds())
    assert max(took) <= 10, sorted(took)[-5:]


def deep_link_claims(accept=("ltiResourceLink",), columns=None, back="https://lms.example.edu/courses/1/deep_link_return"):
    """The claims of an instructor's deep-linking launch (adding a link in the LMS), returning to `back`.
    `columns`: the LMS course's line items URL (its AGS claim), so the tool can look for a column."""
    settings = LtiDeepLinking(back).get_lti_deep_linking_launch_claim(
        title="Add", accept_types=set(accept), extra_data={"opaque": "from-the-lms"})
    if columns:
        settings.update(LtiAgs(lineitems_url=columns).get_lti_ags_launch_claim())
    return {**settings, "https://purl.imsglobal.org/spec/lti/claim/message_type": "LtiDeepLinkingRequest"}


def deep_link_request(served, platform, roles=(INSTRUCTOR,), accept=("ltiResourceLink",), columns=None):
    """An instructor's deep-linking launch: (status, page, headers)."""
    return launch(served, platform, user="tim-sub", roles=roles, sourcedid="tim", custom={},
                  claims=deep_link_claims(accept, columns))


def test_an_instructor_picks_an_assignment_and_the_lms_gets_a_signed_link_with_its_column(lms):
    served, platform, _, _ = lms
    status, page, headers = deep_link_request(served, platform)
    assert status == 200 and "Add an assignment to your course" in page and "set-cookie" not in headers
    pick = page.split('name="pick" value="', 1)[1].split('"', 1)[0]
    form = urlencode({"pick": pick, "assignment": ASSIGNMENT}).encode()
    status, back, _ = request(f"{served.base}/lti/deep-link", data=form, content_type="application/x-www-form-urlencoded")
    assert status == 200 and 'action="https://lms.example.edu/courses/1/deep_link_return"' in back
    token = back.split('name="JWT" value="', 1)[1].split('"', 1)[0]
    items = platform.validate_deeplinking_resp({"JWT": token})  # the platform's own check, with the tool's JWKS
    assert len(items) == 1 and items[0]["type"] == "ltiResourceLink"
    assert items[0]["custom"] == {"assignment": ASSIGNMENT} and items[0]["url"].endswith(f"assignment={ASSIGNMENT}")
    line = items[0]["lineItem"]
    assert line["resourceId"] == ASSIGNMENT and line["scoreMaximum"] == pytest.approx(points_possible(served.course))
    claims = jwt.decode(token, options={"verify_signature": False})
    assert claims["aud"] == ISSUER and claims["https://purl.imsglobal.org/spec/lti-dl/claim/data"] == {
        "opaque": "from-the-lms"}  # what the platform asked to get back
    status, _, _ = request(f"{served.base}/lti/deep-link", data=form, content_type="application/x-www-form-urlencoded")
    assert status == 401  # the pick is good once


def test_a_learner_cannot_add_links_and_a_request_that_takes_no_links_is_refused(lms):
    served, platform, _, _ = lms
    before = len(launches(served)), tokens(served)
    why = refused(served, deep_link_request(served, platform, roles=(LEARNER,)), before)
    assert "not an instructor" in why
    before = len(launches(served)), tokens(served)
    why = refused(served, deep_link_request(served, platform, accept=("html",)), before)
    assert "accepts no ltiResourceLink" in why


def pick(served, page, assignment=ASSIGNMENT):
    """The instructor's pick on the deep-linking page: the signed response's content items, as the platform reads them."""
    chosen = page.split('name="pick" value="', 1)[1].split('"', 1)[0]
    form = urlencode({"pick": chosen, "assignment": assignment}).encode()
    status, back, _ = request(f"{served.base}/lti/deep-link", data=form, content_type="application/x-www-form-urlencoded")
    assert status == 200, back
    return back.split('name="JWT" value="', 1)[1].split('"', 1)[0]


def test_a_link_made_again_reuses_its_column_and_its_scores_go_there(lms):
    served, platform, keys, _ = lms
    columns = f"{keys.url}/api/lti/courses/3/line_items"
    first = platform.validate_deeplinking_resp({"JWT": pick(served, deep_link_request(served, platform, columns=columns)[1])})
    assert "lineItem" in first[0]  # a new column, as the course has none for it
    made = f"{columns}/91"
    keys.columns.append({"id": made, "resourceId": first[0]["lineItem"]["resourceId"]})  # the LMS makes it
    again = platform.validate_deeplinking_resp({"JWT": pick(served, deep_link_request(served, platform, columns=columns)[1])})
    assert len(again) == 1 and "lineItem" not in again[0]  # made again: a link alone, no second column
    # a student opens the new link: its AGS claim names the course's columns but no column of its own
    ags = LtiAgs(lineitems_url=columns).get_lti_ags_launch_claim()
    status, _, headers = launch(served, platform, user="fay-sub", sourcedid="fay", claims=ags)
    assert status == 200
    served.tokens["fay"] = cookie_of(headers).split("=", 1)[1]
    status, answer = submit(served, "fay", notebook_bytes(example("ada")))
    assert status == 202, answer
    wait_graded(served, "fay", answer["id"])
    sent = scores_for(keys, "fay-sub", 1)
    assert len(sent) == 1 and [path for path, score in keys.scores if score["userId"] == "fay-sub"] == [
        "/api/lti/courses/3/line_items/91/scores"]  # into the column the first link made


def test_the_lms_roster_comes_with_an_instructors_launch_and_maps_students_as_launches_do(lms):
    served, platform, keys, _ = lms
    keys.members = [
        {"user_id": "gus-sub", "lis_person_sourcedid": "gus", "name": "Gus G", "email": "gus@example.edu",
         "roles": [LEARNER], "status": "Active"},
        {"user_id": "hal-sub", "name": "Hal H", "roles": [LEARNER], "status": "Inactive"},  # dropped the course
        {"user_id": "ida-sub", "lis_person_sourcedid": "ida", "name": "Ida I", "roles": [INSTRUCTOR]},
    ]
    names = {"https://purl.imsglobal.org/spec/lti-nrps/claim/namesroleservice": {
        "context_memberships_url": f"{keys.url}/api/lti/courses/1/names_and_roles", "service_versions": ["2.0"]},
        "https://purl.imsglobal.org/spec/lti/claim/context": {"id": "course-1", "title": "Attention"}}
    status, _, headers = launch(served, platform, user="tim-sub", roles=(INSTRUCTOR,), sourcedid="tim", claims=names)
    assert status == 200
    store = Store(served.course / "service" / "service.db")
    deadline = time.monotonic() + 20
    while "gus" not in store.lti_roster():
        assert time.monotonic() < deadline, launches(served)[-3:]
        time.sleep(0.2)
    roster = store.lti_roster()
    assert roster["gus"]["email"] == "gus@example.edu" and roster["ida"]["role"] == "ta" and "hal-sub" not in roster
    status, page, _ = request(f"{served.base}/ta/{ASSIGNMENT}", cookie=cookie_of(headers))
    assert status == 200 and "<td>gus</td>" in page and "<td>ida</td>" not in page  # students only
    assert store.lti_person(ISSUER, "gus-sub", "someone-else") == "gus"  # his launch will be graded as gus
    done = cli("lti", "roster", "--out", served.course / "lms-roster.csv", "--course", served.course)
    assert done.returncode == 0, done.stdout + done.stderr
    written = (served.course / "lms-roster.csv").read_text().splitlines()
    assert written[0] == "student_id,name,email" and "gus,Gus G,gus@example.edu" in written
    assert not any(line.startswith("ida,") for line in written)  # students only, not the course's instructor


def test_odd_input_is_refused_and_recorded_never_a_server_error(lms):
    served, platform, _, _ = lms
    before = len(launches(served))
    query = urlencode({"iss": ISSUER, "login_hint": "x", "target_link_uri": "http://["})  # not a URL
    status, _, headers = request(f"{served.base}/lti/login?{query}")
    assert status == 401 and "location" not in headers
    query = urlencode({"iss": ISSUER, "login_hint": "x", "target_link_uri": f"{served.base}/lti/launchX"})
    assert request(f"{served.base}/lti/login?{query}")[0] == 401  # not this tool's launch address
    assert [r["outcome"] for r in launches(served)[before:]] == ["refused", "refused"]
    before = len(launches(served)), tokens(served)
    preflight = {**authorize(served, platform), "nonce": "n\u00e9e"}  # a nonce the platform signs as it was asked
    assert "nonce" in refused(served, launch(served, platform, preflight=preflight), before)
    before = len(launches(served)), tokens(served)
    why = refused(served, launch(served, platform, claims={"aud": [CLIENT, "another-tool"], "azp": "another-tool"}),
                  before)
    assert "authorized party" in why or "InvalidAudience" in why
    before = len(launches(served)), tokens(served)
    why = refused(served, launch(served, platform, claims={"https://purl.imsglobal.org/spec/lti/claim/lis": "x",
                                                           "https://purl.imsglobal.org/spec/lti/claim/version": "1.1"}),
                  before)
    assert "LTI version" in why


def test_a_platform_limited_to_its_courses_refuses_another_course_and_admins_are_not_tas(tmp_path):
    from autograder.service.lti import CLAIM, Lti, LtiRefused, role_of

    (tmp_path / "lti.toml").write_text(
        f'[[platform]]\nissuer = "{ISSUER}"\nclient_id = "{CLIENT}"\ndeployment_ids = ["{DEPLOYMENT}"]\n'
        f'login_url = "https://lms/authorize"\nkeys_url = "https://lms/jwks"\ncontexts = ["course-1"]\n')
    tool = Lti(tmp_path, tmp_path, Store(tmp_path / "service.db"), [ASSIGNMENT])
    claims = {"sub": "tim-sub", CLAIM + "deployment_id": DEPLOYMENT, CLAIM + "message_type": "LtiResourceLinkRequest",
              CLAIM + "version": "1.3.0", CLAIM + "roles": [INSTRUCTOR], CLAIM + "custom": {"assignment": ASSIGNMENT}}
    ours = tool._accepted(tool.platforms[0], {**claims, CLAIM + "context": {"id": "course-1"}})
    assert ours.role == "ta"
    with pytest.raises(LtiRefused, match="does not list"):  # an instructor of another course of the account
        tool._accepted(tool.platforms[0], {**claims, CLAIM + "context": {"id": "course-2"}})
    with pytest.raises(LtiRefused):
        role_of(["http://purl.imsglobal.org/vocab/lis/v2/institution/person#Administrator"])


def test_a_student_id_another_person_holds_is_never_given_to_a_second_one(tmp_path):
    store = Store(tmp_path / "service.db")
    assert store.lti_person("https://canvas.example", "ada-sub", "ada") == "ada"
    other = store.lti_person("https://moodle.example", "m-17", "ada")  # another LMS's person says they are ada
    assert other != "ada" and other.startswith("ada-")
    assert store.lti_person("https://canvas.example", "ada-sub", "renamed") == "ada"  # kept for the first
    assert store.lti_person("https://moodle.example", "m-17", "ada") == other


def launch_in(browser, served, platform, user, **launch):
    """A launch as a browser makes it: the LMS's login initiation opened (the tool sends the browser to
    the platform's authorization page, keeping its state in a cookie), then the platform's page posts
    the signed launch back."""
    login = Login(None, platform)
    login.set_lti_message_hint()
    browser.get(login.prepare_preflight_url(user))
    preflight = dict(parse_qsl(urlsplit(browser.current_url).query))  # (at the platform's /authorize now)
    post_from_the_lms(browser, f"{served.base}/lti/launch", launch_form(served, platform, user, preflight=preflight,
                                                                        **launch))


def post_from_the_lms(browser, url, form):
    """What an LMS's page does: a form of `form`'s fields posted to `url`, from the page it is on."""
    browser.execute_script(
        "const form = document.createElement('form'); form.method = 'post'; form.action = arguments[0];"
        "for (const [name, value] of Object.entries(arguments[1])) {"
        "  const field = document.createElement('input'); field.type = 'hidden'; field.name = name;"
        "  field.value = value; form.appendChild(field); }"
        "document.body.appendChild(form); form.submit();", url, form)


@pytest.mark.slow  # (a browser)
def test_in_a_browser_a_launch_signs_in_the_ta_page_shows_the_lms_and_a_pick_goes_back_signed(lms, tmp_path):
    """Headless Chromium through every LTI page: a learner's launch lands signed in on the assignment,
    an instructor's on the TA page with its "Grades to the LMS" section, and a deep-linking pick is
    posted back to the LMS by the page itself (its script runs)."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    from browser import full_page_screenshot, start_browser

    served, platform, keys, _ = lms
    browser = start_browser()
    try:
        launch_in(browser, served, platform, "bro-sub", sourcedid="bro")
        WebDriverWait(browser, 20).until(lambda b: urlsplit(b.current_url).path == f"/assignments/{ASSIGNMENT}")
        assert browser.find_elements(By.CSS_SELECTOR, "form.upload")  # signed in: the upload form is there
        browser.delete_all_cookies()
        launch_in(browser, served, platform, "tim-sub", roles=(INSTRUCTOR,), sourcedid="tim")
        WebDriverWait(browser, 20).until(lambda b: urlsplit(b.current_url).path == f"/ta/{ASSIGNMENT}")
        text = browser.find_element(By.TAG_NAME, "body").text
        assert "Grades to the LMS" in text and "bro" in text, text[:3000]
        full_page_screenshot(browser, tmp_path / "ta-lms.png", 1100)
        launch_in(browser, served, platform, "tim-sub", roles=(INSTRUCTOR,), sourcedid="tim", custom={},
                  claims=deep_link_claims(back=f"{keys.url}/deep_link_return"))
        WebDriverWait(browser, 20).until(lambda b: b.find_elements(By.CSS_SELECTOR, "#assignments button"))
        before = len(keys.returned)
        browser.find_element(By.CSS_SELECTOR, "#assignments button").click()
        deadline = time.monotonic() + 20
        while len(keys.returned) == before:  # the return page posts itself: no click needed
            assert time.monotonic() < deadline, browser.page_source[:2000]
            time.sleep(0.2)
        assert set(keys.returned[-1]) == {"JWT"}
        claims = jwt.decode(keys.returned[-1]["JWT"], options={"verify_signature": False})
        assert claims["https://purl.imsglobal.org/spec/lti/claim/message_type"] == "LtiDeepLinkingResponse"
    finally:
        browser.quit()


def grade_written_answers(course, student, timeout=60):
    """A TA's full points for `student`'s written answers, as formgrader saves them (nbgrader's gradebook),
    once the service has put the submission there (at its quiet-time finish)."""
    import nbformat
    from nbgrader.api import Gradebook, MissingEntry

    from autograder.grading.notebook import manual_cells
    from autograder.outputs.gradebook_db import gradebook_url

    written = manual_cells(nbformat.read(course / "source" / ASSIGNMENT / f"{ASSIGNMENT}.ipynb", as_version=4))
    deadline = time.monotonic() + timeout
    while True:
        try:
            with Gradebook(gradebook_url(course)) as gradebook:
                notebook = gradebook.find_submission_notebook(ASSIGNMENT, ASSIGNMENT, student)
                for grade in notebook.grades:
                    if grade.name in written:
                        grade.manual_score = written[grade.name]
                gradebook.db.commit()
                return sum(written.values())
        except MissingEntry:
            assert time.monotonic() < deadline, f"{student} never reached the gradebook"
            time.sleep(0.5)


@pytest.mark.slow
def test_final_grades_after_formgrader_go_to_the_column_as_fully_graded(lms):
    """The autograded part goes while written answers wait (PendingManual); once a TA has graded them in
    formgrader, `autograder lti send` sends the final grade, FullyGraded, equal to `autograder export`'s."""
    import csv

    served, platform, keys, _ = lms
    column = f"{keys.url}/api/lti/courses/4/line_items/60"
    for student in ("fg1", "fg2"):
        status, _, headers = launch(served, platform, user=f"{student}-sub", sourcedid=student, lineitem=column)
        assert status == 200
        served.tokens[student] = cookie_of(headers).split("=", 1)[1]
        wait_graded(served, student, submit(served, student, notebook_bytes(example("ben")))[1]["id"])
        assert scores_for(keys, f"{student}-sub", 1)[-1]["gradingProgress"] == "PendingManual"
    written = grade_written_answers(served.course, "fg1")  # fg2's written answers still wait
    done = cli("lti", "send", ASSIGNMENT, "--course", served.course)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "1 final grade(s)" in done.stdout and "every score is in the LMS" in done.stdout, done.stdout
    out = served.course / "final-fg.csv"
    cli("export", "csv", ASSIGNMENT, "--course", served.course, "--out", out)
    with open(out, newline="") as handle:
        exported = {row["student_id"]: row for row in csv.DictReader(handle)}
    fg1, fg2 = scores_for(keys, "fg1-sub", 2), scores_for(keys, "fg2-sub", 1)
    assert len(fg1) == 2 and fg1[-1]["gradingProgress"] == "FullyGraded", fg1
    assert fg1[-1]["scoreGiven"] == pytest.approx(float(exported["fg1"]["total"])) == pytest.approx(
        fg1[0]["scoreGiven"] + written)
    assert len(fg2) == 1 and exported["fg2"]["status"] == "needs grading"  # unchanged: nothing sent again
    done = cli("lti", "send", ASSIGNMENT, "--course", served.course)  # again: nothing new to send
    assert done.returncode == 0 and "0 final grade(s)" in done.stdout, done.stdout
    # a resubmission's autograded part never replaces the final grade in the column (send again for that)
    wait_graded(served, "fg1", submit(served, "fg1", notebook_bytes(example("cy")))[1]["id"])
    assert len(scores_for(keys, "fg1-sub", 3, timeout=3)) == 2


@pytest.mark.slow  # (the LMS stays down for a whole minute; last in this file: it changes a check's weight)
def test_a_regrade_reaches_the_column_and_a_minute_of_the_lms_down_loses_nothing(lms):
    """Issue 46's done-when: a regrade updates the LMS's column; with the platform down for a minute,
    the TA page shows the backlog and every score arrives afterwards by itself (no resend), equal to
    what `autograder export` gives the same students."""
    import csv

    from test_reruns import reweigh

    served, platform, keys, _ = lms
    column = f"{keys.url}/api/lti/courses/3/line_items/50"
    students = {"rg1": "ben", "rg2": "cy", "rg3": "ada"}
    for student, answer in students.items():
        status, _, headers = launch(served, platform, user=f"{student}-sub", sourcedid=student, lineitem=column)
        assert status == 200
        served.tokens[student] = cookie_of(headers).split("=", 1)[1]
        wait_graded(served, student, submit(served, student, notebook_bytes(example(answer)))[1]["id"])
    first = {student: scores_for(keys, f"{student}-sub", 1)[-1]["scoreGiven"] for student in students}
    keys.down, went_down = True, time.monotonic()
    reweigh(served.course, 9)  # a check's weight changed: the TA regrades everyone
    _, _, headers = launch(served, platform, user="tim-sub", roles=(INSTRUCTOR,), sourcedid="tim")
    ta = cookie_of(headers)
    page = request(f"{served.base}/ta/{ASSIGNMENT}", cookie=ta)[1]
    csrf = page.split('name="csrf" value="', 1)[1].split('"', 1)[0]  # the first form's: regrade
    status, _, _ = request(f"{served.base}/ta/{ASSIGNMENT}/regrade", data=urlencode({"csrf": csrf}).encode(),
                           content_type="application/x-www-form-urlencoded", cookie=ta)
    assert status == 303
    deadline = time.monotonic() + 300
    while "done at" not in (page := request(f"{served.base}/ta/{ASSIGNMENT}", cookie=ta)[1]):
        assert "failed" not in page and time.monotonic() < deadline, page[-2000:]
        time.sleep(0.5)
    moved = {s for s in students if json.loads((served.course / "graded" / ASSIGNMENT / f"{s}.json").read_text())[
        "score"] != pytest.approx(first[s])}
    assert moved and moved != set(students), moved  # (the answer that passes the check keeps its score)
    store = Store(served.course / "service" / "service.db")
    deadline = time.monotonic() + 30
    while not moved <= {row["student_id"] for row in store.lti_backlog(ASSIGNMENT) if row["error"]}:
        assert time.monotonic() < deadline, store.lti_backlog(ASSIGNMENT)
        time.sleep(0.5)
    page = request(f"{served.base}/ta/{ASSIGNMENT}", cookie=ta)[1]
    assert "they are sent by themselves once the LMS answers" in page and "HTTP 503 from the LMS" in page  # the backlog
    time.sleep(max(0.0, 60 - (time.monotonic() - went_down)))
    keys.down = False  # back after a minute: the retries (5 s, 10 s, 20 s, 40 s, ...) send it all
    deadline = time.monotonic() + 120
    while store.lti_backlog(ASSIGNMENT):
        assert time.monotonic() < deadline, store.lti_backlog(ASSIGNMENT)
        time.sleep(0.5)
    out = served.course / "final.csv"
    done = cli("export", "csv", ASSIGNMENT, "--course", served.course, "--out", out)
    # (exit 1: no final grade yet, the written answers wait for formgrader; the file has the points so far)
    assert done.returncode == 1 and "still to grade in formgrader" in done.stdout, done.stdout + done.stderr
    with open(out, newline="") as handle:
        exported = {row["student_id"]: row for row in csv.DictReader(handle)}
    for student in students:
        last = [score for path, score in keys.scores if "/line_items/50/" in path and score["userId"] == f"{student}-sub"]
        assert len(last) == (2 if student in moved else 1), (student, last)  # a score the column has is not resent
        row = exported[student]  # (no late penalty here: the score sent is the autograded part, out of all points)
        assert last[-1]["scoreGiven"] == pytest.approx(float(row["autograded"]) - float(row["late_penalty"] or 0)), row
        assert last[-1]["scoreMaximum"] == pytest.approx(float(row["out_of"])), row
