#!/usr/bin/env bash
# Builds one fuzz target and runs it for a bounded time.
#
#   fuzz/run.sh TARGET SECONDS [extra libFuzzer args...]
#
# Stable Rust only: the target is built with the flags cargo-fuzz uses for
# `--sanitizer none` (SanitizerCoverage through -Cpasses=sancov-module, no
# -Z flags), in release with debug assertions and overflow checks (see
# Cargo.toml), for the host triple so that build scripts stay
# uninstrumented. libFuzzer itself comes from the libfuzzer-sys crate.
#
# Corpus: new inputs go to fuzz/corpus-run/TARGET (not committed, kept
# between runs); the committed seeds in fuzz/corpus/TARGET are read only.
# Crashes go to fuzz/artifacts/TARGET/. Exits non-zero on a crash, a
# timeout or an out-of-memory input (libFuzzer's exit status).
#
# Environment: FUZZ_RSS_MB (default 2048), FUZZ_MAX_LEN (default 1024),
# FUZZ_TIMEOUT (seconds per input, default 10).
set -euo pipefail

if [ $# -lt 2 ]; then
    echo "usage: $0 TARGET SECONDS [extra libFuzzer args...]" >&2
    exit 2
fi
target=$1
seconds=$2
shift 2

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
if [ ! -f "$here/fuzz_targets/$target.rs" ]; then
    echo "unknown target '$target'; targets: $(cd "$here/fuzz_targets" && ls | sed 's/\.rs$//' | tr '\n' ' ')" >&2
    exit 2
fi

host=$(rustc -vV | sed -n 's/^host: //p')
export CARGO_TARGET_DIR="$here/target"
export RUSTFLAGS="--cfg fuzzing -Cpasses=sancov-module \
-Cllvm-args=-sanitizer-coverage-level=4 \
-Cllvm-args=-sanitizer-coverage-inline-8bit-counters \
-Cllvm-args=-sanitizer-coverage-pc-table \
-Cllvm-args=-sanitizer-coverage-trace-compares"
if [ "${FUZZ_SKIP_BUILD:-}" != 1 ]; then
    cargo build --manifest-path "$here/Cargo.toml" --release --target "$host" --bin "$target"
fi
bin="$CARGO_TARGET_DIR/$host/release/$target"

work="$here/corpus-run/$target"
seeds="$here/corpus/$target"
artifacts="$here/artifacts/$target"
mkdir -p "$work" "$seeds" "$artifacts"
dict=()
if [ -f "$here/dict/$target.dict" ]; then
    dict=("-dict=$here/dict/$target.dict")
fi

echo "fuzzing $target for ${seconds}s (corpus $work + seeds $seeds)" >&2
exec "$bin" "$work" "$seeds" \
    -max_total_time="$seconds" \
    -rss_limit_mb="${FUZZ_RSS_MB:-2048}" \
    -max_len="${FUZZ_MAX_LEN:-1024}" \
    -timeout="${FUZZ_TIMEOUT:-10}" \
    -artifact_prefix="$artifacts/" \
    -print_final_stats=1 \
    "${dict[@]}" \
    "$@"
