"""The Hub sign-in's parts, without a Hub (tests/test_hub.py runs a real one): who a Hub user is,
what a missing or broken setup says, the path prefix, and where a sign-in may go on to."""
import asyncio
import hashlib
import json

import pytest

from autograder.service.guard import Prefix, route_path
from autograder.service.hub import TA_SCOPE, Hub, HubError, access_scopes, config_snippet, page_of
from autograder.service.store import COURSE, STUDENT, TA
from autograder.service.submit import Refused

from helpers import cli, new_course
from service_helpers import free_port

ACCESS = "access:services!service=autograder"


def environ(**changes):
    given = {"JUPYTERHUB_API_TOKEN": "service-token", "JUPYTERHUB_API_URL": f"http://127.0.0.1:{free_port()}/hub/api",
             "JUPYTERHUB_CLIENT_ID": "service-autograder", "JUPYTERHUB_SERVICE_PREFIX": "/services/autograder/",
             "JUPYTERHUB_SERVICE_NAME": "autograder"}
    given.update(changes)
    return {key: value for key, value in given.items() if value is not None}


def model(name="ada", scopes=(ACCESS,), groups=(), kind="user"):
    return {"kind": kind, "name": name, "scopes": list(scopes), "groups": list(groups)}


def test_who_a_hub_user_is(tmp_path):
    (tmp_path / "hub.toml").write_text('ta_groups = ["graders"]\n')
    hub = Hub(tmp_path, environ())
    ada = hub.who_of(model())
    assert (ada.student_id, ada.role, ada.assignment, ada.token_id) == ("ada", STUDENT, COURSE, "hub:ada")
    assert hub.who_of(model("tim", groups=["graders"])).role == TA  # by a group hub.toml names
    assert hub.who_of(model("tia", scopes=(ACCESS, TA_SCOPE))).role == TA  # by a Hub role holding the scope
    assert hub.who_of(model("sam", groups=["students"])).role == STUDENT
    assert hub.who_of(model("eve", scopes=("access:services!service=another",))) is None
    assert hub.who_of(model("eve", scopes=())) is None
    assert hub.who_of(model("grader-bot", kind="service")) is None  # a service's token is nobody's
    assert hub.who_of(None) is None and hub.who_of({"kind": "user"}) is None
    odd = hub.who_of(model("ada lovelace/../x"))
    assert odd.student_id.startswith("hub-") and "/" not in odd.student_id  # kept as a safe file name


def test_the_hub_being_away_is_said_not_a_server_error(tmp_path):
    hub = Hub(tmp_path, environ())  # its API URL: a port nothing listens on
    with pytest.raises(Refused) as refused:
        hub.who("a-token", lambda: None)
    assert refused.value.status == 503 and "JupyterHub cannot be reached" in refused.value.message


def test_a_lookup_is_counted_only_when_the_hub_is_asked(tmp_path):
    hub = Hub(tmp_path, environ())
    asked = []
    hub.auth.cache["token::" + hashlib.sha256(b"known").hexdigest()] = model()
    assert hub.who("known", lambda: asked.append(1)).student_id == "ada"
    assert asked == []  # answered from the cache: the asker's rate is not spent
    with pytest.raises(Refused):
        hub.who("unknown", lambda: asked.append(1))
    assert asked == [1]


@pytest.mark.parametrize("changes, words", [
    ({"JUPYTERHUB_API_TOKEN": None}, "JUPYTERHUB_API_TOKEN is not set"),
    ({"JUPYTERHUB_CLIENT_ID": None, "JUPYTERHUB_SERVICE_PREFIX": None}, "are not set"),
    ({"JUPYTERHUB_SERVICE_NAME": None}, "cannot tell which Hub users may use it"),
    ({"JUPYTERHUB_OAUTH_ACCESS_SCOPES": "not json"}, "not a JSON list"),
    ({"JUPYTERHUB_OAUTH_CALLBACK_URL": "/elsewhere/oauth_callback"}, "not under the service's prefix"),
])
def test_a_setup_the_service_cannot_use_is_said(tmp_path, changes, words):
    with pytest.raises(HubError, match=words):
        Hub(tmp_path, environ(**changes))


def test_access_scopes_come_from_the_hub():
    assert access_scopes(environ(JUPYTERHUB_OAUTH_ACCESS_SCOPES=json.dumps([ACCESS, "x"]))) == {ACCESS, "x"}
    assert access_scopes(environ()) == {ACCESS}


@pytest.mark.parametrize("text", ['ta_groups = "graders"\n', 'ta_group = ["graders"]\n', "ta_groups = [\n"])
def test_a_broken_hub_toml_is_said(tmp_path, text):
    (tmp_path / "hub.toml").write_text(text)
    with pytest.raises(HubError, match="hub.toml"):
        Hub(tmp_path, environ())


def test_serve_hub_outside_a_hub_says_what_is_missing(tmp_path):
    course = new_course(tmp_path)
    done = cli("serve", "--hub", "--course", course, env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)})
    assert done.returncode == 2, done.stdout + done.stderr
    assert "JUPYTERHUB_API_TOKEN" in done.stdout and "Traceback" not in done.stdout + done.stderr


def test_serve_refuses_a_base_url_beside_the_hubs_own_path(tmp_path):
    course = new_course(tmp_path)
    done = cli("serve", "--hub", "--base-url", "/grader", "--course", course)
    assert done.returncode == 2 and "leave out --base-url" in done.stdout, done.stdout + done.stderr
    done = cli("serve", "--base-url", "grader", "--course", course)
    assert done.returncode == 2 and "is a path such as /grader" in done.stdout, done.stdout + done.stderr


@pytest.mark.parametrize("wanted, page", [
    ("/services/autograder/ta/a", "/services/autograder/ta/a"),
    ("//evil.example/", "/services/autograder/"), ("https://evil.example/", "/services/autograder/"),
    ("/services/autograderx/", "/services/autograder/"), ("/services/autograder/\\evil", "/services/autograder/"),
    ("/services/autograder/a\r\nSet-Cookie: x", "/services/autograder/"), ("", "/services/autograder/"),
])
def test_a_sign_in_goes_on_only_to_a_page_of_the_service(wanted, page):
    assert page_of("/services/autograder", wanted) == page


def run_asgi(path):
    """(status, headers, scope the app saw) of a GET of `path` through Prefix("/grader")."""
    seen, sent = {}, []

    async def inner(scope, receive, send):
        seen.update(scope, route=route_path(scope))
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b""})

    async def receive():
        return {"type": "http.request", "body": b""}

    async def send(message):
        sent.append(message)

    asyncio.run(Prefix(inner, "/grader")({"type": "http", "path": path, "headers": []}, receive, send))
    start = sent[0]
    return start["status"], dict(start["headers"]), seen


def test_the_prefix_routes_what_is_below_it_and_nothing_else():
    status, _, seen = run_asgi("/grader/ta/x")
    assert status == 200 and seen["route"] == "/ta/x" and seen["root_path"] == "/grader"
    status, headers, seen = run_asgi("/grader")
    assert status == 302 and headers[b"location"] == b"/grader/" and not seen
    status, _, seen = run_asgi("/graderx/ta")
    assert status == 404 and not seen
    status, _, seen = run_asgi("/ta/x")
    assert status == 404 and not seen


def test_the_hub_config_lines_are_python_the_hub_loads(tmp_path):
    from traitlets.config import Config

    text = config_snippet(tmp_path, "http://127.0.0.1:8000", 8765, groups=["students"], ta_groups=["graders"],
                          client_dir=tmp_path / "client")
    c = Config()
    exec(compile(text, "jupyterhub_config.py", "exec"), {"c": c})  # the Hub reads its config file as this does
    from jupyterhub.app import JupyterHub

    hub = JupyterHub(config=c)
    service = [s for s in hub.services if s["name"] == "autograder"][0]
    assert service["url"] == "http://127.0.0.1:8765" and "--hub" in service["command"]
    roles = {role["name"]: role for role in hub.load_roles}
    assert roles["autograder-user"]["groups"] == ["students", "graders"]
    assert TA_SCOPE in roles["autograder-ta"]["scopes"] and roles["autograder-ta"]["groups"] == ["graders"]
    assert TA_SCOPE in hub.custom_scopes
    everyone = config_snippet(tmp_path, "http://127.0.0.1:8000")  # no group named: the Hub's user role
    c = Config()
    exec(compile(everyone, "jupyterhub_config.py", "exec"), {"c": c})
    assert JupyterHub(config=c).load_roles == [{"name": "user", "scopes": ["self", ACCESS]}]
