#!/usr/bin/env bash
# The sync engine benchmark (not a test): provides the test API server binaries as
# scripts/test.sh does, then runs `tenantplane-bench sync` in release mode.
# Arguments go to the benchmark, e.g. scripts/bench.sh --objects 2000 --workers 16 --updates 200,
# or scripts/bench.sh pods --pods 500 --workers 16, or scripts/bench.sh dns --services 1000,
# or scripts/bench.sh scale --tenant-clusters 1000 --objects 10
set -euo pipefail
cd "$(dirname "$0")/.."

KUBEBUILDER_ASSETS="$(scripts/test-apiserver.sh)"
export KUBEBUILDER_ASSETS
echo "KUBEBUILDER_ASSETS=$KUBEBUILDER_ASSETS" >&2

# `scripts/bench.sh pods --pods 500` runs the Pod benchmark; anything else is `sync`.
# The controller runs as its own process, the release binary a user runs
# (`--in-process` runs the engine inside the benchmark instead, for comparison).
cargo build --release --locked -p tenantplane
case "${1:-}" in
  sync|pods|dns|scale) cargo run --release --locked -p tenantplane-bench -- "$@" ;;
  *) cargo run --release --locked -p tenantplane-bench -- sync "$@" ;;
esac
