#!/usr/bin/env bash
# Prints the GGML_* options cargo gives llama.cpp's build, one "VARIABLE VALUE" line each:
# those of .cargo/config.toml's [env], where a variable of the same name in the environment wins,
# and any other GGML_* variable of the environment (llama-cpp-sys-2 forwards them all to cmake).
#
#   scripts/ggml-options.sh
#
# Read by scripts/check-cpu.sh (does this CPU have what they need?) and
# benches/compare-llama-server.sh (llama-server built with the same options).
set -euo pipefail
cd "$(dirname "$0")/.."

declare -A seen=()
while read -r variable value; do
    seen[$variable]=1
    echo "$variable ${!variable:-$value}"
done < <(sed -n 's/^\(GGML_[A-Z0-9_]*\) *= *"\(.*\)"/\1 \2/p' .cargo/config.toml)
while IFS='=' read -r variable value; do
    [[ -n "${seen[$variable]:-}" ]] || echo "$variable $value"
done < <(env | grep '^GGML_[A-Z0-9_]*=' || true)
