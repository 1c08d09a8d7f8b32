# shellcheck shell=bash disable=SC2034  # sourced: the variables are used by the scripts
# Shared settings for build.sh, up.sh and down.sh (sourced, not executed).
# Versions are pinned here; see NOTES.md for why these.

K8S_VERSION=v1.30.14       # k8s.io/kubernetes (kube-apiserver, kube-scheduler, kube-controller-manager)
ETCD_VERSION=v3.5.10       # go.etcd.io/etcd/server/v3, the version k8s.io/kubernetes v1.30.14 pins
KWOK_VERSION=v0.6.1        # sigs.k8s.io/kwok, built against k8s.io/* v0.30.4
VOLCANO_VERSION=v1.10.0    # volcano.sh/volcano, built against k8s.io/kubernetes v1.30.2

K8S_TESTENV_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
GO=${GO:-/usr/local/go/bin/go}
CACHE_ROOT=${CALDERA_TESTENV_CACHE:-/var/cache/caldera-testenv}/k8s
BASE=${CALDERA_K8S_BASE:-/tmp/caldera-k8s}

# Loopback ports (override with the environment when two environments must coexist).
API_PORT=${CALDERA_K8S_API_PORT:-16443}
ETCD_PORT=${CALDERA_K8S_ETCD_PORT:-12379}
ETCD_PEER_PORT=$((ETCD_PORT + 1))
SCHED_PORT=${CALDERA_K8S_SCHED_PORT:-16459}
KCM_PORT=${CALDERA_K8S_KCM_PORT:-16457}
VC_SCHED_HEALTHZ_PORT=${CALDERA_K8S_VC_SCHED_PORT:-16251}
VC_CM_HEALTHZ_PORT=${CALDERA_K8S_VC_CM_PORT:-16252}

CORE_COMPONENTS=(etcd kube-apiserver kube-scheduler kube-controller-manager kubectl kwok kubelet)
VOLCANO_COMPONENTS=(vc-scheduler vc-controller-manager)

# The cache key names every pinned version plus a hash of what the binaries are built from
# (our go.mod/go.sum/wrapper sources and the Go toolchain), so any change builds afresh
# into a new directory and an unchanged tree reuses the old one.
version_key() {
  local goversion hash
  goversion=$("$GO" env GOVERSION)
  hash=$(
    cd "$K8S_TESTENV_DIR" &&
      { echo "$goversion $K8S_VERSION $ETCD_VERSION $KWOK_VERSION $VOLCANO_VERSION $BUILD_FLAGS_ID";
        find kube volcano -type f \( -name go.mod -o -name go.sum -o -name '*.go' \) -print0 |
          sort -z | xargs -0 sha256sum; } | sha256sum | cut -c1-10
  )
  echo "k8s-${K8S_VERSION}_vc-${VOLCANO_VERSION}_kwok-${KWOK_VERSION}_${goversion}_${hash}"
}

# Bump when build.sh changes how binaries are built (flags, tags), to force a rebuild.
BUILD_FLAGS_ID="trimpath,s,w,providerless,1"

cache_dir() { echo "$CACHE_ROOT/$(version_key)"; }

log() { printf '[%s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }

# now_ms: wall clock in milliseconds, for step timings.
now_ms() { date +%s%3N; }
elapsed() { # elapsed START_MS -> "1.23s"
  local d=$(($(now_ms) - $1))
  printf '%d.%02ds' $((d / 1000)) $((d % 1000 / 10))
}
