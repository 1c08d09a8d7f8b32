#!/usr/bin/env bash
# Stop the podman API service that up.sh started (by its pid file). Keeps images.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
# shellcheck source=lib.sh
. "$here/lib.sh"
if [ -f "$BASE/podman.pid" ]; then
    pid="$(cat "$BASE/podman.pid")"
    kill "$pid" 2>/dev/null || true
    for _ in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    rm -f "$BASE/podman.pid" "$SOCK"
fi
