#!/usr/bin/env bash
# The HTTP layer's simulated L1 instruction-cache misses per request (see
# scripts/icache_misses.py): scripts/hot-lines.sh with MEASURE=icache.
# Both servers of axum_load's TOGETHER setup run under callgrind's cache
# simulation, once with anonymous requests (one rule) and once with
# signed-in ones (two rules all or nothing). Deterministic where the
# saturation figures drift (two runs agree within about 15 misses), and
# closer to them than the hot lines: compare a change, or two controls,
# by their misses over bare.
#
#   scripts/icache-misses.sh                 # this checkout's build, the example's layer (`outer`)
#   scripts/icache-misses.sh path/to/axum_load CONTROL   # another build, another control
#
# Needs valgrind (apt-get install valgrind). About two minutes per kind
# of request.
MEASURE=icache exec "$(dirname "$0")/hot-lines.sh" "$@"
