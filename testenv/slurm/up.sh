#!/bin/bash
# Start the Caldera Slurm 22.05 test cluster on this machine (idempotent).
#   munge -> MariaDB -> slurmdbd (+ cluster, accounts, QOS) -> slurmctld (+ reservations)
#   -> 4 slurmd (node01..04, each in its own netns + UTS namespace) -> slurmrestd (unix socket)
# Base directory: $CALDERA_SLURM_BASE (default /tmp/caldera-slurm). Run as root.
# CALDERA_SLURM_CLUSTER=burst starts the second cluster (see lib.sh): the first one is started
# (or checked) first, since the second registers with its slurmdbd; no MariaDB/slurmdbd/REST.
# When the cluster is already up and healthy (and the configs unchanged) this is a quick
# no-op; it exits 0 only if the cluster is healthy at the end. Run install.sh first.
set -euo pipefail
TAG=up
# shellcheck source-path=SCRIPTDIR source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
# The burst cluster's accounting is the caldera cluster's slurmdbd: start that one first,
# before taking this cluster's lock (down.sh takes caldera's lock, then burst's: same order).
if [ "$PRIMARY" = 0 ] && [ -z "${CALDERA_SLURM_LOCKED:-}" ]; then
  s=$(now)
  env -u CALDERA_SLURM_BASE -u CALDERA_SLURM_CLUSTER bash "$HERE/up.sh" |
    sed 's/^\[up\]/[up caldera]/' || die "the caldera cluster (accounting) did not start"
  step "caldera cluster (slurmdbd) up" "$s"
fi
# One up/down at a time per machine: re-exec under flock (-o: daemons do not inherit the lock).
if [ -z "${CALDERA_SLURM_LOCKED:-}" ]; then
  exec env CALDERA_SLURM_LOCKED=1 flock -o -w 600 "$B.lock" bash "$0" "$@"
fi

[ "$(id -u)" = 0 ] || die "must run as root"
command -v slurmctld >/dev/null || die "Slurm is not installed: run $HERE/install.sh"
id -u "$REST_USER" >/dev/null 2>&1 || die "user $REST_USER missing: run $HERE/install.sh"

T0=$(now)
mkdir -p "$B"/{etc,run,log,rest,state/ctld,fakedev,jobs,bin} "${NODES[@]/#/$B/state/d-}"
chmod 755 "$B" "$B"/{etc,run,log,state,fakedev,bin}
chmod 1777 "$B/jobs"
chown "$REST_USER:" "$B/rest"

# --- configs: render the templates; remember which daemons need a restart
s=$(now)
mkdir -p "$B/etc.new"
for f in "${CONFS[@]}"; do render "$TEMPLATES/$f.in" "$B/etc.new/$f"; done
CTLD_CHANGED=0; DBD_CHANGED=0
for f in "${CONFS[@]}"; do
  cmp -s "$B/etc.new/$f" "$B/etc/$f" || CTLD_CHANGED=1
done
if [ "$PRIMARY" = 1 ]; then
  render "$HERE/etc/slurmdbd.conf.in" "$B/etc.new/slurmdbd.conf"
  cmp -s "$B/etc.new/slurmdbd.conf" "$B/etc/slurmdbd.conf" || DBD_CHANGED=1
fi

if [ $CTLD_CHANGED = 0 ] && [ $DBD_CHANGED = 0 ] && healthy; then
  rm -rf "$B/etc.new"
  step "already up and healthy (no-op)" "$T0"
  exit 0
fi
for f in "${CONFS[@]}"; do cp "$B/etc.new/$f" "$B/etc/$f"; chmod 644 "$B/etc/$f"; done
if [ "$PRIMARY" = 1 ]; then
  cp "$B/etc.new/slurmdbd.conf" "$B/etc/slurmdbd.conf"
  chmod 600 "$B/etc/slurmdbd.conf"
fi
rm -rf "$B/etc.new"
step "configs in $B/etc (changed: ctld=$CTLD_CHANGED dbd=$DBD_CHANGED)" "$s"

# --- munge (machine-wide socket /run/munge; shared with anything else using munge)
s=$(now)
if ! alive "$MUNGE_PID" munged; then
  mkdir -p /run/munge /var/log/munge /var/lib/munge
  chown munge:munge /run/munge /var/log/munge /var/lib/munge
  chmod 755 /run/munge
  rm -f /run/munge/munge.socket.2 /run/munge/munge.socket.2.lock "$MUNGE_PID"
  runuser -u munge -- /usr/sbin/munged </dev/null >/dev/null 2>&1
  touch "$RUN/munged.ours"          # down.sh stops munged only if we started it
fi
munge -n | unmunge >/dev/null || die "munge does not work"
step "munged pid $(cat "$MUNGE_PID")" "$s"

# --- network: bridge + one netns per node (iproute2; ip netns exec is NOT used for slurmd)
s=$(now)
if ! ip link show "$BRIDGE" >/dev/null 2>&1; then
  ip link add "$BRIDGE" type bridge
fi
grep -q "inet $BRIDGE_IP/24" <<<"$(ip addr show dev "$BRIDGE")" || ip addr add "$BRIDGE_IP/24" dev "$BRIDGE"
ip link set "$BRIDGE" up
for i in "${!NODES[@]}"; do
  n=${NODES[$i]}; ip_n=$NODE_NET.1$((i + 1))
  if grep -qw "$n" <<<"$(ip netns list)" &&
     grep -q "inet $ip_n/24" <<<"$(ip -n "$n" addr show dev eth0 2>/dev/null)" &&
     grep -q "master $BRIDGE" <<<"$(ip link show "veth-$n" 2>/dev/null)"; then
    ip link set "veth-$n" up
    continue
  fi
  # missing or half-made (e.g. after a crash): rebuild it, unless its slurmd still runs
  alive "$RUN/slurmd-$n.pid" slurmd && stop_pidfile "$RUN/slurmd-$n.pid" slurmd
  ip link del "veth-$n" 2>/dev/null || true
  ip netns del "$n" 2>/dev/null || true
  ip netns add "$n"
  ip link add "veth-$n" type veth peer name eth0 netns "$n"
  ip link set "veth-$n" master "$BRIDGE" up
  ip -n "$n" addr add "$ip_n/24" dev eth0
  ip -n "$n" link set eth0 up
  ip -n "$n" link set lo up
  ip -n "$n" route add default via "$BRIDGE_IP"
done
# With br_netfilter loaded and a FORWARD DROP policy (e.g. once dockerd runs), bridged
# node-to-node traffic would be dropped: accept traffic within the bridge explicitly.
if command -v iptables >/dev/null 2>&1; then
  iptables -C FORWARD -i "$BRIDGE" -o "$BRIDGE" -j ACCEPT 2>/dev/null ||
    iptables -I FORWARD -i "$BRIDGE" -o "$BRIDGE" -j ACCEPT 2>/dev/null || true
fi
for n in "${NODES[@]}"; do
  mkdir -p "$B/state/tmp-$n"; chmod 1777 "$B/state/tmp-$n"   # TmpFS=.../tmp-%n (pmix)
done
for i in 0 1 2 3 4 5 6 7; do   # fake GPUs: character devices, major 195 like /dev/nvidiaN
  [ -c "$B/fakedev/nvidia$i" ] || { rm -f "$B/fakedev/nvidia$i"; mknod "$B/fakedev/nvidia$i" c 195 $i; }
done
chmod 666 "$B"/fakedev/nvidia*
step "network $BRIDGE + netns ${NODES[*]}" "$s"

if [ "$PRIMARY" = 1 ]; then
# --- MariaDB (own datadir, 127.0.0.1:$DB_PORT, no /etc/mysql config)
s=$(now)
NEWDB=0
if [ ! -d "$B/mysql/data/mysql" ]; then
  rm -rf "$B/mysql"; mkdir -p "$B/mysql/data"; chown -R mysql:mysql "$B/mysql"
  mariadb-install-db --no-defaults --user=mysql --datadir="$B/mysql/data" --skip-test-db \
    >"$LOG/mariadb-install.log" 2>&1 || { tail "$LOG/mariadb-install.log" >&2; die "mariadb-install-db failed"; }
  NEWDB=1
fi
if ! alive "$B/mysql/mariadb.pid" mariadbd; then
  rm -f "$B/mysql/mysql.sock" "$B/mysql/mariadb.pid"
  setsid mariadbd --no-defaults --user=mysql --datadir="$B/mysql/data" \
    --socket="$B/mysql/mysql.sock" --pid-file="$B/mysql/mariadb.pid" \
    --bind-address=127.0.0.1 --port="$DB_PORT" --log-error="$LOG/mariadb.log" \
    --innodb-lock-wait-timeout=900 --innodb-buffer-pool-size=256M --innodb-log-file-size=64M \
    </dev/null >/dev/null 2>&1 &
fi
for _ in $(seq 1 300); do
  mariadb -S "$B/mysql/mysql.sock" -u root -e 'select 1' >/dev/null 2>&1 && break; sleep 0.1
done
mariadb -S "$B/mysql/mysql.sock" -u root -e "
  CREATE DATABASE IF NOT EXISTS slurm_acct_db;
  CREATE USER IF NOT EXISTS 'slurm'@'localhost' IDENTIFIED BY 'slurmpw';
  CREATE USER IF NOT EXISTS 'slurm'@'127.0.0.1' IDENTIFIED BY 'slurmpw';
  GRANT ALL ON slurm_acct_db.* TO 'slurm'@'localhost';
  GRANT ALL ON slurm_acct_db.* TO 'slurm'@'127.0.0.1';" || die "MariaDB not answering (see $LOG/mariadb.log)"
step "mariadb pid $(cat "$B/mysql/mariadb.pid") port $DB_PORT (new=$NEWDB)" "$s"

# --- slurmdbd + accounting objects (cluster, QOS, accounts, users)
s=$(now)
[ $DBD_CHANGED = 1 ] && stop_pidfile "$RUN/slurmdbd.pid" slurmdbd
if ! alive "$RUN/slurmdbd.pid" slurmdbd; then
  rm -f "$RUN/slurmdbd.pid"
  /usr/sbin/slurmdbd </dev/null >/dev/null 2>&1 || die "slurmdbd failed (see $LOG/slurmdbd.log)"
fi
for _ in $(seq 1 300); do sacctmgr -n show cluster >/dev/null 2>&1 && break; sleep 0.1; done
sacctmgr -n show cluster >/dev/null 2>&1 || die "slurmdbd not answering (see $LOG/slurmdbd.log)"
step "slurmdbd pid $(cat "$RUN/slurmdbd.pid")" "$s"
fi  # PRIMARY (MariaDB, slurmdbd)

s=$(now)
bash "$HERE/accounting.sh"
step "accounting (cluster, qos, accounts, users)" "$s"

# --- slurmctld
s=$(now)
if [ $CTLD_CHANGED = 1 ]; then
  slurmds=(); for n in "${NODES[@]}"; do slurmds+=("$RUN/slurmd-$n.pid:slurmd"); done
  stop_pidfiles 10 "$RUN/slurmrestd.pid:slurmrestd" "${slurmds[@]}"
  stop_pidfiles 30 "$RUN/slurmctld.pid:slurmctld"
fi
if ! alive "$RUN/slurmctld.pid" slurmctld; then
  rm -f "$RUN/slurmctld.pid"
  /usr/sbin/slurmctld -i </dev/null >/dev/null 2>&1 || die "slurmctld failed (see $LOG/slurmctld.log)"
fi
for _ in $(seq 1 300); do grep -q 'is UP' <<<"$(scontrol ping 2>/dev/null)" && break; sleep 0.1; done
grep -q 'is UP' <<<"$(scontrol ping 2>/dev/null)" || die "slurmctld not answering (see $LOG/slurmctld.log)"
step "slurmctld pid $(cat "$RUN/slurmctld.pid")" "$s"

# --- one slurmd per node: nsenter --net keeps /sys/fs/cgroup visible (ip netns exec
#     remounts /sys and slurmd dies); unshare --uts gives each node its own hostname.
s=$(now)
for n in "${NODES[@]}"; do
  alive "$RUN/slurmd-$n.pid" slurmd && continue
  rm -f "$RUN/slurmd-$n.pid"
  nsenter --net="/run/netns/$n" unshare --uts -- \
    sh -c "hostname $n; exec /usr/sbin/slurmd -N $n" </dev/null >/dev/null 2>&1 ||
    die "slurmd $n failed (see $LOG/slurmd-$n.log)"
done
resumed=0
for i in $(seq 1 600); do
  nodes_idle && break
  # a node left down/drained by a crash or a restart: resume it once
  if [ $resumed = 0 ] && [ "$i" -gt 30 ]; then
    bad=$(node_states | awk '$2 ~ /down|drain|fail|inval/ {print $1}' | paste -sd, -)
    if [ -n "$bad" ]; then scontrol update NodeName="$bad" State=RESUME 2>/dev/null || true; fi
    resumed=1
  fi
  # nodes busy with jobs are fine on a restart
  [ "$i" -gt 50 ] && nodes_ok && break
  sleep 0.1
done
nodes_ok || { node_states >&2; die "real nodes not up (see $LOG/slurmd-*.log)"; }
step "slurmd x${#NODES[@]}: $(node_states | tr '\n' ' ')" "$s"

if [ "$PRIMARY" = 1 ]; then
# --- reservations the corpus names (virtual GPU nodes only, so real nodes stay free)
s=$(now)
have=$(scontrol -o show reservation 2>/dev/null | sed -n 's/^ReservationName=\([^ ]*\).*/\1/p')
for r in "${RESERVATIONS[@]}"; do
  grep -qx "$r" <<<"$have" && continue
  scontrol create reservation ReservationName="$r" StartTime=now Duration=UNLIMITED \
    Nodes='big[001-064]' Users=root,tester,tester2 Flags=OVERLAP,IGNORE_JOBS >/dev/null ||
    die "could not create reservation $r"
done
step "reservations (${#RESERVATIONS[@]})" "$s"

# --- slurmrestd on a unix socket, as $REST_USER (it refuses root); rest_auth/local
s=$(now)
if ! alive "$RUN/slurmrestd.pid" slurmrestd; then
  rm -f "$REST_SOCK" "$RUN/slurmrestd.pid"
  uid=$(id -u "$REST_USER"); gid=$(id -g "$REST_USER")
  # setpriv execs (runuser would fork), so $! is slurmrestd itself
  setsid setpriv --reuid="$uid" --regid="$gid" --init-groups \
    env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME="$(getent passwd "$REST_USER" | cut -d: -f6)" \
    USER="$REST_USER" SLURM_CONF="$SLURM_CONF" \
    /usr/sbin/slurmrestd -a rest_auth/local "unix:$REST_SOCK" \
    </dev/null >>"$LOG/slurmrestd.log" 2>&1 &
  echo $! >"$RUN/slurmrestd.pid"
fi
for _ in $(seq 1 100); do [ -S "$REST_SOCK" ] && break; sleep 0.1; done
[ -S "$REST_SOCK" ] || die "slurmrestd socket missing (see $LOG/slurmrestd.log)"
step "slurmrestd pid $(cat "$RUN/slurmrestd.pid") $REST_SOCK" "$s"
fi  # PRIMARY (reservations, slurmrestd)

# --- an MPI test program for the smoke tests (built once)
if [ ! -x "$B/bin/mpi_hello" ] && command -v mpicc >/dev/null 2>&1; then
  s=$(now)
  mpicc -O1 -o "$B/bin/mpi_hello" "$HERE/mpi_hello.c" && step "mpicc mpi_hello" "$s"
fi

healthy || die "cluster not healthy after start"
step "cluster $CLUSTER up (SLURM_CONF=$SLURM_CONF)" "$T0"
