#!/usr/bin/env bash
# Install what the grader needs on a fresh Debian/Ubuntu machine with Python 3.11.
set -euo pipefail
cd "$(dirname "$0")"
# System packages: bubblewrap sandboxes student code (without it grading still works,
# with a loud warning); chromium and its driver run the browser tests (skipped without).
missing=()
command -v bwrap >/dev/null || missing+=(bubblewrap)
command -v chromium >/dev/null || missing+=(chromium)
command -v chromedriver >/dev/null || missing+=(chromium-driver)
if [ ${#missing[@]} -gt 0 ]; then
    if [ "$(id -u)" = 0 ]; then sudo=(); elif command -v sudo >/dev/null; then sudo=(sudo); else sudo=(false); fi
    ("${sudo[@]}" apt-get update -qq && "${sudo[@]}" apt-get install -y -qq "${missing[@]}") >/dev/null \
        || echo "could not install ${missing[*]}" >&2
fi
# torch first and pinned: the CPU wheel; anything unpinned would pull CUDA packages.
python -m pip install --quiet --disable-pip-version-check "torch==2.13.0" numpy
python -m pip install --quiet --disable-pip-version-check -e ".[test]"
