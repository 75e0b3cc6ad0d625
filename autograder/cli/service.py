"""The grading service's commands: serve (pages and a JSON API), its tokens, and pruning its uploads."""
import csv
import importlib.util
import io
import json
import os
from pathlib import Path

from autograder.cli.common import (add_unsafe_flag, assignment_of, console, course_of, dask_scheduler,
                                   may_run_student_code)
from autograder.course import Course, CourseError, write_atomically
from autograder.grading.sandbox.isolation import require_sandbox
from autograder.outputs.lms import RosterError, read_roster
from autograder.untrusted import for_spreadsheet, for_terminal as shown


HOST, PORT = "127.0.0.1", 8000


def cmd_serve(args):
    """Grade notebooks as students submit them: web pages and a JSON API (service/app.py)."""
    if any(importlib.util.find_spec(name) is None for name in ("starlette", "uvicorn", "multipart")):
        console.print("[red]autograder serve needs the service extra[/red]: pip install -e \".[service]\""
                      " (Starlette, uvicorn and python-multipart).", highlight=False)
        return 2
    import uvicorn  # an optional extra (the check above says so when it is missing)

    from autograder.service import limits  # the service's modules (15 ms): only its own commands load them
    from autograder.service.app import make_app  # Starlette, an optional extra
    from autograder.service.core import Service  # torch (2 s)

    course = course_of(args)
    if args.demo:
        course, links = _demo_service_course(course, args)
    chosen = [course.assignment(name) for name in args.assignments] if args.assignments else course.assignments()
    unreleased = [a.name for a in chosen if not a.release_notebook.is_file()]
    if unreleased:
        raise CourseError(f"release {', '.join(unreleased)} first (`autograder release`): the service grades"
                          " against the release")
    try:
        roster = read_roster(args.roster) if args.roster else None
    except RosterError as error:
        console.print(f"[red]autograder serve: {shown(error, None)}[/red]", highlight=False)
        return 2
    try:
        hub, path = _hub_and_path(args, course)
    except ValueError as error:
        console.print(f"[red]autograder serve: {shown(error, None)}[/red]", highlight=False)
        return 2
    cluster = None
    if args.cluster:
        cluster = dask_scheduler(args)
        isolation = cluster.require_sandbox(args.unsafe_no_sandbox)  # each worker is asked
    else:
        may_run_student_code(args.unsafe_no_sandbox)
        isolation = require_sandbox(args.unsafe_no_sandbox)
    service = Service(course, chosen, jobs=args.jobs or os.cpu_count() or 1, roster=roster, isolation=isolation,
                      cluster=cluster).start()
    base = (f"http://{args.host}:{args.port}" if not args.uds else f"http://unix:{args.uds}:") + path
    console.print(f"Grading {', '.join(a.name for a in chosen)} on submit at {base} (course {course.root});"
                  " Ctrl-C stops it, and whatever is queued is graded when it starts again.", highlight=False)
    if args.demo:
        for student, token in links:
            console.print(f"  {student}: {base}/login/{token}", highlight=False)
    before, after = limits.raise_descriptor_limit()
    if after < 4096:
        console.print(f"Note: this process may open {after} files (raised from {before}); each connection takes one."
                      " Run it behind nginx (deploy/nginx/, docs/service.md) or raise LimitNOFILE.", style="yellow",
                      highlight=False)
    where = {"uds": args.uds} if args.uds else {"host": args.host, "port": args.port}
    try:
        uvicorn.run(make_app(service, secure_cookies=args.secure_cookies, base=path, hub=hub), **where, log_level="warning",
                    proxy_headers=bool(args.forwarded_allow_ips), forwarded_allow_ips=args.forwarded_allow_ips or None,
                    limit_concurrency=args.limit_concurrency, timeout_keep_alive=limits.KEEP_ALIVE,
                    log_config=limits.log_config())
    finally:
        service.close()
    return 0


def _hub_and_path(args, course):
    """(the service/hub.py Hub with --hub else None, the path the service is served under); ValueError
    says what is wrong. A service the Hub starts is told its address (JUPYTERHUB_SERVICE_URL): it
    listens there unless --host/--port say otherwise."""
    path = args.base_url.rstrip("/")
    if args.base_url and (not args.base_url.startswith("/") or "//" in args.base_url):
        raise ValueError(f"--base-url is a path such as /grader, not {args.base_url!r}")
    if args.hub and args.base_url:
        raise ValueError("--hub serves under the path the Hub gives (JUPYTERHUB_SERVICE_PREFIX): leave out --base-url")
    hub = None
    if args.hub:
        from urllib.parse import urlsplit  # (with --hub alone)

        from autograder.service.hub import TA_SCOPE, Hub, HubError  # JupyterHub's library: an optional extra

        try:
            hub = Hub(course.root)
        except HubError as error:
            raise ValueError(f"--hub: {error}") from None
        url, path = urlsplit(os.environ.get("JUPYTERHUB_SERVICE_URL", "")), hub.prefix
        if args.port is None and url.port:
            args.host, args.port = (url.hostname or args.host) if args.host == HOST else args.host, url.port
        console.print(f"Students and TAs sign in through the Hub ({hub.prefix}/); TAs: members of"
                      f" {', '.join(hub.settings.ta_groups) or 'no group (hub.toml names none)'}, or holders of"
                      f" {TA_SCOPE}.", highlight=False)
    args.port = PORT if args.port is None else args.port
    return hub, path


def _demo_service_course(course, args):
    """`serve --demo`: the course's demo copy (as `autograder demo` makes it), with a token for each
    example student and a TA; returns (the demo course, [(who, token)])."""
    # nbformat's validator (0.1 s), for --demo alone
    from autograder.authoring.examples import DEMO, DEMO_MARK, demo_course, examples, give_demo_due_date
    from autograder.service.store import TA, Store  # the service's modules wait for its commands (cmd_serve)

    demo = Course(course.root / DEMO) if (course.root / DEMO / DEMO_MARK).is_file() else demo_course(course)
    store = Store(demo.root / "service" / "service.db")
    links = []
    for assignment in demo.assignments():
        if args.assignments and assignment.name not in args.assignments:
            continue
        due = give_demo_due_date(assignment)
        if due:
            console.print(f"{assignment.name} hides checks until its due date: the demo's copy is due"
                          f" {due:%Y-%m-%d %H:%M} UTC, so its pages are those students see before it.",
                          highlight=False)
        for student, role in [*((s, "student") for s in examples(assignment)), ("ta", TA)]:
            store.revoke(assignment.name, student)  # the last demo's links stop working: one set at a time
            links.append((f"{'a TA' if role == TA else student} ({assignment.name})",
                          store.issue(student, assignment.name, role)))
    return demo, links


def cmd_tokens(args):
    """Issue, list and revoke the tokens students (and TAs) use with `autograder serve`: for one
    assignment, or without one, a single token per student for every assignment of the course."""
    from autograder.service.store import COURSE, TA, Store  # SQLite (6 ms), only here

    course = course_of(args)
    name = course.assignment(args.assignment).name if args.assignment else COURSE
    where = name if args.assignment else "the course (every assignment)"
    store = Store(course.root / "service" / "service.db")
    for student in args.revoke or []:
        count = store.revoke(name, student)
        console.print(f"{shown(student)}: {count} token(s) revoked" if count else
                      f"[yellow]{shown(student)} has no token for {where}[/yellow]", highlight=False)
    students = []
    if args.roster:
        try:
            students = list(read_roster(args.roster))
        except RosterError as error:
            console.print(f"[red]autograder tokens: {shown(error, None)}[/red]", highlight=False)
            return 2
    active = {row["student_id"] for row in store.active_tokens(name) if row["assignment"] == name}
    issued, kept = [], []
    for student, role in [*((s, "student") for s in students), *((t, TA) for t in args.ta or [])]:
        if student in active and not args.new:
            kept.append(student)
            continue
        if args.new:
            store.revoke(name, student)
        issued.append((student, store.issue(student, name, role)))
    if issued:
        if not args.out:
            raise CourseError("give --out FILE: the new tokens are written there (and shown nowhere else)")
        handle = io.StringIO(newline="")
        writer = csv.writer(handle)
        writer.writerow(["student_id", "token", "link"])
        base = (args.url or "https://YOUR-SERVICE").rstrip("/")
        for student, token in issued:
            writer.writerow([student, token, f"{base}/login/{token}"])
        out = write_atomically(Path(args.out), handle.getvalue(), mode=0o600)  # never readable by others
        console.print(f"wrote {len(issued)} new tokens for {where} to {out} (readable by you alone: each is a"
                      " student's password, send each only to its student)", highlight=False)
    if kept:
        console.print(f"{len(kept)} already had a token (kept; --new replaces them): {shown(', '.join(kept), 600)}",
                      highlight=False)
    if args.list:
        for row in store.active_tokens(name):
            scope = "every assignment" if row["assignment"] == COURSE else row["assignment"]
            console.print(f"  {shown(row['student_id'])} ({row['role']}, {scope}), issued {row['created_at'][:16]}",
                          highlight=False)
    return 0


def cmd_hub(args):
    """`hub config`: the jupyterhub_config.py lines that run this course's service under the Hub, and
    with --client-dir, the client a notebook imports to hand itself in (service/hub.py)."""
    from autograder.service import client  # the service's modules wait for its commands (the stdlib client)
    from autograder.service.hub import config_snippet

    course = course_of(args)
    if args.client_dir:
        folder = Path(args.client_dir)
        folder.mkdir(parents=True, exist_ok=True)
        write_atomically(folder / "autograder_client.py", Path(client.__file__).read_text(), mode=0o644)
        console.print(f"# wrote {folder / 'autograder_client.py'}: every user's server imports it from there",
                      highlight=False, markup=False)
    console.print(config_snippet(course.root, args.url, args.port, args.name, args.group or (), args.ta_group or (),
                                 args.client_dir), markup=False, highlight=False, soft_wrap=True)
    return 0


def cmd_lti(args):
    """`lti register`: what to paste into Canvas and Moodle (the tool's addresses and key), and with
    the platform's values, its entry in the course's lti.toml (service/lti.py)."""
    from autograder.service import lti  # PyJWT and cryptography, of the service extra: its commands alone

    course = course_of(args)
    if args.action == "roster":
        return _lti_roster(course, args)
    if args.action == "send":
        return _lti_send(course, args)
    if not args.url:
        raise CourseError("give --url, the service's public address (https://...), as students reach it")
    given = [args.issuer, args.client_id, args.deployment, args.login_url, args.keys_url]
    if any(given) and not all(given):
        raise CourseError("give the platform's five values together (--issuer, --client-id, --deployment, --login-url,"
                          " --keys-url), or none of them to see what to paste into the LMS first")
    if all(given):  # the LMS has the tool now: the tool learns the LMS
        try:
            path = lti.add_platform(course.root, lti.Platform(args.issuer, args.client_id, args.login_url,
                                                              args.keys_url, tuple(args.deployment),
                                                              args.token_url or ""))
        except ValueError as error:
            raise CourseError(str(error)) from None
        console.print(f"added the platform {shown(args.issuer)} (client id {shown(args.client_id)}) to {path};"
                      " restart `autograder serve` to take launches from it.", highlight=False)
        return 0
    folder = course.root / "service"
    folder.mkdir(parents=True, exist_ok=True)
    key = lti.ToolKey(folder)  # made once: the LMS keeps its public half
    urls = lti.tool_urls(args.url)
    console.print(f"The tool's addresses under {args.url}: login {urls['login']}, launch {urls['launch']}, public"
                  f" keys {urls['keys']}.", highlight=False)
    console.print("\nCanvas (Admin > Developer Keys > + LTI Key > Method: Paste JSON):", highlight=False)
    console.print(json.dumps(lti.canvas_developer_key(args.url, key, course.root.name), indent=2), markup=False,
                  highlight=False, soft_wrap=True)
    console.print("\nMoodle (Site administration > Plugins > Activity modules > External tool > Manage tools >"
                  " configure a tool manually):", highlight=False)
    for field, value in lti.moodle_settings(args.url):
        console.print(f"  {field}: {value}", markup=False, highlight=False, soft_wrap=True)
    console.print("\nThen run this again with the platform's values (Canvas: the issuer https://canvas.instructure.com,"
                  " the key's client id, the deployment id; Moodle: its Tool configuration details) to add it to"
                  " lti.toml.", highlight=False)
    return 0


def _lti_send(course, args):
    """`lti send ASSIGNMENT...`: the final grades (written answers from formgrader included) to the LMS
    columns the students launched from, sent now; what could not be sent waits in the service's queue."""
    from autograder.runs.finalgrades import assignment_grades  # nbgrader's gradebook (0.2 s)
    from autograder.service.lti import Lti  # PyJWT, of the service extra (as cmd_lti)
    from autograder.service.passback import Sender, queue_final_grades
    from autograder.service.store import Store  # (as in cmd_tokens)

    if not args.assignments:
        raise CourseError("name the assignments whose final grades go to the LMS: autograder lti send ASSIGNMENT ...")
    database = course.root / "service" / "service.db"
    if not database.exists():
        raise CourseError("no service has run in this course: its students have no LMS columns yet")
    chosen = [course.assignment(name) for name in args.assignments]
    store = Store(database)
    lti = Lti(course.root, course.root / "service", store, [a.name for a in chosen])
    if not lti.platforms:
        raise CourseError("the course's lti.toml names no platform (autograder lti register)")
    for assignment in chosen:
        queued = queue_final_grades(store, assignment_grades(assignment)[0])
        console.print(f"{assignment.name}: {queued['final']} final grade(s) and {queued['so far']} score(s) still"
                      " waiting for written answers queued for the LMS", highlight=False)
    Sender(store, lti).send_due()  # now, in this process; a running service's sender takes what is left
    waiting = [row for a in chosen for row in store.lti_backlog(a.name)]
    for row in waiting:
        console.print(f"[yellow]{shown(row['student_id'])} ({row['assignment']}) waits: {shown(row['error'] or 'not due yet')}"
                      "[/yellow]", highlight=False)
    console.print(f"{'every score is in the LMS' if not waiting else f'{len(waiting)} wait'}; the TA page lists any"
                  " that wait, and `autograder serve` sends them again by itself", highlight=False)
    return 1 if waiting else 0


def _lti_roster(course, args):
    """`lti roster --out FILE`: the LMS courses' students as Names and Role Provisioning gave them (an
    instructor's launch fetches it), as a roster CSV for `grade`, `export` and `tokens`."""
    from autograder.service.store import Store  # (as in cmd_tokens)

    if not args.out:
        raise CourseError("give --out FILE: the roster CSV to write")
    database = course.root / "service" / "service.db"
    members = Store(database).lti_roster() if database.exists() else {}
    students = [row for row in members.values() if row["role"] == "student"]
    if not students:
        raise CourseError("no LMS roster yet: it comes with an instructor's or a TA's launch from the LMS"
                          " (Names and Role Provisioning must be on for the tool)")
    handle = io.StringIO(newline="")
    writer = csv.writer(handle)
    writer.writerow(["student_id", "name", "email"])
    for row in students:
        writer.writerow([for_spreadsheet(row[column]) for column in ("student_id", "name", "email")])
    out = write_atomically(Path(args.out), handle.getvalue())
    console.print(f"wrote {len(students)} students of the LMS course(s) to {out}", highlight=False)
    return 0


def cmd_prune(args):
    """Delete the uploads of finished attempts that do not count (service/prune.py)."""
    from autograder.service.prune import prune  # (as in cmd_serve)

    assignment = assignment_of(args)
    root = assignment.course.root / "service"
    if not (root / "service.db").exists():
        console.print(f"[red]autograder prune: no service has run in {shown(str(assignment.course.root))}"
                      " (no service/service.db): nothing to prune[/red]", highlight=False)
        return 2
    found = prune(root, assignment.name, args.older_than, args.dry_run)
    verb = "would delete" if args.dry_run else "deleted"
    console.print(f"{assignment.name}: {verb} {found.files} uploads of attempts that do not count"
                  f" ({found.bytes / 2**20:.1f} MB); kept {found.kept} (the attempts that count, those not"
                  " graded yet" + (f", those from the last {args.older_than:g} days" if args.older_than else "") + ")",
                  highlight=False)
    for path, why in found.problems:
        console.print(f"[yellow]  {shown(path, 300)}: {shown(why, 300)}[/yellow]", highlight=False)
    return 1 if found.problems else 0


def add_commands(sub):
    p = sub.add_parser("serve", help="grade notebooks as students submit them: web pages and a JSON API")
    p.add_argument("assignments", nargs="*", metavar="ASSIGNMENT", help="the assignments to take (default: all)")
    p.add_argument("--host", default=HOST, help="the address to listen on (default 127.0.0.1: put a TLS"
                                                       " reverse proxy in front for students, see docs/service.md)")
    p.add_argument("--port", type=int, default=None, help=f"the port to listen on (default {PORT}; with --hub, the"
                                                         " one the Hub gives in JUPYTERHUB_SERVICE_URL)")
    p.add_argument("--base-url", default="", metavar="PATH",
                   help="serve under this path (e.g. /grader, behind a proxy that keeps the path); --hub uses the"
                        " Hub's /services/<name>")
    p.add_argument("--hub", action="store_true",
                   help="run as a JupyterHub service: students and TAs sign in through the Hub, and a notebook"
                        " hands itself in with its server's Hub token (docs/service.md, \"From JupyterHub\")")
    p.add_argument("--uds", metavar="SOCKET", help="listen on this unix socket instead of --host/--port: only the"
                                                  " reverse proxy (and this machine's processes that may open the"
                                                  " file) reach the service (deploy/nginx/site.conf)")
    p.add_argument("--limit-concurrency", type=int, default=500, metavar="N",
                   help="connections or requests at once before the service answers 503 (default 500)")
    p.add_argument("--jobs", type=int, default=0, help="warm grading workers (default: number of cores)")
    p.add_argument("--roster", metavar="FILE", help="roster CSV: extensions for the late policy")
    p.add_argument("--secure-cookies", action="store_true", help="mark the sign-in cookie Secure (behind HTTPS)")
    p.add_argument("--forwarded-allow-ips", default="", metavar="ADDRESSES",
                   help="the reverse proxies whose X-Forwarded-For and X-Forwarded-Proto are believed (comma"
                        " separated; default none: a client's own headers never change its address)")
    p.add_argument("--demo", action="store_true", help="serve the course's demo/ copy, with a token for each example"
                                                       " student and a TA, printed as links")
    p.add_argument("--cluster", metavar="ADDRESS",
                   help="grade on a Dask cluster (tcp://host:8786, tls://..., or local:N), as grade --cluster does")
    p.add_argument("--tls-ca-file", help="with --cluster tls://...: the certificate authority's file")
    p.add_argument("--tls-cert", help="with --cluster tls://...: this client's certificate")
    p.add_argument("--tls-key", help="with --cluster tls://...: this client's private key")
    add_unsafe_flag(p)
    p.set_defaults(func=cmd_serve)
    p = sub.add_parser("tokens", help="issue, list or revoke the tokens students hand in with (autograder serve)")
    p.add_argument("assignment", nargs="?", help="tokens for this assignment only (default: one token per student"
                                                 " for every assignment of the course, each with its own rules)")
    p.add_argument("--roster", metavar="FILE", help="a token for each student_id on it that has none yet")
    p.add_argument("--ta", nargs="+", metavar="NAME", help="a TA token (sees every student, can regrade)")
    p.add_argument("--out", metavar="FILE", help="CSV of the new tokens: student_id,token,link (mode 600)")
    p.add_argument("--url", help="the service's public address, for the personal links")
    p.add_argument("--new", action="store_true", help="replace existing tokens (the old ones stop working)")
    p.add_argument("--revoke", nargs="+", metavar="STUDENT", help="revoke every token of these students")
    p.add_argument("--list", action="store_true", help="list the active tokens (never their secrets)")
    p.set_defaults(func=cmd_tokens)
    _add_lms_commands(sub)
    p = sub.add_parser("prune", help="delete the service's stored uploads of attempts that no longer count")
    p.add_argument("assignment")
    p.add_argument("--older-than", type=float, default=0.0, metavar="DAYS",
                   help="only uploads handed in more than DAYS days ago (default: any finished one)")
    p.add_argument("--dry-run", action="store_true", help="say what would be deleted, delete nothing")
    p.set_defaults(func=cmd_prune)


def _add_lms_commands(sub):
    """`hub` and `lti`: where the course already lives."""
    p = sub.add_parser("lti", help="register the service with an LMS as an LTI 1.3 tool (Canvas, Moodle)")
    p.add_argument("action", choices=["register", "roster", "send"],
                   help="register: print what to paste into the LMS; with the platform's values, add it to the"
                        " course's lti.toml. roster: write the LMS course's students (--out) as a roster CSV."
                        " send: the assignments' final grades (written answers from formgrader too) to the LMS")
    p.add_argument("assignments", nargs="*", metavar="ASSIGNMENT", help="send: the assignments whose grades go")
    p.add_argument("--url", help="register: the service's public address (https://...), as students reach it")
    p.add_argument("--out", metavar="FILE", help="roster: the CSV to write (student_id,name,email)")
    p.add_argument("--issuer", help="the platform's issuer (Canvas: https://canvas.instructure.com)")
    p.add_argument("--client-id", help="the client id the LMS gave this tool")
    p.add_argument("--deployment", nargs="+", metavar="ID", help="the deployment id(s) of the tool in the LMS")
    p.add_argument("--login-url", help="the platform's OIDC authorization endpoint"
                                       " (Canvas: https://sso.canvaslms.com/api/lti/authorize_redirect)")
    p.add_argument("--keys-url", help="the platform's public keyset"
                                      " (Canvas: https://sso.canvaslms.com/api/lti/security/jwks)")
    p.add_argument("--token-url", help="the platform's OAuth 2 token endpoint, for sending grades back"
                                       " (Canvas: https://sso.canvaslms.com/login/oauth2/token)")
    p.set_defaults(func=cmd_lti)
    p = sub.add_parser("hub", help="run the service under JupyterHub: print the lines for jupyterhub_config.py")
    p.add_argument("action", choices=["config"], help="config: print the Hub's configuration for this course's service")
    p.add_argument("--url", default="http://127.0.0.1:8000",
                   help="the Hub's address as the users' servers reach it (default http://127.0.0.1:8000)")
    p.add_argument("--port", type=int, default=8765, help="the port the service listens on (default 8765)")
    p.add_argument("--name", default="autograder", help="the service's name in the Hub (default autograder)")
    p.add_argument("--group", nargs="+", metavar="GROUP",
                   help="the Hub groups whose members may use the service (default: every Hub user)")
    p.add_argument("--ta-group", nargs="+", metavar="GROUP", help="the Hub groups whose members are TAs")
    p.add_argument("--client-dir", metavar="FOLDER",
                   help="write autograder_client.py here and put it on every server's Python path")
    p.set_defaults(func=cmd_hub)
