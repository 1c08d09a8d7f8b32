# shellcheck shell=bash disable=SC2034
# Shared by up.sh, down.sh, status.sh and corpus-check.sh (sourced, not executed).
# Everything lives under $B (CALDERA_SLURM_BASE, default /tmp/caldera-slurm); the bridge,
# the namespaces and the 10.77.0.0/24 addresses are machine-wide (one cluster per machine).

B=${CALDERA_SLURM_BASE:-/tmp/caldera-slurm}
B=${B%/}
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
export SLURM_CONF=$B/etc/slurm.conf
RUN=$B/run
LOG=$B/log
BRIDGE=br-slurm
BRIDGE_IP=10.77.0.1
NODES=(node01 node02 node03 node04)
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
node_states() { sinfo -h -N -n "node[01-04]" -o '%N %T' 2>/dev/null | sort -u; }

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
healthy() {
  alive "$MUNGE_PID" munged || return 1
  alive "$B/mysql/mariadb.pid" mariadbd || return 1
  alive "$RUN/slurmdbd.pid" slurmdbd || return 1
  alive "$RUN/slurmctld.pid" slurmctld || return 1
  local n
  for n in "${NODES[@]}"; do alive "$RUN/slurmd-$n.pid" slurmd || return 1; done
  alive "$RUN/slurmrestd.pid" slurmrestd || return 1
  [ -S "$REST_SOCK" ] || return 1
  grep -q 'is UP' <<<"$(scontrol ping 2>/dev/null)" || return 1
  nodes_ok
}
