"""The service as a JupyterHub service (service/hub.py), with real parts on 127.0.0.1: a real
JupyterHub and its proxy (configurable-http-proxy, from npm), the dummy authenticator and the
local process spawner, configured by the lines `autograder hub config` prints.

A student signs in through the Hub in headless Chromium; her own server hands in the release
notebook with the documented call (code run by a kernel of her server, which holds her Hub
token: she never sees one); the page shows the feedback the call printed; a TA sees the TA page;
a user the Hub gives no access to the service is refused, in the browser and on the API."""
import asyncio
import json
import shutil
import subprocess
import sys
import time
import uuid
from urllib.parse import urlsplit

import pytest

from helpers import ASSIGNMENT, cli, example, new_course, required_part
from service_helpers import free_port, notebook_bytes, request

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("sandbox_required")]

ADMIN = "test-admin-token-" + uuid.uuid4().hex  # the test's own Hub service, for the Hub's REST API
PASSWORD = "a-password-for-the-test"


def proxy_binary():
    return required_part(shutil.which("configurable-http-proxy"), "configurable-http-proxy is not installed"
                         " (./setup.sh installs it: npm install -g configurable-http-proxy)")


def hub_config(folder, course, ports):
    """jupyterhub_config.py: the test's Hub (ports, users, spawner) and then, as given, the lines
    `autograder hub config` printed for the course."""
    made = cli("hub", "config", "--course", course, "--url", f"http://127.0.0.1:{ports['public']}",
               "--port", ports["service"], "--group", "students", "--ta-group", "graders",
               "--client-dir", folder / "client")
    assert made.returncode == 0, made.stdout + made.stderr
    lines = [line for line in made.stdout.splitlines() if not line.startswith("# wrote")]
    assert (folder / "client" / "autograder_client.py").is_file()
    return "\n".join([
        "c = get_config()  # noqa",
        f"c.JupyterHub.bind_url = 'http://127.0.0.1:{ports['public']}'",
        f"c.JupyterHub.hub_bind_url = 'http://127.0.0.1:{ports['hub']}'",
        f"c.ConfigurableHTTPProxy.api_url = 'http://127.0.0.1:{ports['proxy_api']}'",
        f"c.ConfigurableHTTPProxy.command = [{proxy_binary()!r}]",
        f"c.JupyterHub.db_url = 'sqlite:///{folder}/jupyterhub.sqlite'",
        f"c.JupyterHub.cookie_secret_file = '{folder}/cookie_secret'",
        "c.JupyterHub.authenticator_class = 'dummy'",
        f"c.DummyAuthenticator.password = {PASSWORD!r}",
        "c.Authenticator.allowed_users = {'ada', 'tim', 'eve'}",
        "c.JupyterHub.load_groups = {'students': {'users': ['ada']}, 'graders': {'users': ['tim']}}",
        "c.JupyterHub.spawner_class = 'simple'",
        f"c.SimpleLocalProcessSpawner.home_dir_template = '{folder}/home/{{username}}'",
        f"c.Spawner.cmd = [{sys.executable!r}, '-m', 'jupyterhub.singleuser']",
        "c.Spawner.args = ['--ServerApp.allow_root=True']  # (CI runs as root)",
        "c.Spawner.start_timeout = c.Spawner.http_timeout = 90",
        f"c.JupyterHub.services = [{{'name': 'test-admin', 'api_token': {ADMIN!r}}}]",
        "c.JupyterHub.load_roles = [{'name': 'test-admin', 'services': ['test-admin'],"
        " 'scopes': ['admin:users', 'admin:servers', 'tokens', 'access:servers']}]",
        *lines, ""])


def wait_for(url, timeout, process, log, status=200):
    deadline = time.monotonic() + timeout
    while True:
        try:
            got, body, _ = request(url, timeout=5)
            if got == status:
                return body
        except OSError:
            pass
        if process.poll() is not None or time.monotonic() > deadline:
            raise AssertionError(f"{url} did not answer {status} in {timeout} s:\n{log.read_text()[-4000:]}")
        time.sleep(0.3)


@pytest.fixture(scope="module")
def hub(tmp_path_factory):
    folder = tmp_path_factory.mktemp("hub")
    course = new_course(folder)
    assert cli("release", ASSIGNMENT, "--course", course).returncode == 0
    ports = {name: free_port() for name in ("public", "hub", "proxy_api", "service")}
    (folder / "jupyterhub_config.py").write_text(hub_config(folder, course, ports))
    (folder / "home" / "ada").mkdir(parents=True)
    (folder / "home" / "ada" / f"{ASSIGNMENT}.ipynb").write_bytes(notebook_bytes(example("ada")))
    log = folder / "hub.log"
    process = subprocess.Popen([sys.executable, "-m", "jupyterhub", "-f", str(folder / "jupyterhub_config.py")],
                               cwd=folder, stdout=open(log, "w"), stderr=subprocess.STDOUT)
    public = f"http://127.0.0.1:{ports['public']}"
    try:
        wait_for(f"{public}/hub/health", 60, process, log)
        wait_for(f"{public}/services/autograder/healthz", 120, process, log)
        yield {"url": public, "folder": folder, "course": course, "log": log}
    finally:
        process.terminate()  # the Hub stops its proxy and its managed service with it
        try:
            process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            process.kill()
        subprocess.run(["pkill", "-f", str(folder)], check=False)  # a server the Hub left behind


def admin(hub, path, body=None):
    """The Hub's REST API as the test's admin service: a GET, or with `body` a POST."""
    status, answer, _ = request(f"{hub['url']}/hub/api{path}", data=None if body is None else json.dumps(body).encode(),
                                headers={"Authorization": f"token {ADMIN}", "Content-Type": "application/json"})
    return status, answer


def start_server(hub, user):
    """`user`'s own server, started by the Hub's spawner; a token for the test to reach it."""
    status, answer = admin(hub, f"/users/{user}/server", {})
    assert status in (201, 202), (status, answer)
    deadline = time.monotonic() + 120
    while True:
        status, model = admin(hub, f"/users/{user}")
        if model.get("servers", {}).get("", {}).get("ready"):
            break
        assert time.monotonic() < deadline, f"{user}'s server did not start:\n{hub['log'].read_text()[-4000:]}"
        time.sleep(0.5)
    status, answer = admin(hub, f"/users/{user}/tokens", {"scopes": [f"access:servers!user={user}"],
                                                                  "note": "the test reaching the server"})
    assert status == 201, (status, answer)
    return answer["token"]


def run_in_kernel(hub, user, token, code, timeout=300):
    """Run `code` in a new kernel of `user`'s server, as a notebook cell does: what it printed."""
    from tornado.httpclient import HTTPRequest
    from tornado.websocket import websocket_connect

    base = f"{hub['url']}/user/{user}"
    status, kernel, _ = request(f"{base}/api/kernels", data=b"{}", headers={"Authorization": f"token {token}",
                                                                            "Content-Type": "application/json"})
    assert status == 201, (status, kernel)
    ws_url = "ws" + f"{base}/api/kernels/{kernel['id']}/channels".removeprefix("http")
    msg_id = uuid.uuid4().hex

    async def execute():
        socket = await websocket_connect(HTTPRequest(ws_url, headers={"Authorization": f"token {token}"}))
        socket.write_message(json.dumps({
            "header": {"msg_id": msg_id, "username": user, "session": uuid.uuid4().hex,
                       "msg_type": "execute_request", "version": "5.3"},
            "parent_header": {}, "metadata": {}, "channel": "shell", "buffers": [],
            "content": {"code": code, "silent": False, "store_history": False, "user_expressions": {},
                        "allow_stdin": False, "stop_on_error": True}}))
        printed, deadline = [], time.monotonic() + timeout
        while time.monotonic() < deadline:
            message = await asyncio.wait_for(socket.read_message(), timeout)
            message = json.loads(message)
            if message.get("parent_header", {}).get("msg_id") != msg_id:
                continue
            kind = message["header"]["msg_type"]
            if kind == "stream":
                printed.append(message["content"]["text"])
            elif kind == "error":
                printed.append("\n".join(message["content"]["traceback"]))
            elif kind == "execute_reply":
                socket.close()
                return "".join(printed)
        raise AssertionError(f"the cell did not finish in {timeout} s: {''.join(printed)}")

    return asyncio.run(execute())


def sign_in(browser, hub, user):
    """Open the service's page and sign in at the Hub's login form as `user`."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    browser.delete_all_cookies()
    browser.get(f"{hub['url']}/services/autograder/")
    WebDriverWait(browser, 30).until(lambda b: b.find_elements(By.ID, "username_input"))
    browser.find_element(By.ID, "username_input").send_keys(user)
    browser.find_element(By.ID, "password_input").send_keys(PASSWORD)
    browser.find_element(By.ID, "login_submit").click()
    def settled(b):
        path = urlsplit(b.current_url).path
        return (path.startswith("/services/autograder/") and not path.endswith(("/hub-login", "/oauth_callback"))
                and b.execute_script("return document.readyState") == "complete" and b.find_elements(By.TAG_NAME, "h1"))

    try:
        WebDriverWait(browser, 30).until(settled)
    except Exception:  # noqa: BLE001 (said with where the browser is)
        raise AssertionError(f"{user} did not reach the service: {browser.current_url}\n{browser.page_source[:2000]}")
    return urlsplit(browser.current_url).path


def test_a_student_hands_in_from_her_server_and_reads_the_same_feedback_on_the_page(hub):
    from browser import start_browser
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    token = start_server(hub, "ada")
    printed = run_in_kernel(hub, "ada", token, (
        "import os\n"
        "from autograder_client import hand_in_here\n"
        f"answer = hand_in_here({ASSIGNMENT!r}, {ASSIGNMENT + '.ipynb'!r})\n"
        "print('ID', answer['id'], 'SCORE', answer['score'], 'OF', answer['max_score'])\n"
        "print('TOKEN GIVEN', bool(os.environ.get('AUTOGRADER_TOKEN')))\n"))
    assert "TOKEN GIVEN False" in printed, printed  # her server's own Hub token signed her in
    assert "Your score" in printed, printed
    words = printed.split("ID ", 1)[1].split()
    submission, score = words[0], float(words[2])
    assert score > 0, printed
    browser = start_browser()
    try:
        assert sign_in(browser, hub, "ada") == "/services/autograder/"  # her assignments (the course serves two)
        assert "Signed in as ada" in browser.page_source
        browser.find_element(By.CSS_SELECTOR, f'a[href="/services/autograder/assignments/{ASSIGNMENT}"]').click()
        assert submission in browser.page_source  # her attempt is listed, linked to its feedback
        upload = browser.find_element(By.CSS_SELECTOR, "form.upload")  # the page's own form, under the prefix
        assert urlsplit(upload.get_attribute("action")).path == f"/services/autograder/assignments/{ASSIGNMENT}/upload"
        browser.get(f"{hub['url']}/services/autograder/submissions/{submission}")
        page = browser.find_element(By.TAG_NAME, "body").text
        assert f"{score:g} /" in page, page[:2000]
        for line in printed.splitlines():  # every check line the call printed is on the page
            if line.strip().startswith(("ok ", "NO ")):
                assert line.strip()[3:].strip().replace("`", "") in page, (line, page[:3000])  # (`code` shown as code)
        assert "token" not in browser.current_url.lower()  # no token was ever in an address
        browser.get(f"{hub['url']}/services/autograder/assignments/{ASSIGNMENT}")
        browser.find_element(By.CSS_SELECTOR, "form[action$='/logout'] button").click()  # signs out of the Hub
        WebDriverWait(browser, 30).until(lambda b: b.find_elements(By.ID, "username_input"))
        browser.get(f"{hub['url']}/services/autograder/assignments/{ASSIGNMENT}")
        WebDriverWait(browser, 30).until(lambda b: b.find_elements(By.ID, "username_input"))  # asked to sign in again
    finally:
        browser.quit()


def test_a_ta_signs_in_through_the_hub_and_sees_the_ta_page(hub):
    from browser import start_browser
    from selenium.webdriver.common.by import By

    browser = start_browser()
    try:
        assert sign_in(browser, hub, "tim") == "/services/autograder/"
        browser.find_element(By.CSS_SELECTOR, f'a[href="/services/autograder/ta/{ASSIGNMENT}"]').click()
        assert "ada" in browser.find_element(By.TAG_NAME, "body").text
    finally:
        browser.quit()


def test_a_user_without_the_services_scope_is_refused(hub):
    """Eve has a Hub account but is in neither group the service's roles name."""
    from browser import start_browser
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    status, answer = admin(hub, "/users/eve/tokens", {"note": "eve's own token"})
    assert status == 201, (status, answer)
    url = f"{hub['url']}/services/autograder/api/assignments/{ASSIGNMENT}/submissions"
    status, body, _ = request(url, token=answer["token"])
    assert status == 401, (status, body)
    status, body, _ = request(url, token="not-a-token-the-hub-knows")
    assert status == 401, (status, body)
    browser = start_browser()
    try:
        browser.delete_all_cookies()
        browser.get(f"{hub['url']}/services/autograder/")
        WebDriverWait(browser, 30).until(lambda b: b.find_elements(By.ID, "username_input"))
        browser.find_element(By.ID, "username_input").send_keys("eve")
        browser.find_element(By.ID, "password_input").send_keys(PASSWORD)
        browser.find_element(By.ID, "login_submit").click()
        WebDriverWait(browser, 30).until(lambda b: "/hub/api/oauth2/authorize" in b.current_url)
        text = browser.find_element(By.TAG_NAME, "body").text
        assert "You do not have permission to access JupyterHub service autograder" in text, text[:1000]
        assert not [c for c in browser.get_cookies() if c["name"] == "autograder"]  # never signed in to it
    finally:
        browser.quit()
