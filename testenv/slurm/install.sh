#!/bin/bash
# Install Debian's Slurm 22.05 packages and everything the local test cluster needs.
# Idempotent: a second run only checks (no apt-get when every package is present).
# Usage: testenv/slurm/install.sh        (as root; Debian 12)
set -euo pipefail

PKGS=(slurm-wlm slurmd slurmctld slurm-client slurmrestd slurmdbd munge
      mariadb-server mariadb-client openmpi-bin libopenmpi-dev libpmix2
      gcc libc6-dev iproute2 util-linux curl procps)

t0=$(date +%s.%N)
now() { date +%s.%N; }
elapsed() { awk -v a="$1" -v b="$(date +%s.%N)" 'BEGIN{printf "%.2f", b-a}'; }

if [ "$(id -u)" != 0 ]; then echo "install.sh: must run as root" >&2; exit 1; fi

missing=()
for p in "${PKGS[@]}"; do
  st=$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null || true)
  [ "$st" = "install ok installed" ] || missing+=("$p")
done

if [ ${#missing[@]} -gt 0 ]; then
  s=$(now)
  # Other processes may hold the dpkg/apt lock: wait for it instead of failing.
  apt-get -o DPkg::Lock::Timeout=600 update -qq
  echo "[install] apt-get update $(elapsed "$s")s"
  s=$(now)
  DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 install -y -qq \
    --no-install-recommends "${missing[@]}" >/tmp/caldera-slurm-install.log 2>&1 || {
      tail -30 /tmp/caldera-slurm-install.log >&2; exit 1; }
  echo "[install] apt-get install (${#missing[@]} packages) $(elapsed "$s")s"
else
  echo "[install] all ${#PKGS[@]} packages already installed"
fi

# Test users (fixed uids: tests compare them).
mkuser() {
  local name=$1 uid=$2
  if ! id -u "$name" >/dev/null 2>&1; then
    useradd --create-home --uid "$uid" --user-group --shell /bin/bash "$name"
    echo "[install] created user $name ($uid)"
  fi
  local home; home=$(getent passwd "$name" | cut -d: -f6)
  [ -d "$home" ] || { mkdir -p "$home"; chown "$name:" "$home"; }
}
mkuser tester 1001
mkuser tester2 1002

# Munge key (the Debian package normally creates one; make sure).
if [ ! -s /etc/munge/munge.key ]; then
  mkdir -p /etc/munge
  dd if=/dev/urandom of=/etc/munge/munge.key bs=1 count=1024 status=none
  echo "[install] created /etc/munge/munge.key"
fi
chown munge:munge /etc/munge/munge.key; chmod 400 /etc/munge/munge.key

echo "[install] done in $(elapsed "$t0")s ($(dpkg-query -W -f='${Version}' slurmctld))"
