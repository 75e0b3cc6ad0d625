"""A real `autograder serve` on 127.0.0.1 for the service's tests and benchmarks, and an HTTP client."""
import csv
import json
import os
import secrets
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from helpers import cli


def free_port():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@dataclass
class Served:
    course: Path
    base: str
    tokens: dict  # student -> token
    process: subprocess.Popen
    log: Path

    def stop(self, kill=False):
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL if kill else signal.SIGINT)
            try:
                self.process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


def issue_tokens(course, assignment, students, tas=("tim",)):
    roster = course / "roster-for-tokens.csv"
    roster.write_text("student_id\n" + "".join(f"{s}\n" for s in students))
    out = course / "tokens.csv"
    done = cli("tokens", assignment, "--course", course, "--roster", roster, *(["--ta", *tas] if tas else []),
               "--out", out, "--url", "http://127.0.0.1")
    assert done.returncode == 0, done.stdout + done.stderr
    with open(out, newline="") as handle:
        return {row["student_id"]: row["token"] for row in csv.DictReader(handle)}


def serve(course, assignment, jobs=2, port=None, extra=(), timeout=120, uds=None, base=None):
    """Start `autograder serve` for `assignment` and wait until it answers (bounded in time).
    `uds`: on that unix socket instead of a port, reached at `base` (a proxy in front of it)."""
    port = port or free_port()
    log = course / f"serve-{port}.log"
    where = ["--uds", str(uds)] if uds else ["--port", str(port)]
    process = subprocess.Popen([sys.executable, "-m", "autograder.cli", "serve", *([assignment] if assignment else []),
                                "--course", str(course),
                                *where, "--jobs", str(jobs), *map(str, extra)],
                               stdout=open(log, "w"), stderr=subprocess.STDOUT)
    base = base or f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + timeout
    while True:
        try:
            urllib.request.urlopen(f"{base}/healthz", timeout=2)
            return Served(course, base, {}, process, log)
        except OSError:
            if process.poll() is not None or time.monotonic() > deadline:
                process.kill()
                raise AssertionError(f"the service did not start:\n{log.read_text()[-3000:]}")
            time.sleep(0.2)


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args, **kwargs):
        return None  # a redirect is an answer of its own (its Location, its cookie)


OPENER = urllib.request.build_opener(_NoRedirect)


def request(url, token=None, data=None, content_type=None, headers=None, cookie=None, timeout=60):
    """(status, parsed JSON or text, headers with lower-case names) of one HTTP request; never raises for
    an HTTP error, and never follows a redirect."""
    req = urllib.request.Request(url, data=data, method="POST" if data is not None else "GET")
    if token:
        req.add_header("Authorization", f"Bearer {token}")
    if content_type:
        req.add_header("Content-Type", content_type)
    if cookie:
        req.add_header("Cookie", cookie)
    for key, value in (headers or {}).items():
        req.add_header(key, value)
    try:
        with OPENER.open(req, timeout=timeout) as response:
            status, body, found = response.status, response.read(), response.headers
    except urllib.error.HTTPError as error:
        status, body, found = error.code, error.read(), error.headers
    cookies = found.get_all("Set-Cookie") or []
    found = {key.lower(): value for key, value in found.items()}
    if cookies:  # every cookie the answer sets, one a line, in its order (a dict would keep the last alone)
        found["set-cookie"] = "\n".join(cookies)
    text = body.decode("utf-8", "replace")
    try:
        return status, json.loads(text), found
    except ValueError:
        return status, text, found


def multipart(fields):
    """(body, content type) of a multipart/form-data form: {name: bytes or (filename, bytes) or str}."""
    boundary = secrets.token_hex(12)
    parts = []
    for name, value in fields.items():
        if isinstance(value, tuple):
            filename, data = value
            head = f'Content-Disposition: form-data; name="{name}"; filename="{filename}"\r\n' \
                   "Content-Type: application/octet-stream\r\n"
        else:
            head, data = f'Content-Disposition: form-data; name="{name}"\r\n', value
        data = data.encode() if isinstance(data, str) else data
        parts.append(f"--{boundary}\r\n{head}\r\n".encode() + data + b"\r\n")
    return b"".join(parts) + f"--{boundary}--\r\n".encode(), f"multipart/form-data; boundary={boundary}"


def submit(served, student, notebook, assignment="causal_attention", filename=None):
    """POST a notebook (bytes, or a path) through the API as `student`: (status, body)."""
    data = Path(notebook).read_bytes() if isinstance(notebook, (str, Path)) else notebook
    body, kind = multipart({"notebook": (filename or f"{assignment}.ipynb", data)})
    status, answer, _ = request(f"{served.base}/api/assignments/{assignment}/submissions", served.tokens[student],
                                body, kind)
    return status, answer


def wait_graded(served, student, submission_id, timeout=120):
    """The submission's answer once it is graded (or failed), polled every 50 ms at first, then
    less often (a quarter of the time waited so far, at most 1 s: the service's rate limit counts
    a student's requests), bounded in time."""
    started = time.monotonic()
    deadline = started + timeout
    while True:
        status, answer, _ = request(f"{served.base}/api/submissions/{submission_id}", served.tokens[student])
        assert status == 200, (status, answer)
        if answer["status"] in ("graded", "error"):
            return answer
        assert time.monotonic() < deadline, f"{submission_id} was not graded in {timeout} s: {answer}"
        time.sleep(min(1.0, max(0.05, (time.monotonic() - started) / 4)))


def notebook_bytes(notebook):
    import nbformat

    return nbformat.writes(notebook).encode()


def environ_without(*names):
    return {k: v for k, v in os.environ.items() if k not in names}
