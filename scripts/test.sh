#!/usr/bin/env bash
# The whole test suite, as CI runs it (.ci/run calls exactly this):
#   1. provide etcd + kube-apiserver + kube-controller-manager (built once, cached),
#      and, as root, the real node's kubelet/kube-proxy/kube-scheduler and packages,
#   2. formatting and lints,
#   3. every test: unit, property, CLI, and integration tests on real API servers,
#      three test binaries at a time (scripts/run-tests.sh).
set -euo pipefail
cd "$(dirname "$0")/.."

step() { printf '\n==> %s\n' "$*"; }

step "test API server binaries"
KUBEBUILDER_ASSETS="$(scripts/test-apiserver.sh)"
export KUBEBUILDER_ASSETS
echo "KUBEBUILDER_ASSETS=$KUBEBUILDER_ASSETS"

step "real node binaries and packages"
# The real-node tests (kubelet, containerd) need root; without it they skip.
if [[ $(id -u) -eq 0 ]]; then
  TENANTPLANE_NODE_ASSETS="$(scripts/real-node-assets.sh)"
  export TENANTPLANE_NODE_ASSETS
  echo "TENANTPLANE_NODE_ASSETS=$TENANTPLANE_NODE_ASSETS"
else
  echo "not root: the real-node tests will skip"
fi
step "dig for the DNS tests"
if ! command -v dig >/dev/null; then
  as_root=(); ((EUID == 0)) || as_root=(sudo)
  "${as_root[@]}" apt-get update -qq
  DEBIAN_FRONTEND=noninteractive "${as_root[@]}" apt-get install -y -qq bind9-dnsutils
fi
dig -v 2>&1

step "cargo fmt --check"
cargo fmt --all --check

step "cargo clippy"
cargo clippy --workspace --all-targets --locked -- -D warnings

step "cargo test (every test binary, several at a time: scripts/run-tests.sh says why)"
scripts/run-tests.sh
