#!/usr/bin/env bash
# Installs Debian packages with apt-get, as root or through sudo:
#
#   scripts/apt-install.sh WHO WHY PACKAGE...
#
# WHO names the calling script in messages, WHY says what the packages are for. Without root,
# sudo or apt-get it says what to install and exits 1. The setup scripts call it with the
# packages they found missing.
set -euo pipefail
who=$1
why=$2
shift 2
echo "$who: installing $* ($why)" >&2
if [[ $(id -u) -eq 0 ]]; then
    sudo=()
elif command -v sudo >/dev/null; then
    sudo=(sudo)
else
    echo "$who: not root and no sudo: install $* and run this again" >&2
    exit 1
fi
if ! command -v apt-get >/dev/null; then
    echo "$who: no apt-get here: install $* with your package manager" >&2
    exit 1
fi
export DEBIAN_FRONTEND=noninteractive
"${sudo[@]}" apt-get update -qq
"${sudo[@]}" apt-get install -y -qq --no-install-recommends "$@" >/dev/null
