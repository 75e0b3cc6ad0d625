"""What keeps the service up and its students apart: upload size, request rates, CSRF, tokens.

* `BodyLimit` (ASGI middleware) refuses an upload over the limit before reading it whole:
  at once from its Content-Length, or, for a body sent without one, the moment the bytes
  read pass the limit.
* `RateLimit` counts each student's requests (or, without a valid token, the address's) in a
  sliding minute.
* `csrf_token` ties the upload form to the student's session: a cross-site page cannot read
  it, and the cookie itself is SameSite=Strict.
"""
import hashlib
import hmac
import json
import threading
import time
from collections import defaultdict, deque


def route_path(scope):
    """A request's path below the prefix the service is served under (Prefix)."""
    base = scope.get("root_path", "")
    return scope["path"][len(base):] if base and scope["path"].startswith(base) else scope["path"]


class Prefix:
    """Serve the app under the path `base` (a Hub service's /services/<name>, or a reverse proxy's
    folder): a request below it is routed by the rest of its path (ASGI's root_path, which also
    starts every URL the app builds); anything else is not this service's and is not found."""

    def __init__(self, app, base):
        self.app, self.base = app, base

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http" or not self.base:
            return await self.app(scope, receive, send)
        path = scope["path"]
        if path == self.base:  # the bare prefix: its start page
            return await _answer(send, 302, b"", [(b"location", (self.base + "/").encode())])
        if not path.startswith(self.base + "/"):
            return await _answer(send, 404, b'{"error": "Not found."}', [(b"content-type", b"application/json")])
        await self.app({**scope, "root_path": self.base}, receive, send)


async def _answer(send, status, body, headers):
    await send({"type": "http.response.start", "status": status,
                "headers": [*headers, (b"content-length", str(len(body)).encode())]})
    await send({"type": "http.response.body", "body": body})


class TooLarge(Exception):
    """The request's body is over the limit."""


class BodyLimit:
    """Refuse POST bodies over `limit_of(scope)` bytes (None: no limit for that path). A limit is the
    assignment's whole megabytes plus a little for the form around the notebook."""

    def __init__(self, app, limit_of):
        self.app, self.limit_of = app, limit_of

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http" or scope["method"] != "POST":
            return await self.app(scope, receive, send)
        limit = self.limit_of(scope)
        if limit is None:
            return await self.app(scope, receive, send)
        headers = dict(scope.get("headers") or [])
        try:
            length = int(headers.get(b"content-length", b"-1"))
        except ValueError:
            length = -1
        if length > limit:
            return await _too_large(send, limit)
        seen, started = 0, False

        async def limited():
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > limit:
                    raise TooLarge()
            return message

        async def sending(message):
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, limited, sending)
        except TooLarge:
            if not started:
                await _too_large(send, limit)


async def _too_large(send, limit):
    body = json.dumps({"error": f"The upload is over the {limit // 2**20} MB this assignment takes. Clear your"
                                " notebook's outputs (Restart & Clear Output), save it and submit again. It did not"
                                " cost you an attempt."}).encode()
    await send({"type": "http.response.start", "status": 413,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
                            (b"connection", b"close")]})
    await send({"type": "http.response.body", "body": body})


class RateLimit:
    """At most `per_minute` requests per key in any sliding minute. Its memory is bounded: keys
    idle for a minute are dropped (every SWEEP_EVERY requests), and past MAX_KEYS keys active
    at once, new keys share one count (a flood of addresses slows only itself and other newcomers,
    never the students already counted)."""

    MAX_KEYS = 20_000
    SWEEP_EVERY = 1_000
    SHARED = "(too many at once)"

    def __init__(self):
        self.seen = defaultdict(deque)
        self.lock = threading.Lock()
        self.calls = 0

    def _sweep(self, now):
        for key in [key for key, seen in self.seen.items() if not seen or seen[-1] <= now - 60]:
            del self.seen[key]

    def allow(self, key, per_minute, now=None):
        """(allowed, seconds to wait before the next request is)."""
        now = time.monotonic() if now is None else now
        with self.lock:
            self.calls += 1
            if self.calls % self.SWEEP_EVERY == 0 or (key not in self.seen and len(self.seen) >= self.MAX_KEYS):
                self._sweep(now)
            if key not in self.seen and len(self.seen) >= self.MAX_KEYS:
                key = self.SHARED
            seen = self.seen[key]
            while seen and seen[0] <= now - 60:
                seen.popleft()
            if len(seen) >= per_minute:
                return False, max(1, int(60 - (now - seen[0])) + 1)
            seen.append(now)
            return True, 0


def csrf_token(secret, token_id):
    return hmac.new(secret, f"csrf:{token_id}".encode(), hashlib.sha256).hexdigest()[:40]


def csrf_ok(secret, token_id, given):
    return isinstance(given, str) and hmac.compare_digest(csrf_token(secret, token_id), given)
