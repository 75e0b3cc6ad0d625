"""Signed in by the course's JupyterHub: `autograder serve --hub` runs as a Hub service.

The Hub starts the service (or is told its address) and gives it, in the environment, its own API
token, its OAuth client id and the path it is served under (/services/<name>/). Then:

* a browser signs in with the Hub's OAuth (JupyterHub's own `HubOAuth` does the protocol: the
  state, PKCE, the code for a token); the token is kept in the service's sign-in cookie, and no
  token is ever handed out or seen by the student;
* an API call may carry any Hub token (`Authorization: token ...` or `Bearer ...`): a student's
  server already holds one (JUPYTERHUB_API_TOKEN), so a notebook hands itself in with one call
  (service/client.py, `hand_in_here`);
* the Hub says whose a token is (`user_for_token`, cached by HubAuth for a minute). A user may use
  the service only with the scope the Hub grants for it (access:services!service=<name>); a TA is
  a member of one of the course's `ta_groups` (hub.toml) or holds the custom scope TA_SCOPE.

The service's own tokens keep working beside it, for anyone without a Hub account.
"""
import hashlib
import json
import os
import sys
import tomllib
from dataclasses import dataclass
from pathlib import Path
from pprint import pformat
from urllib.parse import urlencode, urlsplit

from autograder.service.lti import SAFE_ID
from autograder.service.store import COURSE, STUDENT, TA, Who
from autograder.service.submit import Refused

CONFIG = "hub.toml"
TA_SCOPE = "custom:autograder:ta"
# what the Hub sets for a service it manages (or an admin sets for one it only proxies)
NEEDED = ("JUPYTERHUB_API_TOKEN", "JUPYTERHUB_API_URL", "JUPYTERHUB_CLIENT_ID", "JUPYTERHUB_SERVICE_PREFIX")
STATE_COOKIE = "autograder-hub-state"
LOOKUPS_PER_MINUTE = 300  # a Hub lookup for a token it has not seen this minute, per address


class HubError(Exception):
    """The service cannot run as a Hub service here; the message says what is missing."""


@dataclass(frozen=True)
class HubSettings:
    """The course's hub.toml: who is a TA."""

    ta_groups: tuple = ()

    @classmethod
    def of(cls, course_root):
        path = Path(course_root) / CONFIG
        if not path.is_file():
            return cls()
        try:
            data = tomllib.loads(path.read_text())
        except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as error:
            raise HubError(f"{path} could not be read: {error}") from None
        groups = data.get("ta_groups", [])
        unknown = sorted(set(data) - {"ta_groups"})
        if not isinstance(groups, list) or not all(isinstance(g, str) and g for g in groups) or unknown:
            raise HubError(f"{path}: expected only ta_groups = [\"group\", ...] (the Hub groups whose members are"
                           f" TAs){'; unknown: ' + ', '.join(unknown) if unknown else ''}")
        return cls(tuple(groups))


def page_of(base, wanted):
    """`wanted` if it is a page of this service (a path under `base`), else its start page: a sign-in
    never sends the browser on to another site."""
    if (isinstance(wanted, str) and wanted.startswith(base + "/") and not wanted.startswith("//")
            and "\\" not in wanted and all(ord(c) > 31 for c in wanted)):
        return wanted
    return base + "/"


def access_scopes(environ):
    """The scopes that let a Hub user use this service, as the Hub names them for it."""
    given = environ.get("JUPYTERHUB_OAUTH_ACCESS_SCOPES")
    try:
        scopes = set(json.loads(given)) if given else set()
    except (ValueError, TypeError):
        raise HubError(f"JUPYTERHUB_OAUTH_ACCESS_SCOPES is not a JSON list of scopes: {given[:80]!r}") from None
    if not scopes and environ.get("JUPYTERHUB_SERVICE_NAME"):
        scopes = {f"access:services!service={environ['JUPYTERHUB_SERVICE_NAME']}"}
    if not scopes or not all(isinstance(scope, str) for scope in scopes):
        raise HubError("neither JUPYTERHUB_OAUTH_ACCESS_SCOPES nor JUPYTERHUB_SERVICE_NAME is set: the service"
                       " cannot tell which Hub users may use it")
    return scopes


class Hub:
    """The Hub this service belongs to: who a token is, and the OAuth sign-in."""

    def __init__(self, course_root, environ=None):
        environ = os.environ if environ is None else environ
        missing = [name for name in NEEDED if not environ.get(name)]
        if missing:
            raise HubError(f"--hub runs the service as a JupyterHub service, and {', '.join(missing)} "
                           f"{'is' if len(missing) == 1 else 'are'} not set: start it from the Hub's"
                           " c.JupyterHub.services (docs/service.md, \"From JupyterHub\")")
        try:
            from jupyterhub.services.auth import HubOAuth  # the hub extra (pip install -e ".[hub]")
        except ImportError:
            raise HubError("--hub needs JupyterHub's service library: pip install -e \".[hub]\"") from None
        self.settings = HubSettings.of(course_root)
        self.prefix = environ["JUPYTERHUB_SERVICE_PREFIX"].rstrip("/")
        callback = environ.get("JUPYTERHUB_OAUTH_CALLBACK_URL") or f"{self.prefix}/oauth_callback"
        self.callback_path = urlsplit(callback).path
        if not self.callback_path.startswith(self.prefix + "/"):
            raise HubError(f"JUPYTERHUB_OAUTH_CALLBACK_URL ({callback}) is not under the service's prefix"
                           f" ({self.prefix}/)")
        self.access = access_scopes(environ)
        hub_prefix = (environ.get("JUPYTERHUB_BASE_URL") or "/").rstrip("/") + "/hub/"
        self.auth = HubOAuth(api_token=environ["JUPYTERHUB_API_TOKEN"], api_url=environ["JUPYTERHUB_API_URL"],
                             oauth_client_id=environ["JUPYTERHUB_CLIENT_ID"], base_url=self.prefix + "/",
                             hub_prefix=hub_prefix, hub_host=environ.get("JUPYTERHUB_HOST", ""),
                             oauth_redirect_uri=callback, access_scopes=self.access, cache_max_age=60)
        self.logout_url = self.auth.hub_prefix.rstrip("/") + "/logout"

    # -- whose token ----------------------------------------------------------------------------
    def who(self, token, count_lookup):
        """The Who of a Hub token, None when the Hub knows no such token or the user may not use this
        service. `count_lookup()` runs before the Hub is asked (it raises when the asker is over its
        rate); a token asked about within the minute is answered from HubAuth's cache."""
        key = f"token::{hashlib.sha256(token.encode('utf8', 'replace')).hexdigest()}"  # HubAuth's own cache key
        if key not in self.auth.cache:
            count_lookup()
        try:
            model = self.auth.user_for_token(token, sync=True)
        except Exception:  # noqa: BLE001 (tornado's HTTPError and connection errors alike: the Hub is away)
            raise Refused(503, "The course's JupyterHub cannot be reached to check who you are: please try again"
                               " in a minute.", headers={"Retry-After": "30"}) from None
        return self.who_of(model)

    def who_of(self, model):
        """The Who a Hub user model stands for (None: not a user, or no access to this service)."""
        if not isinstance(model, dict) or model.get("kind", "user") != "user" or not model.get("name"):
            return None  # (a service's own token: no student)
        if not self.auth.check_scopes(self.access, model):
            return None
        name = str(model["name"])
        student_id = name if SAFE_ID.fullmatch(name) else "hub-" + hashlib.sha256(name.encode()).hexdigest()[:16]
        groups = set(model.get("groups") or [])
        is_ta = bool(groups & set(self.settings.ta_groups)) or self.auth.check_scopes({TA_SCOPE}, model)
        return Who(student_id, TA if is_ta else STUDENT, COURSE, f"hub:{student_id}")

    # -- the OAuth sign-in ----------------------------------------------------------------------
    def start(self, next_path):
        """(the Hub's authorization URL to send the browser to, the state to keep in its cookie)."""
        verifier, challenge, method = self.auth.generate_pkce_code_challenge()
        state = self.auth.generate_state(next_path, code_verifier=verifier)
        query = urlencode({"state": state, "code_challenge": challenge, "code_challenge_method": method})
        return f"{self.auth.login_url}&{query}", state

    def finish(self, code, state):
        """(the user's token, the path to go on to) for the Hub's answer; the state is spent."""
        next_path, verifier = self.auth.get_next_url(state), self.auth.get_code_verifier(state)
        self.auth.clear_oauth_state(state)
        return self.auth.token_for_code(code, code_verifier=verifier, sync=True), next_path

    def known_state(self, state):
        """Whether `state` is a sign-in this service began within ten minutes (HubOAuth keeps them;
        each has a PKCE verifier, which start() always makes)."""
        return bool(state) and self.auth.get_code_verifier(state) is not None


def config_snippet(course_root, public_url, port=8765, name="autograder", groups=(), ta_groups=(),
                   client_dir=None, python=None):
    """The lines of a jupyterhub_config.py that run this course's service under the Hub (what
    `autograder hub config` prints). `public_url`: the Hub's address as the users' servers reach it;
    `groups`: the Hub groups that may use the service (none: every user); `ta_groups`: whose
    members are TAs (a Hub role with TA_SCOPE); `client_dir`: a folder holding autograder_client.py,
    put on the servers' Python path so a notebook imports it."""
    def literal(value):  # (a Python literal: the Hub's config file is Python)
        return pformat(value, sort_dicts=False, width=100)

    access = f"access:services!service={name}"
    service = {"name": name, "url": f"http://127.0.0.1:{port}",
               "command": [python or sys.executable, "-m", "autograder.cli", "serve", "--hub",
                           "--course", str(Path(course_root).resolve())],
               "oauth_no_confirm": True, "oauth_client_allowed_scopes": [TA_SCOPE], "display": True}
    everyone = [*groups, *(g for g in ta_groups if g not in groups)]
    roles = [{"name": f"{name}-user", "scopes": [access], "groups": everyone} if groups else
             {"name": "user", "scopes": ["self", access]}]  # (the Hub's default role, given the service)
    if ta_groups:
        roles.append({"name": f"{name}-ta", "scopes": [access, TA_SCOPE], "groups": list(ta_groups)})
    environment = {"AUTOGRADER_URL": f"{public_url.rstrip('/')}/services/{name}"}
    if client_dir:
        environment["PYTHONPATH"] = str(Path(client_dir).resolve())
    lines = [
        f"# The course's grading service ({Path(course_root).resolve()}), run by the Hub: students and TAs sign in",
        "# through the Hub, and a notebook hands itself in with its server's own token.",
        f"c.JupyterHub.services.append({literal(service)})",
        f"c.JupyterHub.custom_scopes.update({literal({TA_SCOPE: {'description': TA_WORDS}})})",
        f"c.JupyterHub.load_roles.extend({literal(roles)})",
        "# a user's server may call the service with its own token (only for users the roles above let in)",
        f"c.Spawner.server_token_scopes = {literal(['users:activity!user', 'access:servers!server', access, TA_SCOPE])}",
        f"c.Spawner.environment.update({literal(environment)})",
    ]
    return "\n".join(lines) + "\n"


TA_WORDS = "A TA of the course's grading service: sees every student's work and regrades"
