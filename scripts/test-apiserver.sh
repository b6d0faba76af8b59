#!/usr/bin/env bash
# Provides etcd, kube-apiserver and kube-controller-manager for the test suite and
# `tenantplane up`, as ../shared/docs/test-apiserver.md describes.
#
# - When KUBEBUILDER_ASSETS names a directory holding etcd and kube-apiserver, those
#   binaries are used and nothing is built (the envtest convention).
# - Otherwise Kubernetes 1.20.2 is built once from Debian's source package with Go
#   1.15 (Go >= 1.18 builds an apiserver that segfaults on the first CRD) and cached
#   under ${TENANTPLANE_CACHE:-$HOME/.cache/tenantplane}; later runs take seconds.
#
# Prints progress on stderr and, as its only stdout line, the assets directory.
set -euo pipefail

log() { printf '[test-apiserver] %s\n' "$*" >&2; }
trap 'log "failed at line $LINENO (exit $?)"' ERR

if [[ -n "${KUBEBUILDER_ASSETS:-}" ]]; then
  if [[ -x "$KUBEBUILDER_ASSETS/etcd" && -x "$KUBEBUILDER_ASSETS/kube-apiserver" ]]; then
    log "using KUBEBUILDER_ASSETS=$KUBEBUILDER_ASSETS"
    echo "$KUBEBUILDER_ASSETS"
    exit 0
  fi
  log "KUBEBUILDER_ASSETS=$KUBEBUILDER_ASSETS lacks etcd or kube-apiserver; building instead"
fi

K8S_DEB_VERSION="1.20.5+really1.20.2-1.1+deb12u1"
CACHE="${TENANTPLANE_CACHE:-$HOME/.cache/tenantplane}"
ASSETS="$CACHE/k8s-1.20.2/bin"
WORK="$CACHE/k8s-1.20.2/work"

as_root() { if [[ $(id -u) -eq 0 ]]; then "$@"; else sudo "$@"; fi; }

# Debian packages: etcd, rsync (code generation), openssl (service-account keys).
need=()
command -v etcd >/dev/null || need+=(etcd-server)
command -v rsync >/dev/null || need+=(rsync)
command -v openssl >/dev/null || need+=(openssl)
command -v make >/dev/null || need+=(make)
command -v dpkg-source >/dev/null || need+=(dpkg-dev)
if ((${#need[@]})); then
  log "installing Debian packages: ${need[*]}"
  as_root apt-get update -qq >&2
  DEBIAN_FRONTEND=noninteractive as_root apt-get install -y -qq "${need[@]}" >&2
fi

if [[ -x "$ASSETS/kube-apiserver" && -x "$ASSETS/kube-controller-manager" && -x "$ASSETS/etcd" ]]; then
  log "cached build found in $ASSETS"
  echo "$ASSETS"
  exit 0
fi

mkdir -p "$WORK" "$ASSETS"
cd "$WORK"

# Private apt lists, so the system's own lists are untouched. The mirror comes from
# the machine's own sources (the first URIs:/deb line that is not commented out).
mirror=$( { cat /etc/apt/sources.list.d/*.sources /etc/apt/sources.list 2>/dev/null || true; } \
  | grep -E '^\s*(URIs:|deb )' | grep -v security | grep -i debian | head -n1 \
  | sed -E 's/^\s*URIs:\s*//; s/^\s*deb\s+(\[[^]]*\]\s+)?//; s/\s.*$//')
if [[ -z "$mirror" ]]; then
  log "could not find a Debian mirror in /etc/apt sources"; exit 1
fi
log "Debian mirror: $mirror"
keyring=/usr/share/keyrings/debian-archive-keyring.gpg
mkdir -p apt/lists/partial apt/archives/partial
cat > apt/sources.list <<SRC
deb-src [signed-by=$keyring] $mirror bookworm main
deb [signed-by=$keyring] $mirror bullseye main
SRC
APT=(-o Dir::Etc::SourceList="$WORK/apt/sources.list" -o Dir::Etc::SourceParts=/dev/null
     -o Dir::State::Lists="$WORK/apt/lists" -o Dir::Cache::Archives="$WORK/apt/archives"
     -o APT::Sandbox::User=root)
log "apt-get update (private lists)"
apt-get "${APT[@]}" update -qq >&2

if [[ ! -x go/usr/lib/go-1.15/bin/go ]]; then
  log "fetching Go 1.15 from bullseye"
  rm -rf go-debs go && mkdir -p go-debs go
  (cd go-debs && apt-get "${APT[@]}" download golang-1.15-go golang-1.15-src >&2)
  for deb in go-debs/*.deb; do dpkg -x "$deb" go; done
fi
export GOROOT="$WORK/go/usr/lib/go-1.15"
export PATH="$GOROOT/bin:$PATH"
log "$(go version)"

if [[ ! -f src/.extracted ]]; then
  log "fetching and unpacking the kubernetes $K8S_DEB_VERSION source package"
  rm -rf src srcpkg && mkdir -p srcpkg
  (cd srcpkg && apt-get "${APT[@]}" source --download-only "kubernetes=$K8S_DEB_VERSION" >&2)
  dpkg-source -x srcpkg/kubernetes_*.dsc src >&2
  touch src/.extracted
fi

cd src
# One build at a time in the shared source tree (scripts/real-node-assets.sh too).
exec 9>"$WORK/.build.lock"
flock 9
mkdir -p .go/src/k8s.io
ln -sfn ../../.. .go/src/k8s.io/kubernetes
log "building kube-apiserver and kube-controller-manager (about 6 minutes on 2 cores)"
mkdir -p "$WORK/home"
GOPATH="$PWD/.go" CGO_ENABLED=0 HOME="$WORK/home" GO111MODULE=off GOFLAGS= \
  make WHAT="cmd/kube-apiserver cmd/kube-controller-manager" >&2
install -m 0755 _output/bin/kube-apiserver _output/bin/kube-controller-manager "$ASSETS/"
ln -sfn "$(command -v etcd)" "$ASSETS/etcd"
# The build tree is large; the binaries are all later runs need.
rm -rf "$WORK/src/_output" "$WORK/src/.go/pkg"
log "built into $ASSETS"
echo "$ASSETS"
