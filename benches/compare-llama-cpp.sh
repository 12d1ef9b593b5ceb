#!/usr/bin/env bash
# The default model through EmbeddedModel and through llama.cpp's C API, side by side.
#
#   benches/compare-llama-cpp.sh [MODEL_NAME]
#
# llama-cpp-sys-2 vendors llama.cpp without the sources of its tools, so llama-bench cannot be
# built from it. benches/llama_cpp_bench.cpp does llama-bench's pp and tg tests instead, linked
# against the very static libraries cargo built for gepa-lab (same llama.cpp, same flags): the
# comparison is of the bindings and of gepa-lab's generation loop, not of two llama.cpp builds.
# Both run the same GGUF with the same threads (GEPA_LAB_THREADS, default: the cores), taking
# turns ROUNDS times (default 2), so that a machine whose load changes affects both alike.
# Needs the model installed (scripts/setup-model.sh) and a C++ compiler.
set -euo pipefail
cd "$(dirname "$0")/.."

name="${1:-}"
threads="${GEPA_LAB_THREADS:-$(nproc)}"
export GEPA_LAB_THREADS="$threads"
reps="${BENCH_REPS:-5}"
rounds="${ROUNDS:-2}"
target_dir="$(cargo metadata --format-version 1 --no-deps | python3 -c 'import json,sys; print(json.load(sys.stdin)["target_directory"])')"
source_dir="$(cargo metadata --format-version 1 --locked |
    python3 -c 'import json,sys,os; m=json.load(sys.stdin); p=[p for p in m["packages"] if p["name"]=="llama-cpp-sys-2"][0]; print(os.path.join(os.path.dirname(p["manifest_path"]), "llama.cpp"))')"

# Builds the release binary and bench first: that also builds llama.cpp's libraries.
cargo bench --locked --quiet --bench embedded_model --no-run 2>/dev/null
model_file="$(cargo run --release --locked --quiet -- model path ${name:+"$name"})"
model_id="local${name:+:$name}"
lib_dir="$(ls -td "$target_dir"/release/build/llama-cpp-sys-2-*/out/lib 2>/dev/null | head -1)"
if [[ -z "$lib_dir" ]]; then
    echo "no llama.cpp libraries under $target_dir/release/build" >&2
    exit 1
fi
bench="$target_dir/llama_cpp_bench"
c++ -O2 -std=c++17 -I"$source_dir/include" -I"$source_dir/ggml/include" \
    benches/llama_cpp_bench.cpp -o "$bench" -L"$lib_dir" \
    -lllama -lggml -lggml-cpu -lggml-base -lgomp -lpthread -ldl -lm

echo "model: $model_file, threads: $threads, repetitions: $reps, rounds: $rounds"
for ((round = 1; round <= rounds; round++)); do
    echo
    echo "round $round"
    BENCH_MODEL="$model_id" BENCH_REPS="$reps" cargo bench --locked --quiet --bench embedded_model 2>/dev/null
    # pp208: the rendered prompt of the EmbeddedModel run is 208 tokens.
    /usr/bin/time -f "llama.cpp peak RSS: %M KiB" "$bench" "$model_file" "$threads" 208 32 "$reps"
done
