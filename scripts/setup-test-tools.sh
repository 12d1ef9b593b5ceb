#!/usr/bin/env bash
# Installs what the test suite needs beyond the build:
# - headless Chromium (Debian's `chromium`), in which the tests of `gepa-lab view` load its
#   pages; with apt-get, as root or through sudo, otherwise the script says what to install;
# - qemu-user (Debian's `qemu-user`), under which a test runs the binary on an emulated older
#   CPU, to check that a build for this CPU stops with a message there rather than crashing;
# - an MLflow tracking server (`mlflow` from PyPI, pinned) in its own virtual environment,
#   target/test-tools/mlflow, which the tests of `run --mlflow` start on 127.0.0.1.
# CI runs it before the tests; the tests fail under CI (CI set) without them, and elsewhere skip
# those checks with the reason printed.
set -euo pipefail
cd "$(dirname "$0")/.."

MLFLOW_VERSION=3.17.2
venv=target/test-tools/mlflow
if ! "$venv/bin/mlflow" --version 2>/dev/null | grep -q "$MLFLOW_VERSION"; then
    echo "setup-test-tools: installing mlflow $MLFLOW_VERSION into $venv (the tracking tests)" >&2
    rm -rf "$venv"
    mkdir -p "$(dirname "$venv")"
    # Debian's own python3 makes a virtual environment only with python3-venv.
    if ! python3 -m venv "$venv" 2>/dev/null; then
        rm -rf "$venv"
        scripts/apt-install.sh setup-test-tools "virtual environments for mlflow" python3-venv
        python3 -m venv "$venv"
    fi
    "$venv/bin/pip" install -q --disable-pip-version-check "mlflow==$MLFLOW_VERSION"
    "$venv/bin/mlflow" --version >/dev/null
fi

missing=()
command -v chromium >/dev/null || missing+=(chromium)
command -v qemu-x86_64 >/dev/null || [[ "$(uname -m)" != x86_64 ]] || missing+=(qemu-user)
if ((${#missing[@]} == 0)); then
    exit 0
fi
scripts/apt-install.sh setup-test-tools "the browser and older-CPU checks of the test suite" "${missing[@]}"
command -v chromium >/dev/null || { echo "setup-test-tools: chromium is still missing" >&2; exit 1; }
if [[ "$(uname -m)" == x86_64 ]]; then
    command -v qemu-x86_64 >/dev/null || { echo "setup-test-tools: qemu-x86_64 is still missing" >&2; exit 1; }
fi
