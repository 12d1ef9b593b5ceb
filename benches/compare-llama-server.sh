#!/usr/bin/env bash
# gepa-lab's embedded model against llama.cpp's own llama-server, side by side on the same GGUF,
# threads and requests (benches/batching.rs: the README's extraction replay, 154 answers, and
# one engine minibatch evaluation).
#
#   benches/compare-llama-server.sh [MODEL_NAME]
#
# Runs, one after the other on an otherwise idle machine:
#   1. gepa-lab one at a time (GEPA_LAB_SLOTS=1: one sequence, the previous prompt kept in the
#      cache; the embedded model's path before continuous batching);
#   2. gepa-lab batched (the default slots);
#   3. llama-server with as many parallel slots, continuous batching, a unified KV cache and its
#      prompt cache, over HTTP on 127.0.0.1.
# Each prints answers/s and token rates; this script adds the peak resident memory of the
# process that holds the model, and counts the answers of 2 and 3 that differ from 1's at
# temperature 0, showing the first.
#
# Which llama.cpp: llama-cpp-sys-2 vendors llama.cpp's libraries but not the server's sources.
# The server's sources come from the llama.cpp that llama-cpp-python 0.3.36 vendors (a pinned
# PyPI sdist, SHA-256 checked) and are built on the crate's vendored libraries, with the same
# CPU flags as gepa-lab's build (GGML_NATIVE; OpenMP). One line of the server is adapted to
# the crate's `common` (fs_open_ifstream, a std::ifstream on Linux). The build is kept in
# target/llama-server/, one per set of flags (about 10 minutes the first time on 2 cores).
#
# Settings: GEPA_LAB_THREADS (default: the cores), GEPA_LAB_SLOTS (default: gepa-lab's).
set -euo pipefail
cd "$(dirname "$0")/.."

name="${1:-qwen2.5-coder-0.5b}"
threads="${GEPA_LAB_THREADS:-$(nproc)}"
export GEPA_LAB_THREADS="$threads"
sdist_version=0.3.36
sdist_sha256=832db0699007f1be95a7e41ef12e88926b02ba836461e36a36372db2760c1a2e
target_dir="$(cargo metadata --format-version 1 --no-deps | python3 -c 'import json,sys; print(json.load(sys.stdin)["target_directory"])')"
vendored="$(cargo metadata --format-version 1 --locked |
    python3 -c 'import json,sys,os; m=json.load(sys.stdin); p=[p for p in m["packages"] if p["name"]=="llama-cpp-sys-2"][0]; print(os.path.join(os.path.dirname(p["manifest_path"]), "llama.cpp"))')"
# For this CPU, as cargo builds gepa-lab's llama.cpp (target-cpu=native: GGML_NATIVE).
cpu_flags=(-DGGML_NATIVE=ON)
work="$target_dir/llama-server"
build="$work/build-native"
server="$build/bin/llama-server"

if [[ ! -x "$server" ]]; then
    echo "building llama-server in $work (once)" >&2
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
fi

cargo bench --locked --quiet --bench batching --no-run 2>/dev/null
bench="$(cargo bench --locked --bench batching --no-run --message-format json 2>/dev/null |
    python3 -c 'import json,sys
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m["target"]["name"] == "batching" and m.get("executable"):
        print(m["executable"])')"
model_file="$(cargo run --release --locked --quiet -- model path "$name")"
out="$(mktemp -d)"
trap 'kill "${server_pid:-}" 2>/dev/null || true; rm -rf "$out"' EXIT

echo "model: $model_file, threads: $threads"
echo
echo "### one at a time"
GEPA_LAB_SLOTS=1 BENCH_MODEL="local:$name" BENCH_LABEL="gepa-lab, one at a time" \
    BENCH_ANSWERS="$out/one.jsonl" /usr/bin/time -f "peak memory: %M KiB" "$bench"
echo
echo "### batched"
BENCH_MODEL="local:$name" BENCH_LABEL="gepa-lab, batched" BENCH_ANSWERS="$out/batched.jsonl" \
    /usr/bin/time -f "peak memory: %M KiB" "$bench" | tee "$out/batched.txt"
slots="$(sed -n 's/.*threads, \([0-9]*\) slots.*/\1/p' "$out/batched.txt" | head -1)"
echo
echo "### llama-server"
port=$((20000 + RANDOM % 20000))
"$server" --model "$model_file" --host 127.0.0.1 --port "$port" --threads "$threads" \
    --threads-batch "$threads" --parallel "$slots" --cont-batching --kv-unified \
    --ctx-size 8192 --batch-size 512 --ubatch-size 512 --no-webui --jinja \
    >"$out/server.log" 2>&1 &
server_pid=$!
for _ in $(seq 1 120); do
    if curl -sf "http://127.0.0.1:$port/health" >/dev/null 2>&1; then break; fi
    sleep 0.5
done
BENCH_URL="http://127.0.0.1:$port" BENCH_MODEL="$name" BENCH_CONCURRENCY="$slots" \
    BENCH_LABEL="llama-server, $slots parallel slots" BENCH_ANSWERS="$out/server.jsonl" "$bench"
echo "peak memory: $(awk '/VmHWM/ {print $2}' "/proc/$server_pid/status") KiB (llama-server)"
kill "$server_pid"
wait "$server_pid" 2>/dev/null || true

echo
python3 - "$out" <<'EOF'
import json, sys
out = sys.argv[1]
def load(name):
    return {(a["scenario"], a["version"], a["row"]): a for a in map(json.loads, open(f"{out}/{name}.jsonl"))}
one = load("one")
for name, label in [("batched", "gepa-lab batched"), ("server", "llama-server")]:
    other = load(name)
    differ = [k for k in one if k in other and one[k]["output"] != other[k]["output"]]
    print(f"{label}: {len(differ)} of {len(one)} answers differ from one at a time")
    if differ:
        k = differ[0]
        print(f"  e.g. {k[0]} {k[1]} row {k[2]}:")
        print(f"    one at a time: {one[k]['output']!r}")
        print(f"    {label}: {other[k]['output']!r}")
EOF
