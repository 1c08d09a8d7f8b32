#!/bin/bash
# Idempotently create the accounting objects the sbatch corpus names (called by up.sh once
# slurmdbd answers). No AccountingStorageEnforce is set, so these are not required for sbatch
# to accept a job; they make `scontrol show job` record a real QOS and account.
set -euo pipefail
TAG=up  # (CLUSTER comes from SLURM_CONF, so the same objects are made on the burst cluster)
# shellcheck source-path=SCRIPTDIR source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
CLUSTER=$(sed -n 's/^ClusterName=//p' "$SLURM_CONF")
QOS=(normal debug standby shared regular flex preempt debug_preempt qos_gpu-t3 qos_gpu-t4)
# sacctmgr and slurmctld lower-case account names (A-ccsc -> a-ccsc, GROUP@PARTITION -> group@partition)
ACCOUNTS=(caldera project_2001659 project_465002178 project_465000934 xcore ntrain4 m3562_g
          a-ccsc six@cpu six@gpu six@a100 six@v100 group@partition)
USERS=(root tester tester2)
sa() { sacctmgr -i "$@" >/dev/null; }

csv() { local IFS=,; echo "$*"; }
# One sacctmgr call per kind of object: each modification costs ~0.4 s in slurmdbd.
grep -qx "$CLUSTER" <<<"$(sacctmgr -nP show cluster format=cluster)" || sa add cluster "$CLUSTER"

have=$(sacctmgr -nP show qos format=name)
new=(); for q in "${QOS[@]}"; do grep -qx "$q" <<<"$have" || new+=("$q"); done
[ ${#new[@]} = 0 ] || sa add qos "$(csv "${new[@]}")"

# accounts with an association on THIS cluster (the burst cluster shares the database: the
# accounts exist already, but not on it)
have=$(sacctmgr -nP show assoc where cluster="$CLUSTER" format=account,user | sed -n 's/|$//p')
new=(); for a in "${ACCOUNTS[@]}"; do grep -qx "$a" <<<"$have" || new+=("$a"); done
[ ${#new[@]} = 0 ] || sa add account "$(csv "${new[@]}")" Cluster="$CLUSTER" Organization=caldera

users=$(sacctmgr -nP show user format=user)
new=(); for u in "${USERS[@]}"; do grep -qx "$u" <<<"$users" || new+=("$u"); done
[ ${#new[@]} = 0 ] || sa add user "$(csv "${new[@]}")" DefaultAccount=caldera Cluster="$CLUSTER"

assoc=$(sacctmgr -nP show assoc where cluster="$CLUSTER" format=user,account)
missing=0
for u in "${USERS[@]}"; do
  for a in "${ACCOUNTS[@]}"; do grep -qx "$u|$a" <<<"$assoc" || missing=1; done
done
if [ $missing = 1 ]; then
  sacctmgr -i add user "$(csv "${USERS[@]}")" Account="$(csv "${ACCOUNTS[@]}")" Cluster="$CLUSTER" >/dev/null || true
  sa modify user where name="$(csv "${USERS[@]}")" set QOS="$(csv "${QOS[@]}")" DefaultQOS=normal
fi
