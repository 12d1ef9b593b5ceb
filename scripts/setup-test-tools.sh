#!/usr/bin/env bash
# Installs what the test suite needs beyond the build: headless Chromium (Debian's `chromium`),
# in which the tests of `gepa-lab view` load its pages; with apt-get, as root or through sudo,
# otherwise the script says what to install. CI runs it before the tests; the tests fail under
# CI (CI set) without it, and elsewhere skip those checks with the reason printed.
set -euo pipefail
cd "$(dirname "$0")/.."

missing=()
command -v chromium >/dev/null || missing+=(chromium)
if ((${#missing[@]} == 0)); then
    exit 0
fi
scripts/apt-install.sh setup-test-tools "the browser checks of the test suite" "${missing[@]}"
command -v chromium >/dev/null || { echo "setup-test-tools: chromium is still missing" >&2; exit 1; }
