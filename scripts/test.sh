#!/usr/bin/env bash
# The README's test command: installs what the tests need when it is
# missing, then runs the whole suite. `.ci/run` calls exactly this script.
#
#   scripts/test.sh            # cargo test --all-features
#   scripts/test.sh -- --nocapture   (extra arguments go to cargo test)
set -euo pipefail
cd "$(dirname "$0")/.."

# The redis feature's tests start real redis-server processes and a
# Redis Cluster (redis-cli --cluster create) and Sentinel setups
# (redis-sentinel); redis-benchmark measures the
# throughput example's ceiling; openssl makes the TLS tests' certificates.
if ! command -v redis-server >/dev/null || ! command -v redis-cli >/dev/null \
    || ! command -v redis-benchmark >/dev/null || ! command -v redis-sentinel >/dev/null \
    || ! command -v openssl >/dev/null; then
  SUDO=""
  if [ "$(id -u)" -ne 0 ]; then
    if command -v sudo >/dev/null; then
      SUDO="sudo"
    else
      echo "scripts/test.sh: redis-server, redis-tools, redis-sentinel or openssl is missing, and installing them needs root or sudo" >&2
      exit 1
    fi
  fi
  echo "==> installing redis-server, redis-tools and redis-sentinel (apt-get)"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq redis-server redis-tools redis-sentinel openssl
fi

cargo test --all-features "$@"
