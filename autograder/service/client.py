"""Hand in a notebook to the course's grading service, with Python alone (no package to install).

From a terminal:

    python autograder_client.py https://grader.example.edu ASSIGNMENT my_notebook.ipynb

The token is read from the AUTOGRADER_TOKEN environment variable (or give --token). From a
notebook cell:

    from autograder_client import hand_in
    hand_in("https://grader.example.edu", "ASSIGNMENT", "my_notebook.ipynb", token="...")

On the course's JupyterHub, where the service's address and your Hub token are already set:

    from autograder_client import hand_in_here
    hand_in_here("ASSIGNMENT", "my_notebook.ipynb")

It sends the notebook, waits while it is graded and prints what you may see of the result.
The service also serves this file at /client.py. It imports nothing but the standard library.
"""
import argparse
import json
import os
import secrets
import sys
import time
import urllib.error
import urllib.request


class HandInError(Exception):
    """The service said no, or could not be reached; the message says why. `answer`: the service's
    whole answer when it gave one (a refusal for attempts used up carries the attempt that counts)."""

    def __init__(self, message, answer=None):
        super().__init__(message)
        self.answer = answer if isinstance(answer, dict) else {}


def _request(url, token, data=None, content_type=None, timeout=60):
    request = urllib.request.Request(url, data=data, method="POST" if data is not None else "GET")
    request.add_header("Authorization", f"Bearer {token}")
    request.add_header("Accept", "application/json")
    if content_type:
        request.add_header("Content-Type", content_type)
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return response.status, json.loads(response.read() or b"null")
    except urllib.error.HTTPError as error:
        try:
            body = json.loads(error.read() or b"null")
        except ValueError:
            body = None
        message = body.get("error") if isinstance(body, dict) else None
        raise HandInError(f"{error.code}: {message or error.reason}", body) from None
    except urllib.error.URLError as error:
        raise HandInError(f"the service at {url} could not be reached ({error.reason})") from None


def submit(base, assignment, path, token):
    """Send the notebook at `path`; returns the service's answer (a dict with the submission's id)."""
    boundary = secrets.token_hex(16)
    with open(path, "rb") as handle:
        notebook = handle.read()
    name = os.path.basename(path).replace('"', "_")
    body = (f'--{boundary}\r\nContent-Disposition: form-data; name="notebook"; filename="{name}"\r\n'
            f"Content-Type: application/x-ipynb+json\r\n\r\n").encode() + notebook + f"\r\n--{boundary}--\r\n".encode()
    _, answer = _request(f"{base.rstrip('/')}/api/assignments/{assignment}/submissions", token, body,
                         f"multipart/form-data; boundary={boundary}")
    return answer


def wait(base, submission, token, poll=1.0, timeout=1800):
    """Ask about the submission until it is graded (or failed); returns the last answer."""
    url = submission.get("status_url") or f"{base.rstrip('/')}/api/submissions/{submission['id']}"
    deadline = time.monotonic() + timeout
    while True:
        _, answer = _request(url, token)
        if answer["status"] in ("graded", "error", "replaced") or time.monotonic() > deadline:
            return answer
        time.sleep(poll)


def describe(answer):
    """The answer in words, as a student reads it."""
    lines = [answer["note"]] if answer.get("note") else []
    if answer["status"] in ("error", "replaced"):
        return answer.get("detail") or "The grader could not grade this notebook; your TA has been told."
    if answer["status"] != "graded":
        return f"Not graded yet (status: {answer['status']}). See {answer.get('feedback_url')}"
    feedback = answer.get("feedback") or {}
    shown = "" if feedback.get("complete") else " on the checks shown"
    lines.append(f"Your score{shown}: {answer['score']:g} / {answer['max_score']:g}")
    if feedback.get("hidden_checks"):  # in the page's words (service/templates/submission.html.j2)
        later = feedback.get("hidden_until_due", 0)
        never = feedback["hidden_checks"] - later
        if later:
            until = f", {answer['hidden_until']}" if answer.get("hidden_until") else ""
            lines.append(f"{later} {'check is' if later == 1 else 'checks are'} not shown until the due date{until}.")
        if never:
            lines.append(f"{never} {'check is' if never == 1 else 'checks are'} for your TA only.")
        lines.append("Their points are not in the score above.")
    for exercise in feedback.get("exercises", []):
        lines.append(f"{exercise['title']}: {exercise['points']:g} / {exercise['max_points']:g}")
        for check in exercise["checks"]:
            mark = "ok " if check["passed"] else "NO "
            lines.append(f"  {mark} {check['description']}")
            if check["message"]:
                lines.append(f"       {check['message']}")
    lines.append(f"The whole page: {answer['feedback_url']}")
    return "\n".join(lines)


def hand_in(base, assignment, path, token=None, quiet=False):
    """Submit, wait, print the feedback; returns the final answer (a dict)."""
    token = token or os.environ.get("AUTOGRADER_TOKEN")
    if not token:
        raise HandInError("no token: give token=... or set AUTOGRADER_TOKEN")
    try:
        answer = submit(base, assignment, path, token)
    except HandInError as refused:
        if refused.answer.get("counted") and not quiet:  # attempts used up: the attempt that counts
            print(f"Not handed in: {refused}\n\nThe attempt that counts:\n{describe(refused.answer['counted'])}")
            refused.shown = True
        raise
    if not quiet:
        left = answer.get("attempts_left")
        print(f"Handed in ({answer['id']}); number {answer.get('queue_position') or 1} in the queue"
              + (f"; {left} attempts left in this window" if left is not None else "") + ".")
    answer = wait(base, answer, token)
    if not quiet:
        print(describe(answer))
    return answer


def hand_in_here(assignment, notebook):
    """From a notebook on the course's JupyterHub: the service's address is in AUTOGRADER_URL (the
    Hub's configuration sets it) and your server's own Hub token signs you in, so no token is asked
    for. Save the notebook first: what is on disk is what is handed in."""
    base = os.environ.get("AUTOGRADER_URL")
    token = os.environ.get("AUTOGRADER_TOKEN") or os.environ.get("JUPYTERHUB_API_TOKEN")
    if not base or not token:
        raise HandInError("this is not a server of the course's JupyterHub (AUTOGRADER_URL or JUPYTERHUB_API_TOKEN"
                          " is not set): use hand_in(url, assignment, notebook, token=...) instead")
    return hand_in(base, assignment, notebook, token)


def main(argv=None):
    parser = argparse.ArgumentParser(description="Hand in a notebook to the course's grading service.")
    parser.add_argument("url", help="the service's address, e.g. https://grader.example.edu")
    parser.add_argument("assignment")
    parser.add_argument("notebook")
    parser.add_argument("--token", help="your token (default: the AUTOGRADER_TOKEN environment variable)")
    args = parser.parse_args(argv)
    try:
        hand_in(args.url, args.assignment, args.notebook, args.token)
    except (HandInError, OSError) as error:
        if not getattr(error, "shown", False):
            print(f"Not handed in: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
