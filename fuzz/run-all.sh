#!/usr/bin/env bash
# Runs every fuzz target in turn, SECONDS each (see run.sh).
#
#   fuzz/run-all.sh SECONDS [extra libFuzzer args...]
#
# Runs the targets one at a time (each build after the first only links).
# Exits non-zero if any target found a crash; the summary names them.
set -euo pipefail

if [ $# -lt 1 ]; then
    echo "usage: $0 SECONDS [extra libFuzzer args...]" >&2
    exit 2
fi
seconds=$1
shift

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
targets=$(cd "$here/fuzz_targets" && ls ./*.rs | sed 's|^\./||; s/\.rs$//')

failed=()
for target in $targets; do
    if ! "$here/run.sh" "$target" "$seconds" "$@"; then
        failed+=("$target")
    fi
done
if [ ${#failed[@]} -gt 0 ]; then
    echo "fuzzing found crashes in: ${failed[*]} (see fuzz/artifacts/)" >&2
    exit 1
fi
echo "all fuzz targets ran ${seconds}s without a crash" >&2
