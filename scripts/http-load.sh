#!/usr/bin/env bash
# The HTTP layer's load figures as the README's "HTTP servers" section
# reports them, in the two setups that resolve them on a 2-vCPU machine:
#
# * saturation: the servers on vCPU 0 (one tokio worker each), the raw
#   load generator on vCPU 1, so the server's core is the one that
#   saturates; throughput and server CPU per request, layered against
#   bare, as the median of each round's paired ratio;
# * unloaded: every thread on vCPU 0 (no wakeup of an idle vCPU per
#   request); p50 / p99 / p99.9, the two servers taking turns.
#
# Each setup runs an A/A control (`bare`) first, then each CONTROL given
# (default: `layer`): compare a control with the A/A of the same run only.
#
#   scripts/http-load.sh [CONTROL...]      # e.g. scripts/http-load.sh layer outer per-ip
#
# ROUNDS (default 8) and UNLOADED (default 20000) in the environment
# change the rounds and the unloaded requests per round. Loopback only,
# bounded: about 2 minutes per control.
#
# RUNS=N (N > 1) runs the saturation setup only, N times per control,
# the controls taking turns (bare, CONTROL..., bare, ...), and prints each
# run's median paired throughput ratios, then the median over the runs:
# a run's median moves by a few points from run to run (each run starts
# its servers afresh), which a single run cannot show. About 70 s per
# control per run.
#
# TOGETHER=1 (with RUNS) loads both servers at once, sharing the server's
# core, and compares each one's CPU per request over the same interval:
# what slows the machine slows both alike, so a run's median moves by
# well under a point (the A/A control's rounds read within +-0.9%),
# where the alternating phases' move by several. About 40 s per control
# per run.
#
#   TOGETHER=1 RUNS=3 scripts/http-load.sh outer outer-per-ip outer-tower-governor
#
# BASELINE=path/to/another/axum_load (with RUNS) also runs that build
# (another commit's `target/release/examples/axum_load`) for each
# control, right after this build's run of it, and prints its medians as
# CONTROL@baseline: two versions of the layer compared in the same runs,
# which the drift between sessions (and within one) otherwise hides.
#
#   git worktree add /tmp/old OLD && (cd /tmp/old && cargo build --release --example axum_load --features axum)
#   RUNS=4 BASELINE=/tmp/old/target/release/examples/axum_load scripts/http-load.sh outer
set -euo pipefail
# BASELINE as the caller wrote it, resolved before the `cd` below.
baseline=""
if [ -n "${BASELINE:-}" ]; then
  if [ ! -f "$BASELINE" ] || [ ! -x "$BASELINE" ]; then
    echo "BASELINE=$BASELINE is not an executable" >&2
    exit 1
  fi
  baseline=$(realpath -- "$BASELINE")
fi
cd "$(dirname "$0")/.."

rounds="${ROUNDS:-8}"
unloaded="${UNLOADED:-20000}"
controls=("$@")
[ ${#controls[@]} -gt 0 ] || controls=(layer)

cargo build --release --example axum_load --features axum
bin=target/release/examples/axum_load

runs="${RUNS:-1}"
# TOGETHER=1 (with RUNS): each run loads both servers at once on the
# server's core (`axum_load`'s TOGETHER mode) instead of in alternating
# phases: each server's CPU per request over the same interval.
together="${TOGETHER:-0}"
# The line a run's medians are read from: each build must print the same
# kind, or two setups would be compared.
summary=Median
[ "$together" = 1 ] && summary=Together
if [ -n "$baseline" ] && [ "$runs" -le 1 ]; then
  echo "BASELINE needs RUNS=N with N > 1" >&2
  exit 1
fi
if [ "$runs" -gt 1 ]; then
  results=$(mktemp)
  trap 'rm -f "$results"' EXIT
  labels=(bare "${controls[@]}")
  for run in $(seq 1 "$runs"); do
    for control in bare "${controls[@]}"; do
      builds=("$bin")
      names=("$control")
      # The A/A control is the harness's, not the layer's: run once.
      if [ -n "$baseline" ] && [ "$control" != bare ]; then
        builds+=("$baseline")
        names+=("$control@baseline")
      fi
      for i in "${!builds[@]}"; do
        build=${builds[$i]}
        label=${names[$i]}
        line=$(SATURATION_ONLY=1 TOGETHER="$together" PIN=0,1 CLIENT=raw SERVER_WORKERS=1 \
          "$build" 2 32 "$rounds" default 200 "$control" | grep -E "^$summary") || {
          echo "run $run, $label: the harness printed no $summary line (a BASELINE built before TOGETHER existed?)" >&2
          exit 1
        }
        one=$(sed -nE 's/.*throughput one rule ([-+]?[0-9.]+)%.*/\1/p' <<<"$line")
        two=$(sed -nE 's/.*, two rules ([-+]?[0-9.]+)%(; server.*)?$/\1/p' <<<"$line")
        if [ -z "$one" ] || [ -z "$two" ]; then
          echo "run $run, $label: no ratios in: $line" >&2
          exit 1
        fi
        echo "saturation, run $run, $label: throughput one rule $one%, two rules $two%"
        echo "$label $one $two" >>"$results"
      done
    done
  done
  if [ -n "$baseline" ]; then
    for control in "${controls[@]}"; do labels+=("$control@baseline"); done
  fi
  median() { sort -g | awk '{v[NR] = $1} END {print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2}'; }
  for control in "${labels[@]}"; do
    one=$(awk -v c="$control" '$1 == c {print $2}' "$results" | median)
    two=$(awk -v c="$control" '$1 == c {print $3}' "$results" | median)
    echo "== $control, median over $runs runs: throughput one rule $one%, two rules $two%"
  done
  exit 0
fi

for control in bare "${controls[@]}"; do
  echo "== saturation, $control ($rounds rounds of 2 s)"
  PIN=0,1 CLIENT=raw SERVER_WORKERS=1 "$bin" 2 32 "$rounds" default 200 "$control" \
    | grep -E '^(Median|Server CPU|Keys held)'
done
for control in bare "${controls[@]}"; do
  echo "== unloaded, $control ($rounds rounds of $unloaded requests to each server)"
  PIN=0,0 SERVER_WORKERS=1 "$bin" 1 32 "$rounds" default "$unloaded" "$control" \
    | grep -E '^Unloaded, '
done
