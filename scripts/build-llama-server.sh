#!/usr/bin/env bash
# Builds llama.cpp's own llama-server once and prints its path: for the side-by-side benchmark
# (benches/compare-llama-server.sh) and for llama-server as a model provider
# (benches/providers-llama-server.sh).
#
# Which llama.cpp: llama-cpp-sys-2 vendors llama.cpp's libraries but not the server's sources.
# The server's sources come from the llama.cpp that llama-cpp-python 0.3.36 vendors (a pinned
# PyPI sdist, SHA-256 checked) and are built on the crate's vendored libraries, with the same
# CPU flags as gepa-lab's build (GGML_NATIVE; OpenMP). One line of the server is adapted to
# the crate's `common` (fs_open_ifstream, a std::ifstream on Linux). The build is kept in
# <target>/llama-server/, one per set of flags (about 10 minutes the first time on 2 cores).
# It is up to date while its stamp (beside the binary) names the same inputs: the sdist, the
# llama-cpp-sys-2 release whose llama.cpp it is built on, the CPU flags and the recipe below;
# otherwise it is built again, so that a llama-cpp-sys-2 upgrade is never tested against an
# older server.
set -euo pipefail
cd "$(dirname "$0")/.."

sdist_version=0.3.36
sdist_sha256=832db0699007f1be95a7e41ef12e88926b02ba836461e36a36372db2760c1a2e
target_dir="$(cargo metadata --format-version 1 --no-deps | python3 -c 'import json,sys; print(json.load(sys.stdin)["target_directory"])')"
sys_crate="$(cargo metadata --format-version 1 --locked |
    python3 -c 'import json,sys,os; m=json.load(sys.stdin); p=[p for p in m["packages"] if p["name"]=="llama-cpp-sys-2"][0]; print(p["version"], os.path.dirname(p["manifest_path"]))')"
sys_version="${sys_crate%% *}"
vendored="${sys_crate#* }/llama.cpp"
# For this CPU, as cargo builds gepa-lab's llama.cpp (target-cpu=native: GGML_NATIVE), through
# the same compiler launcher, which gives ggml the host's SIMD list instead of -march=native.
launcher="$(cd "$(dirname "$0")" && pwd)/compiler-launcher.sh"
cpu_flags=(-DGGML_NATIVE=ON "-DCMAKE_C_COMPILER_LAUNCHER=$launcher"
    "-DCMAKE_CXX_COMPILER_LAUNCHER=$launcher")
work="$target_dir/llama-server"
build="$work/build-native"
server="$build/bin/llama-server"
# Raise `recipe` when the steps below change what is built.
recipe=2
stamp="$build/gepa-lab-inputs"
inputs="recipe $recipe; llama-cpp-python $sdist_version ($sdist_sha256); llama-cpp-sys-2 $sys_version; ${cpu_flags[*]}"

if [[ ! -x "$server" || "$(cat "$stamp" 2>/dev/null)" != "$inputs" ]]; then
    echo "building llama-server in $work (its inputs changed, or it was never built)" >&2
    mkdir -p "$work/sdist"
    sdist="$work/sdist/llama_cpp_python-$sdist_version.tar.gz"
    if [[ ! -f "$sdist" ]]; then
        python3 -m pip download --quiet --no-deps --no-binary :all: \
            "llama-cpp-python==$sdist_version" -d "$work/sdist"
    fi
    echo "$sdist_sha256  $sdist" | sha256sum --check --quiet
    rm -rf "$work/src" && mkdir -p "$work/src"
    cp -r "$vendored" "$work/src/llama.cpp"
    chmod -R u+w "$work/src/llama.cpp"
    upstream="llama_cpp_python-$sdist_version/vendor/llama.cpp"
    tools="$upstream/tools"
    tar xzf "$sdist" -C "$work/src" "$tools/server" "$tools/ui" "$tools/mtmd" \
        "$upstream/scripts/ui-assets.cmake"
    mkdir -p "$work/src/llama.cpp/scripts"
    cp "$work/src/$upstream/scripts/ui-assets.cmake" "$work/src/llama.cpp/scripts/"
    for tool in server ui mtmd; do
        rm -rf "$work/src/llama.cpp/tools/$tool"
        mv "$work/src/$tools/$tool" "$work/src/llama.cpp/tools/$tool"
    done
    printf 'add_subdirectory(mtmd)\nadd_subdirectory(ui)\nadd_subdirectory(server)\n' \
        >"$work/src/llama.cpp/tools/CMakeLists.txt"
    sed -i 's/fs_open_ifstream(\([^,]*\), /std::ifstream(\1, /' \
        "$work/src/llama.cpp/tools/server/server-mcp.cpp"
    echo "CPU options: ${cpu_flags[*]}" >&2
    cmake -S "$work/src/llama.cpp" -B "$build" -DCMAKE_BUILD_TYPE=Release \
        "${cpu_flags[@]}" \
        -DGGML_OPENMP=ON -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF \
        -DLLAMA_BUILD_TOOLS=ON -DLLAMA_BUILD_SERVER=ON -DLLAMA_BUILD_UI=OFF \
        -DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_APP=OFF >/dev/null
    cmake --build "$build" --target llama-server -j "$(nproc)" >/dev/null
    echo "$inputs" >"$stamp"
fi

echo "$server"
