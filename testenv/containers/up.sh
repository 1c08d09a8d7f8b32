#!/usr/bin/env bash
# Start Podman's Docker-compatible API on a Unix socket (idempotent) and build the local test
# image. Prints the socket's path on the last line; use it as DOCKER_HOST=unix://PATH or
# CALDERA_DOCKER_HOST=unix://PATH. Needs root (rootful podman) and install.sh first.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
# shellcheck source=lib.sh
. "$here/lib.sh"
command -v podman >/dev/null || { echo "up.sh: podman is not installed; run testenv/containers/install.sh" >&2; exit 1; }
mkdir -p "$BASE/log"
exec 9>"$BASE/up.lock"
flock 9

if ! ping_socket; then
    write_containers_conf
    if [ -f "$BASE/podman.pid" ] && kill -0 "$(cat "$BASE/podman.pid")" 2>/dev/null; then
        kill "$(cat "$BASE/podman.pid")" || true
        sleep 0.5
    fi
    rm -f "$SOCK"
    # from its own directory: conmon writes an `oom` marker into its working directory when
    # the kernel kills a container, which must not land in the caller's checkout
    (cd "$BASE" && exec setsid podman system service --time=0 "unix://$SOCK" \
        </dev/null >>"$BASE/log/podman.log" 2>&1 9>&-) &
    echo $! >"$BASE/podman.pid"
    for _ in $(seq 1 100); do
        ping_socket && break
        sleep 0.1
    done
    ping_socket || { echo "up.sh: podman API did not answer on $SOCK" >&2; tail -20 "$BASE/log/podman.log" >&2; exit 1; }
    chmod 0666 "$SOCK" 2>/dev/null || true
fi
"$here/build-image.sh" >/dev/null
echo "$SOCK"
