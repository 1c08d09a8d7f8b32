#!/usr/bin/env bash
# Build the Kubernetes test environment's binaries from upstream sources (Go module proxy only)
# into a cache directory keyed by version, outside the repository:
#   ${CALDERA_TESTENV_CACHE:-/var/cache/caldera-testenv}/k8s/<version-key>/bin
#
# usage: build.sh [core|volcano|all]     (default: all)
#   core:    etcd kube-apiserver kube-scheduler kube-controller-manager kubectl kwok kubelet
#   volcano: vc-scheduler vc-controller-manager, plus Volcano's CRDs and scheduler config
# Prints the cache directory on stdout. A second run with everything cached is a no-op.
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=lib.sh
source "$(dirname "$0")/lib.sh"

what=${1:-all}
case $what in
  core) components=("${CORE_COMPONENTS[@]}") ;;
  volcano) components=("${VOLCANO_COMPONENTS[@]}") ;;
  all) components=("${CORE_COMPONENTS[@]}" "${VOLCANO_COMPONENTS[@]}") ;;
  *) die "usage: $0 [core|volcano|all]" ;;
esac
[ -x "$GO" ] || die "Go toolchain not found at $GO (set GO=...)"

dir=$(cache_dir)
mkdir -p "$dir/bin"
# One build at a time per cache (CI and a developer may share this machine).
exec 9>"$CACHE_ROOT/.build.lock"
flock 9

export GOFLAGS=-mod=mod GOTOOLCHAIN=local
ldflags_k8s="-s -w -X k8s.io/component-base/version.gitVersion=$K8S_VERSION"
ldflags_k8s+=" -X k8s.io/component-base/version.gitMajor=$(echo "$K8S_VERSION" | cut -d. -f1 | tr -d v)"
ldflags_k8s+=" -X k8s.io/component-base/version.gitMinor=$(echo "$K8S_VERSION" | cut -d. -f2)"
ldflags_k8s+=" -X k8s.io/component-base/version.gitTreeState=clean"
ldflags_vc="$ldflags_k8s -X volcano.sh/volcano/pkg/version.Version=$VOLCANO_VERSION"

build_one() { # build_one NAME -> builds $dir/bin/NAME
  local name=$1 tmp="$dir/bin/.$1.tmp"
  case $name in
    etcd | kube-* | kubectl | kubelet)
      (cd "$K8S_TESTENV_DIR/kube" &&
        "$GO" build -trimpath -tags providerless -ldflags "$ldflags_k8s" -o "$tmp" "./cmd/$name") ;;
    vc-*)
      local stage
      stage=$(stage_volcano)
      (cd "$stage" && "$GO" build -trimpath -ldflags "$ldflags_vc" -o "$tmp" "./cmd/$name") ;;
    kwok)
      # KWOK's go.mod has no replace directives, so plain `go install` works.
      local gobin
      gobin=$(mktemp -d)
      (cd "$gobin" && GOFLAGS='' GOBIN=$gobin "$GO" install -trimpath \
        -ldflags "-s -w -X sigs.k8s.io/kwok/pkg/consts.Version=$KWOK_VERSION" \
        "sigs.k8s.io/kwok/cmd/kwok@$KWOK_VERSION")
      mv "$gobin/kwok" "$tmp" && rmdir "$gobin" ;;
    *) die "unknown component $name" ;;
  esac
  mv "$tmp" "$dir/bin/$name"
}

# volcano.sh/volcano as the Go module proxy serves it (the module cache's read-only copy).
volcano_src() {
  (cd "$K8S_TESTENV_DIR/volcano" && "$GO" mod download -json "volcano.sh/volcano@$VOLCANO_VERSION" |
    sed -n 's/^\s*"Dir": "\(.*\)",$/\1/p')
}

# Volcano's commands are `package main` inside volcano.sh/volcano, which `go install` cannot
# build (its go.mod has replace directives). Their main.go files are taken from the module
# at build time into a staging copy of testenv/k8s/volcano (go.mod, go.sum), never into the
# repository. Prints the staging module's directory.
stage_volcano() {
  local stage="$dir/volcano-build" src
  if [ ! -f "$stage/.complete" ]; then
    src=$(volcano_src)
    [ -f "$src/cmd/scheduler/main.go" ] || die "volcano.sh/volcano@$VOLCANO_VERSION source not found ($src)"
    rm -rf "$stage" && mkdir -p "$stage/cmd/vc-scheduler" "$stage/cmd/vc-controller-manager"
    cp "$K8S_TESTENV_DIR/volcano/go.mod" "$K8S_TESTENV_DIR/volcano/go.sum" "$stage/"
    cp "$src/cmd/scheduler/main.go" "$stage/cmd/vc-scheduler/main.go"
    cp "$src/cmd/controller-manager/main.go" "$stage/cmd/vc-controller-manager/main.go"
    chmod -R u+w "$stage"
    touch "$stage/.complete"
  fi
  echo "$stage"
}

# Volcano's CRDs and its chart's scheduler configuration come from its module source.
fetch_volcano_files() {
  [ -f "$dir/volcano/.complete" ] && return 0
  local src
  src=$(volcano_src)
  [ -d "$src/config/crd" ] || die "volcano.sh/volcano@$VOLCANO_VERSION source not found ($src)"
  rm -rf "$dir/volcano" && mkdir -p "$dir/volcano/crds"
  cp "$src"/config/crd/volcano/bases/*.yaml "$src"/config/crd/jobflow/bases/*.yaml "$dir/volcano/crds/"
  cp "$src/installer/helm/chart/volcano/config/volcano-scheduler.conf" "$dir/volcano/"
  chmod -R u+w "$dir/volcano"
  touch "$dir/volcano/.complete"
}

total_start=$(now_ms)
built=0
for c in "${components[@]}"; do
  [ -x "$dir/bin/$c" ] && continue
  log "building $c (cold builds of the kube and volcano modules take many minutes on 2 cores)"
  s=$(now_ms)
  build_one "$c"
  t=$(elapsed "$s")
  built=$((built + 1))
  log "built $c in $t"
  echo "$(date -u +%FT%TZ) $c $t" >>"$dir/build-times.txt"
done
if [ "$what" != core ]; then fetch_volcano_files; fi

if [ "$built" -gt 0 ]; then
  modcache=$(du -sh "$("$GO" env GOMODCACHE)" 2>/dev/null | cut -f1)
  buildcache=$(du -sh "$("$GO" env GOCACHE)" 2>/dev/null | cut -f1)
  log "built $built component(s) in $(elapsed "$total_start"); module cache $modcache, build cache $buildcache"
  echo "$(date -u +%FT%TZ) total($what) $(elapsed "$total_start") modcache=$modcache gocache=$buildcache" >>"$dir/build-times.txt"
else
  log "all of '$what' cached in $dir"
fi
echo "$dir"
