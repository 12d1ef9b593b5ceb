#!/usr/bin/env bash
# The embedded model's speed in the dev build (what the README's first command builds) against
# the release build, side by side: the same chat request answered by each binary in turn, N times
# each, interleaved so that whatever else the machine does weighs on both alike. Prints each
# binary's median wall time and the ratio dev / release.
#
#   benches/profile-speed.sh [N]        (default N = 6; builds both profiles first)
#
# llama.cpp is compiled in Release in both profiles; what differs is the Rust code around it
# (the request loop, sampling glue, tokenizer calls), optimised in release and not in dev except
# for the llama.cpp bindings (Cargo.toml's [profile.dev.package.*]).
set -euo pipefail
cd "$(dirname "$0")/.."
n="${1:-6}"
cargo build --locked --quiet
cargo build --locked --quiet --release
target="${CARGO_TARGET_DIR:-target}"
dev="$target/debug/gepa-lab"
release="$target/release/gepa-lab"
question="Write a paragraph of about 150 words on why prime numbers matter to cryptography."
time_one() {
    local start end
    start=$(date +%s.%N)
    "$1" chat --model local --temperature 0 --max-tokens 96 "$question" >/dev/null 2>&1
    end=$(date +%s.%N)
    echo "$end - $start" | bc
}
dev_times=()
release_times=()
for _ in $(seq "$n"); do
    dev_times+=("$(time_one "$dev")")
    release_times+=("$(time_one "$release")")
done
python3 - "${dev_times[*]}" "${release_times[*]}" <<'PY'
import statistics, sys
dev = [float(x) for x in sys.argv[1].split()]
release = [float(x) for x in sys.argv[2].split()]
print("dev     s:", " ".join(f"{x:.2f}" for x in dev), f"median {statistics.median(dev):.2f}")
print("release s:", " ".join(f"{x:.2f}" for x in release), f"median {statistics.median(release):.2f}")
print(f"dev / release (medians): {statistics.median(dev) / statistics.median(release):.3f}")
PY
