#!/usr/bin/env bash
# Regenerates deploy/crds/ from the Rust types after an API change.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo run -q -p tenantplane -- crds > deploy/crds/tenantplane.io.yaml
echo "wrote deploy/crds/tenantplane.io.yaml"
