#!/usr/bin/env bash
# Checks, before anything is built, that this CPU has the instructions llama.cpp is compiled for.
#
#   scripts/check-cpu.sh [CPUINFO]
#
# .cargo/config.toml turns ggml's GGML_* instruction-set options on (AVX2, and AVX-512 with VNNI);
# a variable of the same name in the environment wins (scripts/ggml-options.sh lists them). A CPU without one of them would stop
# gepa-lab with an illegal instruction (the embedded model checks again when it loads:
# src/inference/embedded/cpu.rs holds the same table). Exits 1 naming what is missing and the
# variables to export; 0 on other architectures, whose builds ignore these options. CPUINFO (a
# file in /proc/cpuinfo's format; default /proc/cpuinfo itself) is for the tests.
set -euo pipefail
cd "$(dirname "$0")/.."

cpuinfo="${1:-/proc/cpuinfo}"
if [[ $# -eq 0 ]]; then
    [[ "$(uname -m)" == x86_64 && -r /proc/cpuinfo ]] || exit 0
fi

# GGML option -> the /proc/cpuinfo flags its compiler flags assume (ggml-cpu/CMakeLists.txt).
declare -A needs=(
    [GGML_SSE42]="sse4_2"
    [GGML_AVX]="avx"
    [GGML_AVX2]="avx2"
    [GGML_AVX_VNNI]="avx_vnni"
    [GGML_FMA]="fma"
    [GGML_F16C]="f16c"
    [GGML_BMI2]="bmi2"
    [GGML_AVX512]="avx512f avx512cd avx512vl avx512dq avx512bw"
    [GGML_AVX512_VBMI]="avx512vbmi"
    [GGML_AVX512_VNNI]="avx512_vnni"
    [GGML_AVX512_BF16]="avx512_bf16"
)

flags=" $(grep -m1 '^flags' "$cpuinfo" | cut -d: -f2) "
missing=()
while read -r variable value; do
    case "${value,,}" in on | true | yes | y | 1) ;; *) continue ;; esac
    for flag in ${needs[$variable]:-}; do
        if [[ "$flags" != *" $flag "* ]]; then
            missing+=("$variable")
            break
        fi
    done
done < <(scripts/ggml-options.sh)

if ((${#missing[@]})); then
    IFS=$'\n' sorted=($(sort <<<"${missing[*]}"))
    unset IFS
    echo "this CPU lacks instructions llama.cpp would be built for: ${sorted[*]}" >&2
    printf 'build without them: export' >&2
    printf ' %s=OFF' "${sorted[@]}" >&2
    printf ', then run the same command again\n' >&2
    exit 1
fi
