#!/usr/bin/env bash
# Renders a report and checks it in headless Chromium (Debian's package): the page must load
# with no console message at all (it has no script, so any message is an error: a blocked
# resource, a parse problem) and make no network request; a full-page screenshot is written for
# a person to look at.
#
#   scripts/check-report-in-browser.sh [RUN_DIR]     (default: a copy of tests/fixtures/run)
#
# The run directory is copied to a temporary folder and rendered there with `gepa-lab report`, so
# the fixture is never modified. Output: target/report-check/report.png (OUT=... to change).
# BIN=path/to/gepa-lab renders with that binary; without it `cargo run` builds the dev profile
# first, which from a clean target/ takes many minutes.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-target/report-check}
mkdir -p "$OUT"

if ! command -v chromium >/dev/null 2>&1; then
    echo "chromium not found; installing Debian's package" >&2
    apt-get update && apt-get install -y chromium
fi

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cp -r "${1:-tests/fixtures/run}" "$work/run"
if [ -n "${BIN:-}" ]; then
    "$BIN" report "$work/run" >/dev/null
else
    cargo run --quiet -- report "$work/run" >/dev/null
fi
page="$work/run/index.html"

# Flags: no sandbox (root in a container), no GPU, and nothing that talks to the network.
browse() {
    chromium --headless --no-sandbox --disable-gpu --disable-quic --no-first-run \
        --disable-background-networking --disable-component-update --disable-sync \
        --user-data-dir="$(mktemp -d -p "$work")" --enable-logging=stderr --v=0 "$@"
}

# Console messages reach Chromium's log as lines with "CONSOLE"; check that the check itself
# sees one, on a page that logs an error on purpose.
printf '<!doctype html><script>console.error("probe")</script>' >"$work/probe.html"
if ! browse --dump-dom "file://$work/probe.html" 2>&1 >/dev/null | grep -q 'CONSOLE.*probe'; then
    echo "FAIL: this Chromium does not report console messages the way the check expects" >&2
    exit 1
fi

if grep -Eq '<script|(src|href)="(https?:)?//' "$page"; then
    echo "FAIL: index.html has a script or a network reference:" >&2
    grep -Eo '<script[^>]*>|(src|href)="(https?:)?//[^"]*"' "$page" | head >&2
    exit 1
fi

log="$OUT/chromium.log"
browse --hide-scrollbars --window-size=1280,8000 --screenshot="$OUT/report.png" "file://$page" 2>"$log" >/dev/null
if grep -q 'CONSOLE' "$log"; then
    echo "FAIL: console messages while loading the report:" >&2
    grep 'CONSOLE' "$log" >&2
    exit 1
fi
test -s "$OUT/report.png"
echo "ok: no console messages; screenshot $OUT/report.png"
