#!/usr/bin/env bash
# Runs the criterion suites (benches/{limits,direct,keyed,contention,clock}.rs)
# and prints a markdown table: each rategate benchmark, its median time, the
# median of governor's benchmark in the same group and variant, and the ratio
# (rategate / governor: below 1 means rategate is faster); then the physical
# limits measured in the same run (a clock read, a compare-exchange, a miss
# to memory) and each token-bucket path's distance from its floor.
#
# Usage:
#   scripts/bench-table.sh                  # run all suites, print the table
#   scripts/bench-table.sh --no-run         # the table of the last run
#   scripts/bench-table.sh [criterion args] # e.g. --measurement-time 5
#   BENCHES="direct clock" scripts/bench-table.sh
#
# Criterion writes to $BENCH_TABLE_DIR (as its CRITERION_HOME), by default
# target/bench-table, which a run empties first: the table shows this run's results only, never those
# of an earlier run or of another `cargo bench` writing target/criterion at
# the same time. Per-benchmark notes (benchmarks left out because a trial
# run was denied) go to stderr with criterion's own output. Needs cargo and
# python3.
set -euo pipefail

cd "$(dirname "$0")/.."
benches=${BENCHES:-"limits direct keyed contention clock"}
dir=${BENCH_TABLE_DIR:-$PWD/${CARGO_TARGET_DIR:-target}/bench-table}
export CRITERION_HOME=$dir

if [[ "${1:-}" == "--no-run" ]]; then
    shift
else
    rm -rf "$dir"
    for bench in $benches; do
        echo "== cargo bench --bench $bench" >&2
        cargo bench --bench "$bench" -- "$@" >&2
    done
fi

python3 - "$dir" <<'PY'
import json, os, sys

root = sys.argv[1]
GROUP_ORDER = ["physical_limit", "direct_allow", "direct_deny", "keyed_hit", "keyed_insert",
               "contended_2_threads", "clock_now", "clock_now_2_threads"]
ALGO_ORDER = ["token_bucket", "fixed_window", "sliding_window_counter",
              "sliding_window_log", "leaky_bucket"]

results = {}  # (group, function, variant) -> median ns
for dirpath, _, files in os.walk(root):
    if os.path.basename(dirpath) != "new" or "estimates.json" not in files:
        continue
    estimates = os.path.join(dirpath, "estimates.json")
    with open(os.path.join(dirpath, "benchmark.json")) as f:
        meta = json.load(f)
    with open(estimates) as f:
        median = json.load(f)["median"]["point_estimate"]
    key = (meta["group_id"], meta.get("function_id") or "", meta.get("value_str") or "")
    results[key] = median

def fmt(ns):
    if ns is None:
        return "-"
    if ns >= 1e6:
        return f"{ns / 1e6:.2f} ms"
    if ns >= 1e3:
        return f"{ns / 1e3:.2f} µs"
    return f"{ns:.1f} ns"

def order(key):
    group, function, variant = key
    g = GROUP_ORDER.index(group) if group in GROUP_ORDER else len(GROUP_ORDER)
    a = ALGO_ORDER.index(function) if function in ALGO_ORDER else len(ALGO_ORDER)
    return (g, group, variant, a, function)

print("| benchmark | rategate median | governor median | ratio (rategate/governor) |")
print("|---|---:|---:|---:|")
for key in sorted(results, key=order):
    group, function, variant = key
    if function == "governor" or group == "physical_limit":
        continue
    ours = results[key]
    theirs = results.get((group, "governor", variant))
    ratio = f"{ours / theirs:.2f}" if theirs else "-"
    print(f"| {group}/{function}/{variant} | {fmt(ours)} | {fmt(theirs)} | {ratio} |")

limits = {f: ns for (g, f, v), ns in results.items() if g == "physical_limit"}
if limits:
    print()
    print("| physical limit on this machine | median |")
    print("|---|---:|")
    names = {
        "clock": "clock read (TSC via quanta, scaled)",
        "cas": "uncontended compare-exchange",
        "clock_cas": "clock read + compare-exchange (direct check floor)",
        "dram": "one dependent miss to memory (256 MiB pointer chase)",
        "clock_dram_cas": "clock + one miss + compare-exchange (keyed floor, key not cached)",
    }
    for f in ["clock", "cas", "clock_cas", "dram", "clock_dram_cas"]:
        if f in limits:
            print(f"| {names[f]} | {fmt(limits[f])} |")
    floors = [
        ("direct_allow", "token_bucket", "quanta", "clock_cas"),
        ("direct_deny", "token_bucket", "quanta", "clock"),
        ("keyed_hit", "token_bucket", "1k_keys", "clock_cas"),
        ("keyed_hit", "token_bucket", "1M_keys", "clock_dram_cas"),
    ]
    print()
    print("| token-bucket path | rategate | its floor | rategate / floor | governor / floor |")
    print("|---|---:|---:|---:|---:|")
    for group, function, variant, floor in floors:
        ours = results.get((group, function, variant))
        theirs = results.get((group, "governor", variant))
        base = limits.get(floor)
        if ours is None or base is None:
            continue
        gov = f"{theirs / base:.2f}" if theirs else "-"
        print(f"| {group}/{variant} | {fmt(ours)} | {floor}: {fmt(base)} | {ours / base:.2f} | {gov} |")
PY
