#!/usr/bin/env bash
# Provides what the real test node (tenantplane-testenv's RealNode, `tenantplane up
# --real-node`) needs besides the API server, as ../shared/docs/real-node.md describes:
#
# - Debian packages: containerd, runc, containernetworking-plugins, iptables,
#   nftables (to drop tables the node created), busybox-static (the workload image),
#   gcc + libc6-dev (the static pause binary);
# - kubelet, kube-proxy and kube-scheduler built from the same Kubernetes 1.20.2
#   source tree and Go 1.15 as scripts/test-apiserver.sh (CGO off), and `pause` built
#   static from that tree, cached beside the API server in
#   ${TENANTPLANE_CACHE:-$HOME/.cache/tenantplane}/k8s-1.20.2/bin.
#
# Only what is missing is built: with a warm cache this takes a second. A cold build
# is about 7 minutes on 2 cores and runs under `nice -n 19`, so it does not starve
# whatever else the machine is doing.
#
# Prints progress on stderr and, as its only stdout line, the binaries' directory.
set -euo pipefail

log() { printf '[real-node-assets] %s\n' "$*" >&2; }
trap 'log "failed at line $LINENO (exit $?)"' ERR

CACHE="${TENANTPLANE_CACHE:-$HOME/.cache/tenantplane}"
BIN="$CACHE/k8s-1.20.2/bin"
WORK="$CACHE/k8s-1.20.2/work"
NODE_BINARIES=(kubelet kube-proxy kube-scheduler)

as_root() { if [[ $(id -u) -eq 0 ]]; then "$@"; else sudo "$@"; fi; }

need=()
for pkg in containerd runc containernetworking-plugins iptables nftables busybox-static gcc libc6-dev; do
  dpkg -s "$pkg" >/dev/null 2>&1 || need+=("$pkg")
done
if ((${#need[@]})); then
  log "installing Debian packages: ${need[*]}"
  as_root apt-get update -qq >&2
  DEBIAN_FRONTEND=noninteractive as_root apt-get install -y -qq "${need[@]}" >&2
fi

missing=()
for b in "${NODE_BINARIES[@]}"; do [[ -x "$BIN/$b" ]] || missing+=("cmd/$b"); done
if ((${#missing[@]} == 0)) && [[ -x "$BIN/pause" ]]; then
  log "cached node binaries found in $BIN"
  echo "$BIN"
  exit 0
fi

# The source tree and Go toolchain come from test-apiserver.sh, which keeps them.
if [[ ! -f "$WORK/src/.extracted" || ! -x "$WORK/go/usr/lib/go-1.15/bin/go" ]]; then
  log "no Kubernetes source tree in $WORK: fetching it with scripts/test-apiserver.sh"
  env -u KUBEBUILDER_ASSETS "$(dirname "$0")/test-apiserver.sh" >/dev/null
  [[ -f "$WORK/src/.extracted" ]] || {
    log "$WORK/src is still missing (the API server was cached without its source);"
    log "remove $BIN/kube-apiserver and run scripts/test-apiserver.sh again"
    exit 1
  }
fi

mkdir -p "$BIN" "$WORK/home"
# One build at a time in the shared source tree (two engineers, or test.sh twice).
exec 9>"$WORK/.build.lock"
flock 9

export GOROOT="$WORK/go/usr/lib/go-1.15"
export PATH="$GOROOT/bin:$PATH"
cd "$WORK/src"
mkdir -p .go/src/k8s.io
ln -sfn ../../.. .go/src/k8s.io/kubernetes

if ((${#missing[@]})); then
  started=$SECONDS
  log "building ${missing[*]} (about 7 minutes on 2 cores, nice 19)"
  # test-apiserver.sh's `make` left the generated sources (zz_generated.*) in the
  # tree; `make` would run every code generator again (its bookkeeping went with
  # _output), so build straight from them when they are there.
  if [[ -f pkg/apis/core/v1/zz_generated.conversion.go ]]; then
    build=(hack/make-rules/build.sh "${missing[@]}")
  else
    build=(make WHAT="${missing[*]}")
  fi
  GOPATH="$PWD/.go" CGO_ENABLED=0 HOME="$WORK/home" GO111MODULE=off GOFLAGS= \
    nice -n 19 "${build[@]}" >&2
  for target in "${missing[@]}"; do install -m 0755 "_output/bin/${target#cmd/}" "$BIN/"; done
  # Like test-apiserver.sh: the build tree (with its 1.5 GB Go cache) is not kept.
  rm -rf "$WORK/src/_output" "$WORK/src/.go/pkg"
  log "built ${missing[*]} in $((SECONDS - started))s"
fi

if [[ ! -x "$BIN/pause" ]]; then
  # The sandbox ("infra") container of every Pod: upstream pause.c, static, so its
  # image needs nothing else.
  gcc -Os -static -o "$BIN/pause.tmp" build/pause/linux/pause.c -DVERSION=3.4.1
  strip "$BIN/pause.tmp"
  mv "$BIN/pause.tmp" "$BIN/pause"
fi

log "node binaries in $BIN"
echo "$BIN"
