#!/bin/bash
# Show the Caldera Slurm test cluster's daemons and real nodes; exit 0 only if it is healthy.
set -uo pipefail
# shellcheck source-path=SCRIPTDIR source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
show() {  # show PIDFILE COMM [LABEL]
  local p label=${3:-$2}
  if p=$(pid_of "$1" "$2"); then printf '  %-18s pid %s\n' "$label" "$p"; else printf '  %-18s DOWN\n' "$label"; fi
}
echo "cluster $CLUSTER  base $B  SLURM_CONF=$SLURM_CONF$([ "$PRIMARY" = 1 ] && echo "  REST=unix:$REST_SOCK")"
show "$MUNGE_PID" munged
if [ "$PRIMARY" = 1 ]; then
  show "$B/mysql/mariadb.pid" mariadbd
  show "$RUN/slurmdbd.pid" slurmdbd
fi
show "$RUN/slurmctld.pid" slurmctld
for n in "${NODES[@]}"; do show "$RUN/slurmd-$n.pid" slurmd "slurmd $n"; done
[ "$PRIMARY" = 1 ] && show "$RUN/slurmrestd.pid" slurmrestd
node_states | sed 's/^/  /'
if healthy; then echo "healthy"; else echo "NOT healthy (run $HERE/up.sh)"; exit 1; fi
