#!/usr/bin/env bash
# The main job: a local tenantplane playground (host + tenant API servers, the
# controller in the foreground, every decision printed). Ctrl-C stops everything.
# Extra arguments go to `tenantplane up` (for example --exit-when-synced).
set -euo pipefail
cd "$(dirname "$0")/.."
KUBEBUILDER_ASSETS="$(scripts/test-apiserver.sh)"
export KUBEBUILDER_ASSETS
cargo build --release -q -p tenantplane
exec target/release/tenantplane up "$@"
