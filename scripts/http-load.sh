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
set -euo pipefail
cd "$(dirname "$0")/.."

rounds="${ROUNDS:-8}"
unloaded="${UNLOADED:-20000}"
controls=("$@")
[ ${#controls[@]} -gt 0 ] || controls=(layer)

cargo build --release --example axum_load --features axum
bin=target/release/examples/axum_load

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
