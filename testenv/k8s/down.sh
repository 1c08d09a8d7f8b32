#!/usr/bin/env bash
# Stop the Kubernetes test environment started by up.sh, by pid file, and delete its state.
#
# usage: down.sh [--keep]     --keep: stop the processes but keep $BASE (logs, etcd data)
#
# Idempotent: with nothing running it only cleans up. Only processes named in our pid files
# whose executable is the component they claim to be are signalled.
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=lib.sh
source "$(dirname "$0")/lib.sh"

keep=0
case ${1:-} in
  --keep) keep=1 ;;
  "") ;;
  *) die "usage: $0 [--keep]" ;;
esac
[ -d "$BASE" ] || { log "nothing to stop ($BASE does not exist)"; exit 0; }
exec 8>"$BASE/.lock"
flock 8

start=$(now_ms)
alive() { # alive PID: running and not a zombie
  local state
  state=$(awk '{print $3}' "/proc/$1/stat" 2>/dev/null) || return 1
  [ -n "$state" ] && [ "$state" != Z ]
}
any_alive() { local p; for p in "$@"; do alive "$p" && return 0; done; return 1; }
stop_group() { # stop_group NAME...: SIGTERM them together, wait up to 15 s, then SIGKILL
  local name pid pids=() names=() i
  for name in "$@"; do
    pid=$(cat "$BASE/run/$name.pid" 2>/dev/null || true)
    rm -f "$BASE/run/$name.pid"
    # Only signal a live process whose executable is the component the pid file names.
    if [ -z "$pid" ] || [ "$(basename "$(readlink "/proc/$pid/exe" 2>/dev/null)")" != "$name" ]; then
      continue
    fi
    kill -TERM "$pid" 2>/dev/null || true
    pids+=("$pid")
    names+=("$name($pid)")
  done
  [ ${#pids[@]} -gt 0 ] || return 0
  for ((i = 0; i < 75; i++)); do
    any_alive "${pids[@]}" || break
    sleep 0.2
  done
  for pid in "${pids[@]}"; do
    if alive "$pid"; then
      log "pid $pid ignored SIGTERM for 15s; killing"
      kill -KILL "$pid" 2>/dev/null || true
    fi
  done
  log "stopped ${names[*]}"
}

# Clients first, then the API server, etcd last.
stop_group vc-controller-manager vc-scheduler kwok kube-controller-manager kube-scheduler
stop_group kube-apiserver
stop_group etcd
if [ "$keep" = 1 ]; then
  rm -f "$BASE/env.json"
  log "stopped in $(elapsed "$start"); state kept in $BASE"
else
  # Remove everything but the lock we hold, then the lock itself.
  find "$BASE" -mindepth 1 -maxdepth 1 ! -name .lock -exec rm -rf {} +
  rm -f "$BASE/.lock"
  rmdir "$BASE" 2>/dev/null || true
  log "stopped in $(elapsed "$start"); removed $BASE"
fi
