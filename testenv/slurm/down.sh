#!/bin/bash
# Stop the Caldera Slurm test cluster started by up.sh: every daemon by its pid file, then any
# process left in the node namespaces (job steps), then the namespaces and the bridge.
# Safe to re-run and after a crash. State (jobs, accounting DB) stays in $CALDERA_SLURM_BASE
# unless --purge is given. CALDERA_SLURM_CLUSTER=burst stops only the second cluster; the
# caldera cluster's down.sh stops the burst cluster first (it depends on its slurmdbd).
set -uo pipefail
TAG=down
# shellcheck source-path=SCRIPTDIR source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
# One up/down at a time per machine: re-exec under flock (-o: daemons do not inherit the lock).
if [ -z "${CALDERA_SLURM_LOCKED:-}" ]; then
  exec env CALDERA_SLURM_LOCKED=1 flock -o -w 600 "$B.lock" bash "$0" "$@"
fi
PURGE=0; [ "${1:-}" = --purge ] && PURGE=1
[ "$(id -u)" = 0 ] || die "must run as root"
T0=$(now)
if [ "$PRIMARY" = 1 ] && [ -d "$BURST_BASE" ]; then
  env -u CALDERA_SLURM_LOCKED CALDERA_SLURM_CLUSTER=burst CALDERA_SLURM_BASE="$BURST_BASE" \
    bash "$HERE/down.sh" "$@" | sed 's/^\[down\]/[down burst]/'
fi

s=$(now)
if alive "$RUN/slurmctld.pid" slurmctld; then   # let running jobs end cleanly
  mapfile -t ids < <(squeue -h -t PD,R,CG,S,CF -o %A 2>/dev/null | sort -u)
  [ ${#ids[@]} -gt 0 ] && scancel "${ids[@]}" 2>/dev/null
  for _ in $(seq 1 50); do [ -z "$(squeue -h -t R,CG -o %A 2>/dev/null)" ] && break; sleep 0.1; done
fi
step "jobs cancelled" "$s"

s=$(now)
slurmds=(); for n in "${NODES[@]}"; do slurmds+=("$RUN/slurmd-$n.pid:slurmd"); done
stop_pidfiles 10 "$RUN/slurmrestd.pid:slurmrestd" "${slurmds[@]}"
rm -f "$REST_SOCK"
stop_pidfiles 30 "$RUN/slurmctld.pid:slurmctld"
if [ "$PRIMARY" = 1 ]; then
  stop_pidfiles 30 "$RUN/slurmdbd.pid:slurmdbd"
  stop_pidfiles 60 "$B/mysql/mariadb.pid:mariadbd"
fi
if [ -e "$RUN/munged.ours" ] && [ "${KEEP_MUNGE:-0}" != 1 ]; then
  stop_pidfiles 5 "$MUNGE_PID:munged"; rm -f "$RUN/munged.ours"
fi
step "daemons stopped" "$s"

s=$(now)
for n in "${NODES[@]}"; do
  if grep -qw "$n" <<<"$(ip netns list 2>/dev/null)"; then
    # leftover slurmstepd / job processes of this node
    mapfile -t left < <(ip netns pids "$n" 2>/dev/null)
    [ ${#left[@]} -gt 0 ] && kill -9 "${left[@]}" 2>/dev/null
    ip netns del "$n" 2>/dev/null
  fi
  ip link del "veth-$n" 2>/dev/null
done
ip link del "$BRIDGE" 2>/dev/null
if command -v iptables >/dev/null 2>&1; then
  iptables -D FORWARD -i "$BRIDGE" -o "$BRIDGE" -j ACCEPT 2>/dev/null
fi
step "netns + bridge removed" "$s"

if [ $PURGE = 1 ]; then rm -rf "$B"; echo "[down] removed $B"; fi
step "down" "$T0"
exit 0
