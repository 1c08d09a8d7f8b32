#!/usr/bin/env bash
# Stop the kubelet nodes started by up.sh and remove everything they made: containers (via
# each node's containerd), containerd, the kubelets, the API forwarders, mounts under the
# state directory, cgroups, network namespaces, the bridge and its routes, the Node objects
# and service accounts (when the control plane still answers), and the state directory.
#
# usage: down.sh [--keep-logs]     (logs are copied to $KB.logs before the state is removed)
#
# Idempotent. Only processes named by our pid files (and containerd shims serving our own
# containerd sockets) are signalled.
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=lib.sh
source "$(dirname "$0")/lib.sh"

keep_logs=0
case ${1:-} in
  --keep-logs) keep_logs=1 ;;
  "") ;;
  *) die "usage: $0 [--keep-logs]" ;;
esac
[ "$(id -u)" = 0 ] || die "needs root"
start=$(now_ms)
mkdir -p "$KB/run"
exec 8>"$KB/.lock"
flock 8

stop_pids() { # stop_pids PIDFILE:COMM...: SIGTERM together, SIGKILL after 10 s
  local k f comm p pids=() i
  for k in "$@"; do
    f=${k%:*} comm=${k##*:}
    if pid_ok "$f" "$comm"; then
      p=$(cat "$f")
      kill -TERM "$p" 2>/dev/null || true
      pids+=("$p")
    fi
    rm -f "$f"
  done
  [ ${#pids[@]} -gt 0 ] || return 0
  for ((i = 0; i < 50; i++)); do
    local left=0
    for p in "${pids[@]}"; do alive "$p" && left=1; done
    [ $left = 0 ] && return 0
    sleep 0.2
  done
  for p in "${pids[@]}"; do alive "$p" && kill -KILL "$p" 2>/dev/null; done
  return 0
}

# node indexes that have state (up.sh may have run with another --nodes)
mapfile -t dirs < <(find "$KB" -mindepth 1 -maxdepth 1 -type d -name 'kubelet-node-*' 2>/dev/null | sort)
idx=()
for d in "${dirs[@]}"; do idx+=("$((10#${d##*-}))"); done

# 1. kubelets and device plugins (so nothing restarts containers), 2. every container,
# 3. containerd
kl=()
for i in "${idx[@]}"; do kl+=("$(node_dir "$i")/kubelet.pid:kubelet" "$(node_dir "$i")/device-plugin.pid:python3"); done
[ ${#kl[@]} -eq 0 ] || stop_pids "${kl[@]}"
for i in "${idx[@]}"; do
  d=$(node_dir "$i")
  sock=$d/containerd/containerd.sock
  if [ -S "$sock" ] && pid_ok "$d/containerd.pid" containerd; then
    for t in $(ctr -a "$sock" -n k8s.io tasks ls -q 2>/dev/null); do
      ctr -a "$sock" -n k8s.io tasks kill -s SIGKILL "$t" >/dev/null 2>&1 || true
    done
    for t in $(ctr -a "$sock" -n k8s.io tasks ls -q 2>/dev/null); do
      for _ in 1 2 3 4 5 6 7 8 9 10; do
        ctr -a "$sock" -n k8s.io tasks delete "$t" >/dev/null 2>&1 && break
        sleep 0.2
      done
    done
    for c in $(ctr -a "$sock" -n k8s.io containers ls -q 2>/dev/null); do
      ctr -a "$sock" -n k8s.io containers delete "$c" >/dev/null 2>&1 || true
    done
  fi
  stop_pids "$d/containerd.pid:containerd"
  # shims of this containerd that outlived it (they serve our socket: -address <sock>)
  for p in $(pgrep -f "^/usr/bin/containerd-shim-runc-v2 .*-address $sock( |$)" 2>/dev/null); do
    kill -KILL "$p" 2>/dev/null || true
  done
done
fw=("$KB/run/api-forward.pid:socat")
for i in "${idx[@]}"; do fw+=("$KB/run/api-forward-$i.pid:socat"); done
for ((i = 1; i <= 9; i++)); do [ -f "$KB/run/api-forward-$i.pid" ] && fw+=("$KB/run/api-forward-$i.pid:socat"); done
stop_pids "${fw[@]}"

# mounts left under the state directory (pod volumes, overlay snapshots, pod netns), deepest first
for _ in 1 2 3; do
  mapfile -t mnts < <(awk -v b="$KB/" 'index($5, b) == 1 {print $5}' /proc/self/mountinfo | sort -r)
  [ ${#mnts[@]} -eq 0 ] && break
  for m in "${mnts[@]}"; do umount "$m" 2>/dev/null || umount -l "$m" 2>/dev/null || true; done
done

# $KB itself (up.sh bind-mounts it onto itself to make it shared)
while awk -v b="$KB" '$5 == b {found = 1} END {exit !found}' /proc/self/mountinfo; do
  umount "$KB" 2>/dev/null || umount -l "$KB" || break
done

# cgroups of the nodes (cgroupRoot /<prefix>-kubelet-node-NN), deepest first
for c in /sys/fs/cgroup/*/"$PREFIX"-kubelet-node-*; do
  [ -d "$c" ] || continue
  find "$c" -depth -type d -exec rmdir {} + 2>/dev/null || true
done

# network
for ((i = 1; i <= 9; i++)); do
  ip route del "$(pod_cidr "$i")" 2>/dev/null || true
  ip link del "$PREFIX-v$i" 2>/dev/null || true
  ip netns del "$(netns_of "$i")" 2>/dev/null || true
done
ip link del "$BRIDGE" 2>/dev/null || true
while iptables -D FORWARD -i "$BRIDGE" -o "$BRIDGE" -j ACCEPT 2>/dev/null; do :; done

# API objects, when the control plane still answers
if [ -f "$BASE/env.json" ] && [ -x "$(cache_dir)/bin/kubectl" ]; then
  KUBECTL=("$(cache_dir)/bin/kubectl" --kubeconfig "$BASE/kubeconfig/admin.kubeconfig" --request-timeout=5s)
  for i in "${idx[@]}"; do
    n=$(node_name "$i")
    "${KUBECTL[@]}" delete node "$n" --ignore-not-found --wait=false >/dev/null 2>&1 || true
    "${KUBECTL[@]}" -n kube-system delete serviceaccount "$n" --ignore-not-found >/dev/null 2>&1 || true
    "${KUBECTL[@]}" delete clusterrolebinding "caldera:kubelet:$n" --ignore-not-found >/dev/null 2>&1 || true
  done
fi

if [ "$keep_logs" = 1 ] && [ -d "$KB/logs" ]; then
  rm -rf "$KB.logs" && cp -r "$KB/logs" "$KB.logs"
fi
find "$KB" -mindepth 1 -maxdepth 1 ! -name .lock -exec rm -rf --one-file-system {} +
rm -f "$KB/.lock"
rmdir "$KB" 2>/dev/null || true
log "kubelet nodes down in $(elapsed "$start")"
