"""The service behind the reverse proxy it ships for (Debian's nginx, deploy/nginx/), on 127.0.0.1.

nginx is started by the test with the repository's own files: autograder-http.conf in `http {}`
and site.conf's server block, changed only where a test must (a loopback port instead of 443
with TLS, a socket and include paths in the test's folder). The service listens on a unix
socket only nginx uses.
"""
import collections
import os
import re
import shutil
import socket
import subprocess
import threading
import time
from pathlib import Path

import pytest

from helpers import append_to_first_answer, example, make_gradebook, new_course, required_part
from service_helpers import free_port, issue_tokens, notebook_bytes, request, serve, submit, wait_graded

ASSIGNMENT = "causal_attention"
DEPLOY = Path(__file__).resolve().parent.parent / "deploy" / "nginx"
pytestmark = pytest.mark.usefixtures("sandbox_required")


def nginx_binary():
    found = shutil.which("nginx") or ("/usr/sbin/nginx" if Path("/usr/sbin/nginx").exists() else None)
    return required_part(found, "nginx is not installed (./setup.sh installs it, or apt-get install -y nginx)")


def nginx_config(folder, port, sock):
    """nginx.conf for the test: the shipped files, on 127.0.0.1:`port`, passing on to `sock`."""
    site = (DEPLOY / "site.conf").read_text()
    site = site.replace("/run/autograder/service.sock", str(sock))
    site = site.replace("/etc/nginx/autograder-proxy.conf", str(DEPLOY / "autograder-proxy.conf"))
    site = site.replace("listen 443 ssl;", f"listen 127.0.0.1:{port};")
    site = "\n".join(line for line in site.splitlines()
                     if not re.match(r"\s*(listen \[::\]:443|ssl_certificate)", line))
    assert f"listen 127.0.0.1:{port};" in site and "include " in site and str(sock) in site
    temp = "\n".join(f"    {kind}_temp_path {folder / kind};" for kind in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi"))
    user = "user root;\n" if os.geteuid() == 0 else ""  # the workers reach the test's private folders
    config = folder / "nginx.conf"
    # worker_connections and worker_rlimit_nofile as site.conf asks of /etc/nginx/nginx.conf
    config.write_text(f"""{user}worker_processes 1;
worker_rlimit_nofile 16384;
pid {folder / 'nginx.pid'};
error_log {folder / 'error.log'} error;
events {{ worker_connections 4096; }}
http {{
    access_log off;
{temp}
    include {DEPLOY / 'autograder-http.conf'};
{site}
}}
""")
    return config


@pytest.fixture(scope="module")
def proxied(tmp_path_factory):
    """The service on a unix socket behind nginx: (Served, nginx's folder)."""
    binary = nginx_binary()
    course = make_gradebook(new_course(tmp_path_factory.mktemp("proxied")))
    settings = course / "exercises" / ASSIGNMENT / "assignment.toml"
    settings.write_text(settings.read_text() + "\n[service]\nrequests_per_minute = 2000\n")
    folder = tmp_path_factory.mktemp("nginx")
    sock, port = folder / "service.sock", free_port()
    config = nginx_config(folder, port, sock)
    checked = subprocess.run([binary, "-t", "-c", str(config), "-p", str(folder)], capture_output=True, text=True)
    assert checked.returncode == 0, checked.stderr
    nginx = subprocess.Popen([binary, "-c", str(config), "-p", str(folder), "-g", "daemon off;"],
                             stdout=subprocess.DEVNULL, stderr=open(folder / "stderr.log", "w"))
    tokens = issue_tokens(course, ASSIGNMENT, ["ada", "ben", "cy", "dee"])
    try:
        service = serve(course, ASSIGNMENT, jobs=2, uds=sock, base=f"http://127.0.0.1:{port}",
                        extra=["--forwarded-allow-ips", "*"])
    except BaseException:
        nginx.terminate()
        raise
    service.tokens = tokens
    yield service, folder
    service.stop()
    nginx.terminate()
    nginx.wait(timeout=30)


def own_answers(n):
    """A notebook with answers of its own (graded afresh), all of them right."""
    return notebook_bytes(append_to_first_answer(example("ada"), f"# version {n}\n"))


def time_to_feedback(served, student, notebook):
    started = time.monotonic()
    status, answer = submit(served, student, notebook)
    assert status == 202, answer
    done = wait_graded(served, student, answer["id"], timeout=300)
    assert done["status"] == "graded", done
    return time.monotonic() - started


def listening_tcp_sockets(pid):
    """The TCP sockets process `pid` listens on (their inodes), from /proc."""
    listening = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        if os.path.exists(table):
            for line in Path(table).read_text().splitlines()[1:]:
                fields = line.split()
                if fields[3] == "0A":  # LISTEN
                    listening.add(fields[9])
    owned = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            target = os.readlink(fd)
        except OSError:
            continue
        if target.startswith("socket:["):
            owned.add(target[8:-1])
    return listening & owned


def test_a_student_hands_in_through_nginx_and_only_nginx_reaches_the_service(proxied):
    served, folder = proxied
    assert time_to_feedback(served, "ada", own_answers(0)) < 300
    assert listening_tcp_sockets(served.process.pid) == set()  # no port: the unix socket alone
    assert (folder / "service.sock").is_socket()
    # a client's own X-Forwarded-For is replaced by the address nginx saw: rotating it does not
    # escape the service's limit on wrong tokens per address (30 a minute)
    answers = [request(f"{served.base}/api/assignments/{ASSIGNMENT}/submissions", token=f"wrong{n}",
                       headers={"X-Forwarded-For": f"203.0.113.{n}"}) for n in range(40)]
    statuses = [status for status, _, _ in answers]
    assert statuses[:30] == [401] * 30 and 429 in statuses[30:], statuses
    refused = next(answer for answer in answers if answer[0] == 429)
    assert "retry-after" in refused[2] and isinstance(refused[1], dict)  # the service's answer, not nginx's


def test_nginx_drops_a_connection_that_never_finishes_its_headers(proxied):
    """client_header_timeout (10 s): the connection is closed, the service never sees it."""
    served, _ = proxied
    port = int(served.base.rsplit(":", 1)[1])
    started = time.monotonic()
    with socket.create_connection(("127.0.0.1", port), timeout=30) as slow:
        slow.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n")  # and never the empty line
        answer = b""
        while chunk := slow.recv(4096):
            answer += chunk
    waited = time.monotonic() - started
    assert 8 <= waited <= 20, waited
    assert b"healthz" not in answer  # never answered as a request


class SlowClients:
    """`count` connections that send part of their headers and never the rest, kept at `count`
    (each one nginx drops is opened again) until stopped: the slowloris attack, bounded in time."""

    def __init__(self, port, count, seconds):
        self.port, self.count, self.deadline = port, count, time.monotonic() + seconds
        self.open, self.opened, self.failed = [], 0, 0
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self):
        self.thread.start()
        return self

    def _run(self):
        while not self.stopping.is_set() and time.monotonic() < self.deadline:
            alive = []
            for connection in self.open:
                try:
                    connection.setblocking(False)
                    if connection.recv(1) == b"":  # closed by nginx
                        connection.close()
                        continue
                except BlockingIOError:
                    pass
                except OSError:
                    connection.close()
                    continue
                alive.append(connection)
            self.open = alive
            while len(self.open) < self.count and not self.stopping.is_set():
                try:
                    connection = socket.create_connection(("127.0.0.1", self.port), timeout=5)
                    connection.sendall(b"POST /api/assignments/causal_attention/submissions HTTP/1.1\r\nHost: x\r\n")
                except OSError:
                    self.failed += 1
                    break
                self.open.append(connection)
                self.opened += 1
            self.stopping.wait(0.5)

    def __exit__(self, *exc):
        self.stopping.set()
        self.thread.join(30)
        for connection in self.open:
            connection.close()


@pytest.mark.slow
def test_a_thousand_slow_clients_leave_feedback_within_twice_an_idle_services_time(proxied):
    """Issue 45: 1,000 connections that never finish their headers (kept at 1,000 for the whole
    test), and a student's notebook still gets its feedback within 2x of the idle service's
    time; no line of the service's log repeats more than a few times."""
    served, folder = proxied
    time_to_feedback(served, "ben", own_answers(1))  # warm: the workers have graded once
    idle = time_to_feedback(served, "cy", own_answers(2))
    port = int(served.base.rsplit(":", 1)[1])
    with SlowClients(port, 1000, seconds=240) as attack:
        deadline = time.monotonic() + 60
        while len(attack.open) < 1000 and time.monotonic() < deadline:
            time.sleep(0.2)
        assert len(attack.open) >= 1000, (len(attack.open), attack.failed)
        under_attack = time_to_feedback(served, "dee", own_answers(3))
        still_open = len(attack.open)
    print(f"\nidle {idle:.1f} s, with 1000 slow clients {under_attack:.1f} s ({under_attack / idle:.2f}x);"
          f" {attack.opened} slow connections opened in all, {still_open} open at the end")
    assert under_attack <= 2 * idle, (idle, under_attack)
    lines = [line for line in served.log.read_text().splitlines() if line.strip()]
    repeated = collections.Counter(lines).most_common(1)
    assert not repeated or repeated[0][1] <= 10, repeated
