#!/usr/bin/env bash
# The mixed run of issue 43 on real servers: llama.cpp's own llama-server serves the embedded
# catalog's 0.5B and 1.5B models on two loopback ports, declared as two providers of one
# experiment. gepa-lab's built-in engine (`run --backend local`) evolves the sentiment prompt on
# the 0.5B provider, reflects with the 1.5B provider (the rules proposer), and replays on both providers and on the
# embedded 0.5B model (the seed and the best prompt, on the 90 holdout rows); the run prints
# its headline and `run.json` names every role's provider. The search stops after 20 minutes.
#
#   benches/providers-llama-server.sh [OUT_DIR]     (default: a temporary folder)
#
# Needs both models installed (scripts/setup-model.sh qwen2.5-coder-0.5b qwen2.5-coder-1.5b) and
# builds llama-server once (scripts/build-llama-server.sh). No environment variable beyond the
# machine's own is read: the providers have no keys.
set -euo pipefail
cd "$(dirname "$0")/.."

out="${1:-$(mktemp -d)}"
threads="${GEPA_LAB_THREADS:-$(nproc)}"
server="$(scripts/build-llama-server.sh)"
# The dev profile: llama.cpp is a Release build in it too (see Cargo.toml), and a release build of
# the whole crate takes about 45 minutes on 2 cores.
cargo build --locked --quiet
target_dir="$(cargo metadata --format-version 1 --no-deps | python3 -c 'import json,sys; print(json.load(sys.stdin)["target_directory"])')"
gepa_lab="$target_dir/debug/gepa-lab"
small="$("$gepa_lab" model path qwen2.5-coder-0.5b)"
large="$("$gepa_lab" model path qwen2.5-coder-1.5b)"
pids=()
trap 'kill "${pids[@]}" 2>/dev/null || true' EXIT

# Starts llama-server on `$1` (a GGUF) under the model id `$2` on port `$3`, in this shell so
# that the trap stops it.
serve() {
    "$server" --model "$1" --alias "$2" --host 127.0.0.1 --port "$3" --threads "$threads" \
        --parallel 4 --cont-batching --ctx-size 8192 --no-webui --jinja \
        >"$out/llama-server-$2.log" 2>&1 &
    pids+=($!)
}
healthy() {
    for _ in $(seq 1 240); do
        if curl -sf "http://127.0.0.1:$1/health" >/dev/null 2>&1; then return; fi
        sleep 0.5
    done
    echo "llama-server on port $1 did not start; see $out/llama-server-*.log" >&2
    exit 1
}
mkdir -p "$out"
small_port=$((20000 + RANDOM % 20000))
large_port=$((small_port + 1))
serve "$small" qwen-0.5b "$small_port"
serve "$large" qwen-1.5b "$large_port"
healthy "$small_port"
healthy "$large_port"

experiment="$out/sentiment-providers.toml"
python3 - "$PWD/datasets/sentiment.csv" "$small_port" "$large_port" >"$experiment" <<'PY'
import sys
dataset, small, large = sys.argv[1:]
text = open("experiments/sentiment.toml").read()
text = text.replace('name = "sentiment"', 'name = "sentiment-providers"')
text = text.replace('file = "../datasets/sentiment.csv"', f'file = "{dataset}"')
text = text.replace('models = ["local"]', 'models = ["small/qwen-0.5b", "large/qwen-1.5b", "local"]')
text = text.replace("top = 3", "top = 1")
print(text)
print(f"""
[providers.small]
url = "http://127.0.0.1:{small}/v1"
max_in_flight = 4

[providers.large]
url = "http://127.0.0.1:{large}/v1"
max_in_flight = 4
timeout_secs = 600

[engine]
task_model = "small/qwen-0.5b"
reflection_model = "large/qwen-1.5b"
# The 1.5B is the embedded catalog's reflection model behind another server: it gets the rules
# proposer it gets in process (a provider's model otherwise gets the rewrite, which a 1.5B
# writes badly and slowly). The search is still bounded in time.
proposer = "rules"
max_seconds = 1200
""")
PY
"$gepa_lab" plan --check "$experiment" >/dev/null
/usr/bin/time -f "wall %e s, peak memory of gepa-lab %M KiB" \
    "$gepa_lab" run "$experiment" --backend local --yes --seed 43 --out "$out/reports"
run_dir="$(ls -d "$out"/reports/sentiment-providers/*/ | head -1)"
python3 - "$run_dir/run.json" <<'PY'
import json, sys
manifest = json.load(open(sys.argv[1]))
print("providers:", ", ".join(f"{n} at {p['url']}" for n, p in manifest["plan"]["providers"].items()))
for role, model in manifest["executions"][0]["plan"]["models"].items():
    for m in model if isinstance(model, list) else [model]:
        print(f"  {role:<10} {m['provider']:<6} {m['model']}")
PY
