#!/usr/bin/env bash
# Runs the hot-key bench (benches/hot_key.rs) at several thread counts and
# prints one markdown table: each limiter and path (one direct limiter, one
# hot key in a keyed map, each thread on keys of its own), governor beside
# rategate's token bucket, fixed window and their `Sharded<_, 4>` forms, in
# millions of checks per second of all threads together (criterion's
# median).
#
# Usage:
#   scripts/scale.sh                    # build, run at 1 2 4 8 16 threads
#   THREADS="1 2" scripts/scale.sh      # other thread counts
#   scripts/scale.sh --build DIR        # only build; copy the bench to DIR
#   scripts/scale.sh --bin FILE         # run a bench built with --build
#                                       # (for a machine without cargo)
#
# Each benchmark warms up for 0.5 s and measures for 1.5 s
# (RATEGATE_BENCH_QUICK), so five thread counts take about 3 minutes.
# Criterion writes to $SCALE_DIR (its CRITERION_HOME), by default
# target/scale, which a run empties first. Needs python3; cargo unless
# --bin is given.
set -euo pipefail

cd "$(dirname "$0")/.."
threads=${THREADS:-"1 2 4 8 16"}
dir=${SCALE_DIR:-$PWD/${CARGO_TARGET_DIR:-target}/scale}

build() {
    cargo bench --bench hot_key --no-run --message-format=json 2>/dev/null |
        python3 -c '
import json, sys
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m["target"]["name"] == "hot_key" and m.get("executable"):
        print(m["executable"])'
}

bin=""
case "${1:-}" in
--build)
    mkdir -p "$2"
    cp "$(build)" "$2/hot_key"
    echo "$2/hot_key"
    exit 0
    ;;
--bin)
    bin=$2
    ;;
"") bin=$(build) ;;
*)
    echo "usage: scripts/scale.sh [--build DIR | --bin FILE]" >&2
    exit 2
    ;;
esac

rm -rf "$dir"
mkdir -p "$dir"
export CRITERION_HOME=$dir RATEGATE_BENCH_QUICK=1
RATEGATE_BENCH_THREADS=$(echo "$threads" | tr -s ' ' ',')
export RATEGATE_BENCH_THREADS
echo "== $bin --bench (threads: $RATEGATE_BENCH_THREADS, $(nproc) cores)" >&2
"$bin" --bench >&2

python3 - "$dir" "$threads" <<'PY'
import json, os, re, sys

root, threads = sys.argv[1], [int(t) for t in sys.argv[2].split()]
ROWS = [
    ("governor", "direct"), ("token_bucket", "direct"), ("sharded_token_bucket_4", "direct"),
    ("fixed_window", "direct"), ("sharded_fixed_window_4", "direct"),
    ("governor", "keyed"), ("token_bucket", "keyed"), ("sharded_token_bucket_4", "keyed"),
    ("fixed_window", "keyed"), ("sharded_fixed_window_4", "keyed"),
    ("governor", "distinct_keys"), ("token_bucket", "distinct_keys"),
]
median = {}  # (threads, function, variant) -> ns per check, all threads together
for dirpath, _, files in os.walk(root):
    if os.path.basename(dirpath) != "new" or "estimates.json" not in files:
        continue
    with open(os.path.join(dirpath, "benchmark.json")) as f:
        meta = json.load(f)
    with open(os.path.join(dirpath, "estimates.json")) as f:
        ns = json.load(f)["median"]["point_estimate"]
    m = re.fullmatch(r"hot_key_(\d+)_threads", meta["group_id"])
    if m:
        median[(int(m.group(1)), meta["function_id"], meta["value_str"])] = ns

print("| limiter | path | " + " | ".join(f"{t} thr" for t in threads) + " |")
print("| --- | --- |" + " ---: |" * len(threads))
for function, variant in ROWS:
    cells = []
    for t in threads:
        ns = median.get((t, function, variant))
        cells.append("-" if ns is None else f"{1e3 / ns:.1f}")
    path = {"direct": "direct", "keyed": "one hot key", "distinct_keys": "own keys"}[variant]
    print(f"| {function} | {path} | " + " | ".join(cells) + " |")
print()
print("Millions of checks per second, all threads together (criterion's median).")
PY
