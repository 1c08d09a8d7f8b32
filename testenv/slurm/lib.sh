# shellcheck shell=bash disable=SC2034
# Shared by up.sh, down.sh, status.sh and corpus-check.sh (sourced, not executed).
# Everything lives under $B (CALDERA_SLURM_BASE); the bridge, the namespaces and the
# addresses are machine-wide (one cluster of each name per machine).
# CALDERA_SLURM_CLUSTER picks the cluster:
#   caldera (default): /tmp/caldera-slurm, br-slurm 10.77.0.0/24, node01..04, its own MariaDB,
#                      slurmdbd (6819) and slurmrestd;
#   burst:             /tmp/caldera-slurm-burst, br-slurmb 10.78.0.0/24, bnode01..02, templates
#                      in etc/burst/, ports 6827/6828; no database or REST of its own: it
#                      registers with the caldera cluster's slurmdbd (so -M/--clusters works).

CLUSTER=${CALDERA_SLURM_CLUSTER:-caldera}
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
case $CLUSTER in
  caldera)
    B=${CALDERA_SLURM_BASE:-/tmp/caldera-slurm}
    TEMPLATES=$HERE/etc; CONFS=(slurm.conf gres.conf topology.conf)
    BRIDGE=br-slurm; BRIDGE_IP=10.77.0.1; NODE_NET=10.77.0
    NODES=(node01 node02 node03 node04); NODE_RANGE='node[01-04]'
    PRIMARY=1 ;;
  burst)
    B=${CALDERA_SLURM_BASE:-/tmp/caldera-slurm-burst}
    TEMPLATES=$HERE/etc/burst; CONFS=(slurm.conf gres.conf)
    BRIDGE=br-slurmb; BRIDGE_IP=10.78.0.1; NODE_NET=10.78.0
    NODES=(bnode01 bnode02); NODE_RANGE='bnode[01-02]'
    PRIMARY=0 ;;
  *) echo "unknown CALDERA_SLURM_CLUSTER '$CLUSTER' (caldera or burst)" >&2; exit 2 ;;
esac
B=${B%/}
# the second cluster stopped by the first one's down.sh (it needs the first one's slurmdbd)
BURST_BASE=${CALDERA_SLURM_BURST_BASE:-/tmp/caldera-slurm-burst}
export SLURM_CONF=$B/etc/slurm.conf
RUN=$B/run
LOG=$B/log
DB_PORT=${CALDERA_SLURM_DB_PORT:-3316}
REST_USER=tester
REST_SOCK=$B/rest/slurmrestd.sock
MUNGE_PID=/run/munge/munged.pid
RESERVATIONS=(AI_workshop_Day1 AI_workshop_Day2 gromacs_wednesday gromacs_thursday hug
              sc23_dl_tutorial_1 sc23_dl_tutorial_2)

now() { date +%s.%N; }
elapsed() { awk -v a="$1" -v b="$(date +%s.%N)" 'BEGIN{printf "%.2f", b-a}'; }
# step NAME START -- one line per step with its duration
step() { printf '[%s] %-34s %6ss\n' "${TAG:-slurm}" "$1" "$(elapsed "$2")"; }
die() { echo "[${TAG:-slurm}] ERROR: $*" >&2; exit 1; }

# running PID -- alive and not a zombie (daemons are re-parented to an init that may reap late)
running() { [ -r "/proc/$1/stat" ] && [ "$(awk '{print $3}' "/proc/$1/stat" 2>/dev/null)" != Z ]; }

# pid_of FILE COMM -- print the pid in FILE if that process is alive and is COMM
pid_of() {
  local f=$1 comm=$2 p
  [ -s "$f" ] || return 1
  p=$(tr -dc '0-9' <"$f" 2>/dev/null) || return 1
  [ -n "$p" ] && [ -r "/proc/$p/comm" ] || return 1
  [ "$(cat "/proc/$p/comm" 2>/dev/null)" = "$comm" ] && running "$p" || return 1
  echo "$p"
}
alive() { pid_of "$1" "$2" >/dev/null; }

# stop_pidfiles TIMEOUT FILE:COMM... -- SIGTERM all, wait up to TIMEOUT s, then SIGKILL;
# removes the pid files. Only processes named by a pid file (and with the right comm) are signalled.
stop_pidfiles() {
  local timeout=$1 t i p f comm pids=() names=() k
  shift
  t=$(now)
  for k in "$@"; do
    f=${k%:*}; comm=${k##*:}
    if p=$(pid_of "$f" "$comm"); then kill "$p" 2>/dev/null || true; pids+=("$p"); names+=("$comm:$p"); fi
    rm -f "$f"
  done
  [ ${#pids[@]} = 0 ] && return 0
  for ((i = 0; i < timeout * 20; i++)); do
    local left=0
    for p in "${pids[@]}"; do running "$p" && left=1; done
    [ $left = 0 ] && break
    sleep 0.05
  done
  for p in "${pids[@]}"; do running "$p" && kill -9 "$p" 2>/dev/null; done
  step "stopped ${names[*]}" "$t"
}
stop_pidfile() { stop_pidfiles "${3:-15}" "$1:$2"; }

# node_states -- 'NODE STATE' per real node (idle, mixed, allocated, down*, drained ...)
node_states() { sinfo -h -N -n "$NODE_RANGE" -o '%N %T' 2>/dev/null | sort -u; }

# all real nodes usable: idle, or busy with jobs (mixed, allocated, completing), or
# planned (backfill will start a job there) or reserved (in an active reservation)
USABLE_STATES='idle|mixed|allocated|completing|planned|reserved'
nodes_ok() {
  local out
  out=$(node_states) || return 1
  [ "$(grep -cE " ($USABLE_STATES)$" <<<"$out")" = "${#NODES[@]}" ]
}
nodes_idle() {
  local out
  out=$(node_states) || return 1
  [ "$(grep -cE ' idle$' <<<"$out")" = "${#NODES[@]}" ]
}

render() {  # render SRC DST
  sed -e "s|@BASE@|$B|g" -e "s|@CTLD_HOST@|$(hostname -s)|g" -e "s|@DB_PORT@|$DB_PORT|g" "$1" >"$2"
}

# healthy -- every daemon alive, controller answers, all real nodes usable, REST socket present
# (the burst cluster has no database, slurmdbd or slurmrestd of its own)
healthy() {
  alive "$MUNGE_PID" munged || return 1
  if [ "$PRIMARY" = 1 ]; then
    alive "$B/mysql/mariadb.pid" mariadbd || return 1
    alive "$RUN/slurmdbd.pid" slurmdbd || return 1
  fi
  alive "$RUN/slurmctld.pid" slurmctld || return 1
  local n
  for n in "${NODES[@]}"; do alive "$RUN/slurmd-$n.pid" slurmd || return 1; done
  if [ "$PRIMARY" = 1 ]; then
    alive "$RUN/slurmrestd.pid" slurmrestd || return 1
    [ -S "$REST_SOCK" ] || return 1
  fi
  grep -q 'is UP' <<<"$(scontrol ping 2>/dev/null)" || return 1
  nodes_ok
}
