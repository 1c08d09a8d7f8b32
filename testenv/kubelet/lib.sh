# shellcheck shell=bash disable=SC2034  # sourced: the variables are used by the scripts
# Shared settings of testenv/kubelet (sourced by up.sh and down.sh). The real nodes join the
# control plane of testenv/k8s (same CALDERA_K8S_* variables, so the same env.json).
# shellcheck disable=SC1091  # testenv/k8s/lib.sh: versions, ports, cache_dir, log/die
source "$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/../k8s/lib.sh"

KUBELET_TESTENV_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# State: containerd roots, kubelet root dirs, logs, pid files. Not under $BASE: k8s/down.sh
# removes $BASE with rm -rf, which must never meet a mount left by a kubelet.
KB=${CALDERA_KUBELET_BASE:-/tmp/caldera-kubelet}
KB=${KB%/}
# Machine-wide names and addresses: netns <prefix>-n<i>, bridge <prefix>-br0, host veth
# <prefix>-v<i>; nodes on 10.<net>.0.0/24 (host side .1, node i .(10+i)), pods of node i on
# 10.<net>.<i>.0/24. testenv/slurm uses node01..04, br-slurm and 10.77.0.0/24; podman 10.88.
PREFIX=${CALDERA_KUBELET_PREFIX:-ckl}
NET=${CALDERA_KUBELET_NET:-79}
KUBELET_NODES=${CALDERA_KUBELET_NODES:-2}
BRIDGE=$PREFIX-br0
HOST_IP=10.$NET.0.1
CNI_BIN=/usr/lib/cni
PAUSE_IMAGE=caldera.local/pause:3.9
JOB_IMAGE=${CALDERA_KUBELET_JOB_IMAGE:-caldera.local/job:latest}
MPI_IMAGE=caldera.local/mpi:latest  # python3 + Open MPI (build_mpi_image.py)
IMAGE_CACHE=${CALDERA_TESTENV_CACHE:-/var/cache/caldera-testenv}/kubelet-images
KUBELET_GPUS=${CALDERA_KUBELET_GPUS:-2}  # fake GPUs per node (nvidia.com/gpu, fake_device_plugin.py)
KUBELET_HCAS=${CALDERA_KUBELET_HCAS:-2}  # fake RDMA HCAs per node (rdma/hca)
NODE_LABEL_PARTITION=${CALDERA_KUBELET_PARTITION:-kubelet}  # caldera.io/partition=<this>

node_name() { printf 'kubelet-node-%02d' "$1"; }
netns_of() { echo "$PREFIX-n$1"; }
node_ip() { echo "10.$NET.0.$((10 + $1))"; }
pod_cidr() { echo "10.$NET.$1.0/24"; }
node_dir() { echo "$KB/$(node_name "$1")"; }

# alive PID: running and not a zombie
alive() {
  local state
  state=$(awk '{print $3}' "/proc/$1/stat" 2>/dev/null) || return 1
  [ -n "$state" ] && [ "$state" != Z ]
}
# pid_ok PIDFILE COMM: the pid file names a live process whose comm is COMM
pid_ok() {
  local p
  p=$(cat "$1" 2>/dev/null) || return 1
  [ -n "$p" ] && alive "$p" && [ "$(cat "/proc/$p/comm" 2>/dev/null)" = "$2" ]
}
