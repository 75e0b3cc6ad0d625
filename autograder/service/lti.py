"""LTI 1.3: students and TAs open the service from their LMS (Canvas, Moodle), signed in by it.

The LMS (the *platform*) is registered in the course's `lti.toml`; this service (the *tool*)
has one RSA key pair of its own, made once and served as a JWKS (`ToolKey`). A launch takes
the OIDC third-party login of the LTI 1.3 core specification:

1. the platform sends the browser to `/lti/login` (`login`): the tool makes a one-time state
   and nonce and sends the browser back to the platform's authorization endpoint;
2. the platform posts a signed `id_token` to `/lti/launch` (`launch`): the tool checks every
   claim the specification requires (the platform's signature through its JWKS, refetched for
   a key it does not know yet, so keys may rotate; issuer, audience and authorized party,
   expiry and issue time, the nonce and state, once each; the deployment; the message type and
   LTI version) and maps the roles to a student or a TA. Only then is anyone signed in.

Every launch, accepted or refused, is recorded in the service's database with why (a TA reads
them there); a refused one signs nobody in and records nothing else. PyJWT (with cryptography)
does the JOSE work: signatures, the JWKS client, the standard claims.
"""
import hashlib
import hmac
import re
import secrets
import time
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import parse_qsl, urlencode, urlsplit

import jwt
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from autograder.course import write_atomically

CONFIG = "lti.toml"
KEY_FILE = "lti-key.pem"  # in the service's folder, readable by the service alone
STATE_SECONDS = 600  # a login not finished within this is refused (the student starts again from the LMS)
LEEWAY = 60  # seconds of clock difference allowed between the platform and this machine
# A token whose key id is not in the platform's JWKS makes the tool fetch it again (the platform
# rotated its keys), at most once in this many seconds: forged key ids cannot make it a flood.
KEY_REFRESH_SECONDS = 5
VERSION = "1.3.0"
CLAIM = "https://purl.imsglobal.org/spec/lti/claim/"
RESOURCE_LINK = "LtiResourceLinkRequest"
DEEP_LINK = "LtiDeepLinkingRequest"  # an instructor picks what a new link opens
DL_CLAIM = "https://purl.imsglobal.org/spec/lti-dl/claim/"
SCORE_SCOPE = "https://purl.imsglobal.org/spec/lti-ags/scope/score"
COLUMNS_SCOPE = "https://purl.imsglobal.org/spec/lti-ags/scope/lineitem.readonly"
AGS_CLAIM = "https://purl.imsglobal.org/spec/lti-ags/claim/endpoint"
NRPS_CLAIM = "https://purl.imsglobal.org/spec/lti-nrps/claim/namesroleservice"
ROSTER_SCOPE = "https://purl.imsglobal.org/spec/lti-nrps/scope/contextmembership.readonly"
ROLES = "http://purl.imsglobal.org/vocab/lis/v2/"
# Instructors and TAs of the LMS course; not its designers nor the institution's administrators,
# who may hold those roles in every course of an account-wide installation.
TA_ROLES = ("membership#Instructor", "membership#TeachingAssistant", "membership/Instructor#TeachingAssistant")
STUDENT_ROLES = ("membership#Learner", "membership/Learner#Learner", "institution/person#Student")
SAFE_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._@+-]{0,127}")


class LtiRefused(Exception):
    """A login or launch that must not sign anyone in: `student` is what the person reads (a
    sentence), `why` what the TA reads in the record."""

    def __init__(self, why, student=None):
        super().__init__(why)
        self.why = why
        self.student = student or ("This launch from your course could not be checked, so you are not signed in."
                                   " Open the assignment from your course again; if it happens again, tell your TA.")


@dataclass
class Platform:
    """One LMS registration: who it is (issuer, client id), its deployments, and its endpoints."""

    issuer: str
    client_id: str
    login_url: str  # the platform's OIDC authorization endpoint (Canvas: .../api/lti/authorize_redirect)
    keys_url: str  # the platform's JWKS
    deployment_ids: tuple = ()
    token_url: str = ""  # the platform's OAuth 2 token endpoint, for sending scores (passback.py)
    contexts: tuple = ()  # the LMS courses (context ids) it may launch from; () for any (a course-level tool)
    jwks: object = field(default=None, repr=False, compare=False)

    def signing_key(self, token):
        """The platform's public key for `token`'s kid; a kid not seen yet refetches the JWKS (rotation)."""
        if self.jwks is None:
            self.jwks = jwt.PyJWKClient(self.keys_url, cache_keys=True, lifespan=3600, timeout=10,
                                         cooldown_duration=KEY_REFRESH_SECONDS)
        return self.jwks.get_signing_key_from_jwt(token).key


def read_platforms(course_root):
    """[Platform] from the course's lti.toml ([] without one); a broken file is a CourseError-like
    ValueError naming the problem."""
    path = Path(course_root) / CONFIG
    if not path.is_file():
        return []
    try:
        data = tomllib.loads(path.read_text())
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as error:
        raise ValueError(f"{path} cannot be read: {error}") from None
    found = []
    for index, entry in enumerate(data.get("platform", [])):
        missing = [key for key in ("issuer", "client_id", "login_url", "keys_url", "deployment_ids")
                   if not entry.get(key)]
        if missing:
            raise ValueError(f"{path}: platform {index + 1} lacks {', '.join(missing)}")
        found.append(Platform(str(entry["issuer"]), str(entry["client_id"]), str(entry["login_url"]),
                              str(entry["keys_url"]), tuple(str(d) for d in entry["deployment_ids"]),
                              str(entry.get("token_url", "")), tuple(str(c) for c in entry.get("contexts", []))))
    return found


class ToolKey:
    """The tool's RSA key pair: made at first use, kept in the service's folder (mode 600)."""

    def __init__(self, folder):
        path = Path(folder) / KEY_FILE
        if not path.exists():
            private = rsa.generate_private_key(public_exponent=65537, key_size=2048)
            pem = private.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                        serialization.NoEncryption())
            write_atomically(path, pem.decode(), mode=0o600)
        self.private = serialization.load_pem_private_key(path.read_bytes(), password=None)
        public = self.private.public_key().public_bytes(serialization.Encoding.DER,
                                                        serialization.PublicFormat.SubjectPublicKeyInfo)
        self.kid = hashlib.sha256(public).hexdigest()[:16]

    def jwks(self):
        key = jwt.algorithms.RSAAlgorithm.to_jwk(self.private.public_key(), as_dict=True)
        return {"keys": [{**key, "kid": self.kid, "alg": "RS256", "use": "sig"}]}


@dataclass
class Launch:
    """An accepted launch: who is signed in, as what, and where they go."""

    student_id: str
    role: str  # "student" or "ta"
    assignment: str  # an assignment's name, or "" for every assignment the service grades
    issuer: str
    subject: str
    # A deep-linking request (an instructor adding a link): where the pick goes back to, with what
    # the platform asked to get back ({"return_url", "data", "client_id", "deployment"}); else None.
    deep_link: dict = None
    client_id: str = ""
    members_url: str = ""  # the LMS course's Names and Role Provisioning service, when it offers it
    context: str = ""  # the LMS course's id


class Lti:
    """The tool's side of LTI 1.3 for one service: its platforms, its key, its one-time states."""

    def __init__(self, course_root, folder, store, assignments):
        self.platforms = read_platforms(course_root)
        self.key = ToolKey(folder) if self.platforms else None
        self.store, self.assignments = store, set(assignments)

    def platform_for(self, issuer, client_id=""):
        """The one registered platform of `issuer` (and `client_id`, when given), else LtiRefused."""
        found = [p for p in self.platforms if p.issuer == issuer and (not client_id or p.client_id == client_id)]
        if len(found) != 1:
            raise LtiRefused(f"no single registered platform for issuer {issuer!r} and client id {client_id!r}"
                             f" ({len(found)} in {CONFIG})")
        return found[0]

    def login(self, params, launch_path="/lti/launch"):
        """Step 1: (the URL to send the browser to, the platform's authorization endpoint; the state,
        which the browser keeps in a cookie: the launch must come back from this same browser)."""
        issuer, hint, target = params.get("iss", ""), params.get("login_hint", ""), params.get("target_link_uri", "")
        if not issuer or not hint or not target:
            raise LtiRefused("a login without iss, login_hint or target_link_uri")
        platform = self.platform_for(issuer, params.get("client_id", ""))
        deployment = params.get("lti_deployment_id")
        if deployment and deployment not in platform.deployment_ids:
            raise LtiRefused(f"unknown deployment {deployment!r} of {issuer}")
        try:
            path = urlsplit(target).path
        except ValueError:
            path = ""
        if path != launch_path:
            raise LtiRefused(f"a login for another tool's address ({target[:200]})")
        state, nonce = secrets.token_urlsafe(24), secrets.token_urlsafe(24)
        self.store.lti_new_state(state, nonce, platform.issuer, platform.client_id, time.time())
        query = {"scope": "openid", "response_type": "id_token", "response_mode": "form_post", "prompt": "none",
                 "client_id": platform.client_id, "redirect_uri": target, "login_hint": hint, "state": state,
                 "nonce": nonce}
        if params.get("lti_message_hint"):
            query["lti_message_hint"] = params["lti_message_hint"]
        return f"{platform.login_url}{'&' if '?' in platform.login_url else '?'}{urlencode(query)}", state

    def launch(self, form, kept_state=""):
        """Step 2: a Launch for a valid id_token and state, else LtiRefused. The state (and with
        it the nonce) is spent whether or not the rest holds: a token is never tried twice.
        `kept_state`: the state the browser kept from its login (its cookie): a launch another
        browser began (a page of another site posting someone's own launch, to sign the student
        in as them) is refused."""
        token, state = form.get("id_token", ""), form.get("state", "")
        if not token or not state:
            raise LtiRefused("a launch without id_token or state")
        row = self.store.lti_take_state(state, time.time() - STATE_SECONDS)
        if row is None:
            raise LtiRefused("a state that is unknown, already used or older than ten minutes (a replay, or a"
                             " login left open)",
                             student="This link from your course has expired or was already used. Open the"
                                     " assignment from your course again.")
        if not hmac.compare_digest(state.encode(), str(kept_state).encode()):
            raise LtiRefused("a launch whose login did not start in this browser (no state cookie, or another)",
                             student="You are not signed in: this sign-in did not start in this browser. Open the"
                                     " assignment from your course again (if your browser blocks this site's"
                                     " cookies, allow them, or open the link in a new window).")
        platform = self.platform_for(row["issuer"], row["client_id"])
        try:
            claims = verified_claims(platform, token, row["nonce"])
            return self._accepted(platform, claims)
        except LtiRefused:
            raise
        except Exception as error:  # noqa: BLE001 (a claim of an unexpected shape: refused, not a 500)
            raise LtiRefused(f"a launch the tool could not read: {type(error).__name__}: {error}") from None

    def _accepted(self, platform, claims):
        """The Launch of verified `claims`: who, as what, where to; its column recorded for passback."""
        deployment = claims.get(CLAIM + "deployment_id")
        if deployment not in platform.deployment_ids:
            raise LtiRefused(f"unknown deployment {deployment!r} of {platform.issuer}")
        kind = claims.get(CLAIM + "message_type")
        if kind not in (RESOURCE_LINK, DEEP_LINK):
            raise LtiRefused(f"message type {kind!r}: only resource link and deep linking launches")
        if claims.get(CLAIM + "version") != VERSION:
            raise LtiRefused(f"LTI version {claims.get(CLAIM + 'version')!r}, not {VERSION}")
        context = claims.get(CLAIM + "context")
        context = str(context.get("id", "")) if isinstance(context, dict) else ""
        if platform.contexts and context not in platform.contexts:
            raise LtiRefused(f"a launch from the LMS course {context!r}, which lti.toml does not list for this"
                             " platform", student="This tool is not set up for this course of your LMS: tell your TA.")
        role, subject = role_of(claims.get(CLAIM + "roles", [])), str(claims["sub"])
        names = claims.get(NRPS_CLAIM)
        members_url = names.get("context_memberships_url") if isinstance(names, dict) else ""
        more = {"client_id": platform.client_id, "members_url": members_url if isinstance(members_url, str) else "",
                "context": context}
        student_id = self.store.lti_person(platform.issuer, subject, student_id_of(claims))
        if kind == DEEP_LINK:
            request = deep_link_of(claims, role, platform, deployment)
            return Launch(student_id, role, "", platform.issuer, subject, request, **more)
        assignment = assignment_of(claims)
        if assignment and assignment not in self.assignments:
            raise LtiRefused(f"the link names the assignment {assignment!r}, which this service does not grade",
                             student="This link from your course names an assignment this service does not grade:"
                                     " tell your TA.")
        if assignment:
            self._record_column(platform, claims.get(AGS_CLAIM), subject, assignment, student_id)
        return Launch(student_id, role, assignment, platform.issuer, subject, **more)

    def _record_column(self, platform, grades, subject, assignment, student_id):
        """Where the student's score goes: the column the link names, else (a link made again, which
        reuses its column: deep_link_response) the one this LMS course's columns hold for it."""
        if not isinstance(grades, dict) or SCORE_SCOPE not in (grades.get("scope") or []):
            return
        column = grades.get("lineitem") if isinstance(grades.get("lineitem"), str) else None
        if isinstance(grades.get("lineitems"), str):
            column = self.store.lti_column(grades["lineitems"], assignment, column)
        if column:
            self.store.lti_add_target(column, subject, platform.issuer, platform.client_id, assignment, student_id)


def verified_claims(platform, token, nonce):
    """The id_token's claims once its signature (RS256 alone, by the platform's key for its kid) and
    every standard claim hold, else LtiRefused."""
    try:
        key = platform.signing_key(token)
        claims = jwt.decode(token, key, algorithms=["RS256"], audience=platform.client_id,
                            issuer=platform.issuer, leeway=LEEWAY,
                            options={"require": ["exp", "iat", "iss", "aud", "sub", "nonce"]})
    except jwt.PyJWKClientError as error:
        raise LtiRefused(f"the platform's keys could not be had or do not sign this token ({error})") from None
    except jwt.InvalidTokenError as error:
        raise LtiRefused(f"the id_token is not valid: {type(error).__name__}: {error}") from None
    audiences = claims["aud"] if isinstance(claims["aud"], list) else [claims["aud"]]
    if (len(audiences) > 1 or "azp" in claims) and claims.get("azp") != platform.client_id:
        raise LtiRefused("an id_token whose authorized party (azp) is not this tool")
    if not secrets.compare_digest(str(claims["nonce"]).encode(), nonce.encode()):
        raise LtiRefused("the id_token's nonce is not the one this login made")
    if not isinstance(claims["sub"], str) or not claims["sub"].strip():
        raise LtiRefused("an id_token without a subject (sub)")
    return claims


def deep_link_of(claims, role, platform, deployment):
    """What a deep-linking request asks (see Launch.deep_link), or LtiRefused: only an instructor or
    TA adds links, and only links to something (an ltiResourceLink) can be sent back."""
    if role != "ta":
        raise LtiRefused("a deep linking request from someone who is not an instructor or TA",
                         student="Only an instructor or a TA can add this tool to the course.")
    settings = claims.get(DL_CLAIM + "deep_linking_settings")
    if not isinstance(settings, dict) or not isinstance(settings.get("deep_link_return_url"), str) or not \
            settings["deep_link_return_url"].startswith(("https://", "http://")):
        raise LtiRefused("a deep linking request without an http(s) deep_link_return_url")
    if "ltiResourceLink" not in (settings.get("accept_types") or []):
        raise LtiRefused(f"a deep linking request that accepts no ltiResourceLink ({settings.get('accept_types')})")
    grades = claims.get(AGS_CLAIM)
    lineitems = grades.get("lineitems") if isinstance(grades, dict) else None
    return {"return_url": settings["deep_link_return_url"], "data": settings.get("data"),
            "client_id": platform.client_id, "deployment": deployment,
            "lineitems": lineitems if isinstance(lineitems, str) else None}


def deep_link_response(key, pick, assignment, title, launch_url, points, new_column=True):
    """The signed LtiDeepLinkingResponse for the instructor's pick: one link to `assignment`, with its
    gradebook column (`lineItem`) out of `points`, identified by the assignment's name (`resourceId`);
    without `new_column` (the course has the assignment's column already) a link alone, so a link
    made again or copied never adds a second column."""
    now = int(time.time())
    item = {"type": "ltiResourceLink", "title": title, "url": f"{launch_url}?{urlencode({'assignment': assignment})}",
            "custom": {"assignment": assignment},
            "lineItem": {"scoreMaximum": points, "label": title, "resourceId": assignment, "tag": "autograder"}}
    if not new_column:
        del item["lineItem"]
    claims = {"iss": pick["client_id"], "aud": pick["issuer"], "iat": now, "exp": now + 600,
              "nonce": secrets.token_urlsafe(16), CLAIM + "deployment_id": pick["deployment"],
              CLAIM + "message_type": "LtiDeepLinkingResponse", CLAIM + "version": VERSION,
              DL_CLAIM + "content_items": [item]}
    if pick.get("data") is not None:
        claims[DL_CLAIM + "data"] = pick["data"]
    return jwt.encode(claims, key.private, algorithm="RS256", headers={"kid": key.kid})


def assignment_of(claims):
    """The assignment a link opens: its custom parameter `assignment` (Moodle's activity settings),
    else `?assignment=` of its signed target link (the URL a Canvas assignment gives); "" for all."""
    custom = claims.get(CLAIM + "custom")
    if isinstance(custom, dict) and custom.get("assignment"):
        return str(custom["assignment"])
    query = dict(parse_qsl(urlsplit(str(claims.get(CLAIM + "target_link_uri", ""))).query))
    return query.get("assignment", "")


def role_of(roles):
    """"ta" for an instructor, TA or administrator, "student" for a learner; else LtiRefused."""
    names = {str(role).removeprefix(ROLES) for role in roles} if isinstance(roles, list) else set()
    if names & set(TA_ROLES):
        return "ta"
    if names & set(STUDENT_ROLES):
        return "student"
    raise LtiRefused(f"roles {sorted(names)[:5]} are neither a learner's nor an instructor's",
                     student="Your role in this course does not open this tool: tell your TA.")


def student_id_of(claims):
    """The id results are kept under: the LMS's SIS id for the person where it sends one (what a
    roster and `autograder export` use), else its own stable id for them (`sub`)."""
    lis = claims.get("https://purl.imsglobal.org/spec/lti/claim/lis")
    person = lis.get("person_sourcedid") if isinstance(lis, dict) else None
    for candidate in (person, claims.get("sub")):
        if isinstance(candidate, str) and SAFE_ID.fullmatch(candidate):
            return candidate
    return "lti-" + hashlib.sha256(str(claims.get("sub")).encode()).hexdigest()[:16]


SCOPES = ("https://purl.imsglobal.org/spec/lti-ags/scope/lineitem",
          "https://purl.imsglobal.org/spec/lti-ags/scope/result.readonly",
          "https://purl.imsglobal.org/spec/lti-ags/scope/score",
          "https://purl.imsglobal.org/spec/lti-nrps/scope/contextmembership.readonly")


def tool_urls(base):
    """The tool's three addresses an LMS is given, under the service's public address `base`."""
    base = base.rstrip("/")
    return {"login": f"{base}/lti/login", "launch": f"{base}/lti/launch", "keys": f"{base}/.well-known/jwks.json"}


def canvas_developer_key(base, key, title):
    """The JSON of a Canvas LTI developer key (Admin > Developer Keys > + LTI Key > Paste JSON)."""
    urls = tool_urls(base)
    return {"title": title, "description": f"{title}: hand in notebooks, graded in a sandbox",
            "oidc_initiation_url": urls["login"], "target_link_uri": urls["launch"],
            "public_jwk_url": urls["keys"], "public_jwk": key.jwks()["keys"][0], "scopes": list(SCOPES),
            "extensions": [{"platform": "canvas.instructure.com", "privacy_level": "public",
                            "settings": {"placements": [{"placement": "link_selection", "target_link_uri":
                                                         urls["launch"], "message_type": RESOURCE_LINK}]}}]}


def moodle_settings(base):
    """The fields of Moodle's "Configure a tool manually" (Site administration > Plugins > External tool)."""
    urls = tool_urls(base)
    return [("Tool URL", urls["launch"]), ("LTI version", "LTI 1.3"), ("Public key type", "Keyset URL"),
            ("Public keyset", urls["keys"]), ("Initiate login URL", urls["login"]),
            ("Redirection URI(s)", urls["launch"]),
            ("Custom parameters", "assignment=NAME (one per activity: the assignment it opens)"),
            ("Share launcher's name / email with tool", "Always (so the TA page shows who is who)")]


def add_platform(course_root, platform):
    """Append `platform` to the course's lti.toml (made if missing) and read the file back whole,
    so a broken entry is found now, not at the first launch."""
    path = Path(course_root) / CONFIG
    existing = read_platforms(course_root)
    if any(p.issuer == platform.issuer and p.client_id == platform.client_id for p in existing):
        raise ValueError(f"{path} already has the platform {platform.issuer} with client id {platform.client_id}")
    def quoted(text):
        return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'
    entry = (f"\n[[platform]]\nissuer = {quoted(platform.issuer)}\nclient_id = {quoted(platform.client_id)}\n"
             f"deployment_ids = [{', '.join(quoted(d) for d in platform.deployment_ids)}]\n"
             f"login_url = {quoted(platform.login_url)}\nkeys_url = {quoted(platform.keys_url)}\n"
             + (f"token_url = {quoted(platform.token_url)}\n" if platform.token_url else ""))
    before = path.read_text() if path.exists() else ""
    write_atomically(path, before + entry)
    try:
        read_platforms(course_root)
    except ValueError:
        write_atomically(path, before)
        raise
    return path
