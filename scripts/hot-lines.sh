#!/usr/bin/env bash
# The HTTP layer's hot code lines per request (see scripts/hot_lines.py):
# both servers of axum_load's TOGETHER setup run under callgrind, once
# with anonymous requests (one rule) and once with signed-in ones (two
# rules all or nothing), and each server thread's 64-byte lines of code
# on the request's path are counted. Deterministic where the saturation
# figures drift: a change that removes hot lines from the layer's path
# is what moved those figures.
#
#   scripts/hot-lines.sh                 # this checkout's build, the example's layer (`outer`)
#   scripts/hot-lines.sh path/to/axum_load CONTROL   # another build, another control
#
# CONTROL: a control that runs a layer of its own (`outer`, `layer`,
# `idle`, `per-ip`, `outer-per-ip`, `tower-governor`,
# `outer-tower-governor`); the layered server thread is told from the
# bare one by the layer's functions. Needs valgrind (apt-get install
# valgrind). About a minute per kind of request.
#
# MEASURE=icache in the environment measures the simulated L1
# instruction-cache misses per request instead (callgrind's cache
# simulation; scripts/icache_misses.py), as scripts/icache-misses.sh does.
set -euo pipefail
command -v valgrind >/dev/null || { echo "valgrind is missing (apt-get install valgrind)" >&2; exit 1; }
bin=""
if [ -n "${1:-}" ]; then
  bin=$(realpath -- "$1")
fi
control="${2:-outer}"
cd "$(dirname "$0")/.."
if [ -z "$bin" ]; then
  cargo build --release --example axum_load --features axum
  bin=target/release/examples/axum_load
fi
case "$control" in
  *tower-governor) layer=governor ;;
  *) layer=rategate ;;
esac
case "${MEASURE:-lines}" in
  lines) options=(--dump-instr=yes --compress-pos=no) ;;
  icache) options=(--cache-sim=yes --branch-sim=yes --compress-pos=no) ;;
  *) echo "MEASURE=$MEASURE: lines or icache" >&2; exit 1 ;;
esac
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
for kind in 0 1; do
  label=$([ "$kind" = 0 ] && echo "one rule (anonymous)" || echo "two rules (signed-in)")
  # The example's exit status under valgrind is not the measure's: the
  # round's line is.
  TOGETHER=1 TOGETHER_KIND=$kind SERVER_WORKERS=1 CLIENT=raw \
    valgrind --tool=callgrind "${options[@]}" --compress-strings=no \
    --separate-threads=yes --callgrind-out-file="$dir/k$kind" \
    "$bin" 6 32 1 default 200 "$control" >"$dir/out$kind" 2>/dev/null || true
  out=$(grep '^round 1:' "$dir/out$kind") || { echo "no round in the output: $(cat "$dir/out$kind")" >&2; exit 1; }
  # "round 1: one rule B/L requests/s (BARE/LAYERED requests), ..."
  counts=$(echo "$out" | sed -E 's/.*\(([0-9]+)\/([0-9]+) requests\).*/\1 \2/')
  read -r bare layered <<<"$counts"
  echo "== $label, control $control: $bare bare and $layered layered requests under callgrind"
  if [ "${MEASURE:-lines}" = icache ]; then
    python3 scripts/icache_misses.py "$dir/k$kind" "$bare" "$layered" "$layer"
  else
    python3 scripts/hot_lines.py "$dir/k$kind" "$bare" "$layered" "$layer"
  fi
done
