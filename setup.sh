#!/usr/bin/env bash
# Install what the grader needs on a fresh Debian/Ubuntu machine with Python 3.11.
set -euo pipefail
cd "$(dirname "$0")"
# System packages: bubblewrap sandboxes student code, and the grader refuses to run
# student code without it, so setup fails without it. chromium and its driver only
# run the browser tests (skipped, with a reason, without them); nginx only runs the
# reverse-proxy tests (deploy/nginx/: the service behind the proxy it ships for).
if [ "$(id -u)" = 0 ]; then sudo=(); elif command -v sudo >/dev/null; then sudo=(sudo); else sudo=(); fi
apt_install() {
    [ "$(id -u)" = 0 ] || [ ${#sudo[@]} -gt 0 ] || { echo "not root and no sudo" >&2; return 1; }
    "${sudo[@]}" apt-get update -qq && "${sudo[@]}" apt-get install -y -qq "$@"
}
if ! command -v bwrap >/dev/null; then
    if ! log=$(apt_install bubblewrap 2>&1); then
        cat >&2 <<EOF
setup.sh: could not install bubblewrap, the sandbox that student code runs in:
$(printf '%s\n' "$log" | tail -n 5)
Without it 'autograder grade' refuses to run student code. Install it as root
(apt-get install -y bubblewrap, or your distribution's bubblewrap package), then run ./setup.sh again.
EOF
        exit 1
    fi
fi
browser=()
command -v chromium >/dev/null || browser+=(chromium)
command -v chromedriver >/dev/null || browser+=(chromium-driver)
command -v nginx >/dev/null || [ -x /usr/sbin/nginx ] || browser+=(nginx)  # (not a browser: one apt call for both)
if [ ${#browser[@]} -gt 0 ]; then
    apt_install "${browser[@]}" >/dev/null 2>&1 || echo "setup.sh: could not install ${browser[*]}; the tests that need them are skipped (the reverse-proxy tests fail under CI without nginx)" >&2
fi
# JupyterHub's proxy, for the Hub tests alone (tests/test_hub.py: skipped without it, failed under CI)
if ! command -v configurable-http-proxy >/dev/null && command -v npm >/dev/null; then
    "${sudo[@]}" npm install -g --silent configurable-http-proxy >/dev/null 2>&1 || echo "setup.sh: could not install configurable-http-proxy (npm); the Hub tests are skipped" >&2
fi
# torch first and pinned: the CPU wheel; anything unpinned would pull CUDA packages.
python -m pip install --quiet --disable-pip-version-check "torch==2.13.0" numpy
python -m pip install --quiet --disable-pip-version-check -e ".[test]"
# Start-up .pth files that this machine runs in every Python process and that no package
# installed (a platform's own hooks) are recorded now, as they are, so the grader's check
# for a poisoned interpreter does not mistake them for student code's work.
autograder trust-startup-files
# bubblewrap is there; can it make namespaces on this machine? Say so now, not at grading time.
python -c "from autograder.grading.sandbox.isolation import available; mode, why = available(); print('sandbox:', why); raise SystemExit(mode != 'bwrap')" || {
    echo "setup.sh: bubblewrap is installed but cannot create namespaces here (see above); grading will refuse to run." >&2
    exit 1
}
