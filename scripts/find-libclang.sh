#!/usr/bin/env bash
# Prints the first libclang that bindgen would load and exits 0, or prints nothing and exits 1.
#
#   scripts/find-libclang.sh [ROOT]
#
# llama-cpp-sys-2 runs bindgen, which loads libclang at build time through clang-sys (1.9, with
# its `runtime` feature). This mirrors clang-sys's own search (build/common.rs, build/dynamic.rs)
# so that setup never takes a look-alike for the real thing:
# - file names `libclang.so`, `libclang-*.so`, `libclang.so.*`, `libclang-*.so.*`, but never one
#   containing `-cpp.`: `libclang-cpp.so.14` (shipped by the machine image with LLVM) is the C++
#   library, not the C API bindgen needs, and neither are `libclangBasic.a` and friends;
# - directories: $LIBCLANG_PATH, `llvm-config --prefix`'s bin/lib/lib64, $LD_LIBRARY_PATH,
#   $LIBRARY_PATH, then /usr/local/llvm*/lib*, /usr/local/lib*/*/*, /usr/local/lib*/*,
#   /usr/local/lib*, /usr/lib*/*/*, /usr/lib*/*, /usr/lib*;
# - a match must be an ELF shared object (a dangling symlink or an empty file is not).
#
# ROOT (default /) prefixes the fixed directories, so that a test can run the search against a
# temporary tree; with ROOT given, the environment's directories and llvm-config are not asked.
set -uo pipefail
shopt -s nullglob

root="${1:-/}"
root="${root%/}"

is_libclang_name() {
    local name="$1"
    [[ "$name" == *-cpp.* ]] && return 1
    case "$name" in
        libclang.so | libclang-*.so | libclang.so.* | libclang-*.so.*) return 0 ;;
        *) return 1 ;;
    esac
}

is_elf() {
    # -e follows symlinks: a dangling one is not a library.
    [[ -e "$1" && -r "$1" ]] || return 1
    [[ "$(head -c 4 "$1" 2>/dev/null | od -An -c | tr -d ' ')" == '177ELF' ]]
}

search_dir() {
    local dir="$1" file
    [[ -d "$dir" ]] || return 1
    for file in "$dir"/libclang*; do
        if is_libclang_name "${file##*/}" && is_elf "$file"; then
            echo "$file"
            return 0
        fi
    done
    return 1
}

dirs=()
if [[ -z "${1:-}" ]]; then
    [[ -n "${LIBCLANG_PATH:-}" ]] && dirs+=("$LIBCLANG_PATH")
    if prefix=$(llvm-config --prefix 2>/dev/null); then
        dirs+=("$prefix/bin" "$prefix/lib" "$prefix/lib64")
    fi
    IFS=: read -r -a from_env <<<"${LD_LIBRARY_PATH:-}:${LIBRARY_PATH:-}"
    for dir in "${from_env[@]}"; do
        [[ -n "$dir" ]] && dirs+=("$dir")
    done
fi
for pattern in '/usr/local/llvm*/lib*' '/usr/local/lib*/*/*' '/usr/local/lib*/*' '/usr/local/lib*' \
    '/usr/lib*/*/*' '/usr/lib*/*' '/usr/lib*'; do
    # Expanded here, against ROOT (quoted above so that they are not expanded against / first);
    # an unmatched pattern expands to nothing (nullglob).
    for dir in $root$pattern; do
        dirs+=("$dir")
    done
done

for dir in "${dirs[@]}"; do
    search_dir "$dir" && exit 0
done
exit 1
