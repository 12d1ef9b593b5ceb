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
# Which llama.cpp: see scripts/build-llama-server.sh, which builds llama-server once.
#
# Settings: GEPA_LAB_THREADS (default: the cores), GEPA_LAB_SLOTS (default: gepa-lab's).
set -euo pipefail
cd "$(dirname "$0")/.."

name="${1:-qwen2.5-coder-0.5b}"
threads="${GEPA_LAB_THREADS:-$(nproc)}"
export GEPA_LAB_THREADS="$threads"
server="$(scripts/build-llama-server.sh)"

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
