#!/usr/bin/env bash
# Start real kubelet nodes next to the KWOK nodes of a running testenv/k8s control plane:
# per node a network namespace (veth on a host bridge, routes so that pods on different nodes
# reach each other), its own containerd (Debian's, with runc and the bridge + host-local CNI
# plugins), the pause and job images built here and imported (no registry), and a kubelet
# built from the pinned k8s.io/kubernetes module, with webhook authentication/authorisation
# and anonymous access off.
#
# usage: up.sh [--nodes N]      (default 2, or CALDERA_KUBELET_NODES)
#
# Needs root and testenv/k8s/up.sh first (same CALDERA_K8S_* variables). Idempotent: running
# pieces are left alone, dead ones restarted. Describes the nodes in $KB/env.json.
# down.sh stops everything and removes the namespaces, the bridge and the state.
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=lib.sh
source "$(dirname "$0")/lib.sh"

while [ $# -gt 0 ]; do
  case $1 in
    --nodes) KUBELET_NODES=${2:?--nodes needs a number}; shift ;;
    --nodes=*) KUBELET_NODES=${1#--nodes=} ;;
    -h | --help) sed -n '2,13p' "$0"; exit 0 ;;
    *) die "unknown argument $1" ;;
  esac
  shift
done
if ! [[ $KUBELET_NODES =~ ^[1-9]$ ]]; then die "--nodes must be 1..9"; fi
[ "$(id -u)" = 0 ] || die "needs root (network namespaces, containerd, kubelet)"
[ -f "$BASE/env.json" ] || die "the control plane is not up ($BASE/env.json missing): run testenv/k8s/up.sh"
for tool in containerd ctr runc socat nsenter ip iptables /bin/busybox "$CNI_BIN/bridge" "$CNI_BIN/host-local"; do
  command -v "$tool" >/dev/null || die "$tool missing: testenv/kubelet/install.sh"
done

total_start=$(now_ms)
step_start=$total_start
step() {
  [ -n "${step_name:-}" ] && log "step $step_name: $(elapsed "$step_start")"
  step_name=$1
  step_start=$(now_ms)
}
mkdir -p "$KB"/{run,logs,images}
exec 8>"$KB/.lock"
flock 8

step build
DIR=$("$K8S_TESTENV_DIR/build.sh" core)
BIN=$DIR/bin
KUBECTL=("$BIN/kubectl" --kubeconfig "$BASE/kubeconfig/admin.kubeconfig")
CA=$BASE/pki/apiserver/apiserver.crt

wait_for() { # wait_for DESC TIMEOUT_S LOGFILE CMD...
  local desc=$1 timeout=$2 logf=$3 deadline
  shift 3
  deadline=$(($(date +%s) + timeout))
  until "$@" >/dev/null 2>&1; do
    if [ "$(date +%s)" -ge "$deadline" ]; then
      [ -f "$logf" ] && tail -n 30 "$logf" >&2
      die "timed out after ${timeout}s waiting for $desc"
    fi
    sleep 0.3
  done
}
# start_bg COMM PIDFILE LOGFILE CMD...: start CMD detached, in its own session, unless the pid
# file names a live process called COMM (CMD execs into it: nsenter/unshare/sh do not fork)
start_bg() {
  local comm=$1 pidf=$2 logf=$3
  shift 3
  STARTED=0
  pid_ok "$pidf" "$comm" && return 0
  STARTED=1
  echo "--- $(date -u +%FT%TZ) starting $*" >>"$logf"
  setsid "$@" </dev/null >>"$logf" 2>&1 8>&- &
  echo $! >"$pidf"
}

# --- network ---------------------------------------------------------------------------
step network
ip link show "$BRIDGE" >/dev/null 2>&1 || ip link add "$BRIDGE" type bridge
# (here-strings, not pipes: with pipefail, grep -q leaving early makes the pipe fail)
grep -q "inet $HOST_IP/24" <<<"$(ip addr show dev "$BRIDGE")" || ip addr add "$HOST_IP/24" dev "$BRIDGE"
ip link set "$BRIDGE" up
iptables -C FORWARD -i "$BRIDGE" -o "$BRIDGE" -j ACCEPT 2>/dev/null ||
  iptables -I FORWARD -i "$BRIDGE" -o "$BRIDGE" -j ACCEPT
for ((i = 1; i <= KUBELET_NODES; i++)); do
  ns=$(netns_of "$i") veth=$PREFIX-v$i
  if ! grep -qw "$ns" <<<"$(ip netns list)" || ! ip link show "$veth" >/dev/null 2>&1; then
    ip link del "$veth" 2>/dev/null || true
    ip netns del "$ns" 2>/dev/null || true
    ip netns add "$ns"
    ip link add "$veth" type veth peer name eth0 netns "$ns"
    ip link set "$veth" master "$BRIDGE" up
    ip -n "$ns" addr add "$(node_ip "$i")/24" dev eth0
    ip -n "$ns" link set lo up
    ip -n "$ns" link set eth0 up
    ip -n "$ns" route add default via "$HOST_IP"
    nsenter --net="/run/netns/$ns" sysctl -qw net.ipv4.ip_forward=1
  fi
  ip route replace "$(pod_cidr "$i")" via "$(node_ip "$i")" dev "$BRIDGE"
done
# pods on different nodes reach each other through the bridge, node to node: through the
# host's default route they would need the host to forward (net.ipv4.ip_forward, off on a
# fresh machine, and not this script's to turn on)
for ((i = 1; i <= KUBELET_NODES; i++)); do
  for ((j = 1; j <= KUBELET_NODES; j++)); do
    [ "$i" = "$j" ] || ip -n "$(netns_of "$i")" route replace "$(pod_cidr "$j")" via "$(node_ip "$j")" dev eth0
  done
done

# --- images: the pause image and the job image, from Debian's busybox-static -----------------
step images
# build_image NAME:TAG OUT.tar CMD_JSON ROOTFS_FUNC: a docker-archive (ctr images import reads it)
build_image() {
  local ref=$1 out=$2 cmd=$3 fill=$4 work diff
  [ -s "$out" ] && return 0
  work=$(mktemp -d)
  mkdir -p "$work/root"
  "$fill" "$work/root"
  tar --sort=name --mtime=@0 --owner=0 --group=0 --numeric-owner -C "$work/root" -cf "$work/layer.tar" .
  diff=$(sha256sum "$work/layer.tar" | cut -d' ' -f1)
  cat >"$work/config.json" <<JSON
{"architecture":"amd64","os":"linux","config":{"Env":["PATH=/usr/local/bin:/usr/bin:/bin"],"Cmd":$cmd},"rootfs":{"type":"layers","diff_ids":["sha256:$diff"]}}
JSON
  echo "[{\"Config\":\"config.json\",\"RepoTags\":[\"$ref\"],\"Layers\":[\"layer.tar\"]}]" >"$work/manifest.json"
  tar -C "$work" -cf "$out.tmp" manifest.json config.json layer.tar
  mv "$out.tmp" "$out"
  rm -rf "$work"
}
pause_root() { mkdir -p "$1/bin" && cp /bin/busybox "$1/bin/sleep"; }
job_root() { # the same root filesystem as testenv/containers/build-image.sh (busybox as sh/bash)
  local r=$1 applet
  mkdir -p "$r"/{bin,etc,proc,sys,dev,tmp,root,home,work}
  chmod 1777 "$r/tmp"
  cp /bin/busybox "$r/bin/busybox"
  for applet in $("$r/bin/busybox" --list); do [ -e "$r/bin/$applet" ] || ln -s busybox "$r/bin/$applet"; done
  ln -sf busybox "$r/bin/bash"
  printf '%s\n' root:x:0:0:root:/root:/bin/sh tester:x:1001:1001:tester:/home/tester:/bin/sh \
    tester2:x:1002:1002:tester2:/home/tester2:/bin/sh nobody:x:65534:65534:nobody:/nonexistent:/bin/false >"$r/etc/passwd"
  printf '%s\n' root:x:0: tester:x:1001: tester2:x:1002: nogroup:x:65534: >"$r/etc/group"
}
build_image "$PAUSE_IMAGE" "$KB/images/pause.tar" '["/bin/sleep","2147483647"]' pause_root
build_image "$JOB_IMAGE" "$KB/images/job.tar" '["/bin/sh"]' job_root
# the MPI job image (python3 + Open MPI, for srun/mpirun across ranks): from this machine's
# Debian packages, cached across runs (build_mpi_image.py says why and how)
MPI_TAR=$(python3 "$KUBELET_TESTENV_DIR/build_mpi_image.py" "$MPI_IMAGE" "$IMAGE_CACHE")
ln -sf "$MPI_TAR" "$KB/images/mpi.tar"

# --- the API server inside the namespaces: 127.0.0.1:$API_PORT there -> a Unix socket -> here
step api-forward
start_bg socat "$KB/run/api-forward.pid" "$KB/logs/api-forward.log" \
  socat "UNIX-LISTEN:$KB/run/api.sock,fork,unlink-early,mode=600" "TCP:127.0.0.1:$API_PORT"
for ((i = 1; i <= KUBELET_NODES; i++)); do
  start_bg socat "$KB/run/api-forward-$i.pid" "$KB/logs/api-forward.log" \
    nsenter --net="/run/netns/$(netns_of "$i")" socat \
    "TCP-LISTEN:$API_PORT,bind=127.0.0.1,fork,reuseaddr" "UNIX-CONNECT:$KB/run/api.sock"
done

# --- identities: one service account per kubelet, bound to the built-in system:node role ----
# (the API server has static tokens and no client CA; the Node authorizer only knows
# system:node:<name> identities, so RBAC's system:node role grants what a kubelet needs)
step identities
# The API server reaches the kubelets (logs, exec) with a client certificate signed by this CA
# (testenv/k8s/up.sh makes both); without the file, x509 client authentication stays off.
CLIENT_CA=$BASE/pki/kubelet-client-ca.crt
[ -f "$CLIENT_CA" ] || CLIENT_CA=
{
  cat <<YAML
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: "caldera:kube-apiserver-kubelet-client"}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: "system:kubelet-api-admin"}
subjects: [{apiGroup: rbac.authorization.k8s.io, kind: User, name: kube-apiserver-kubelet-client}]
YAML
  for ((i = 1; i <= KUBELET_NODES; i++)); do
    n=$(node_name "$i")
    cat <<YAML
---
apiVersion: v1
kind: ServiceAccount
metadata: {name: $n, namespace: kube-system}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: "caldera:kubelet:$n"}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: "system:node"}
subjects: [{kind: ServiceAccount, name: $n, namespace: kube-system}]
YAML
  done
} | "${KUBECTL[@]}" apply -f - >/dev/null

# --- per node: containerd, images, kubelet -----------------------------------------------
step nodes
since=()
# $KB as a shared mount, so that mounts made in the kubelets' mount namespaces (pod volumes)
# appear in containerd's (this one); and the mount point of the kubelets' device plugin dir
if ! awk -v b="$KB" '$5 == b {found = 1} END {exit !found}' /proc/self/mountinfo; then
  mount --bind "$KB" "$KB"
fi
mount --make-shared "$KB"
mkdir -p /var/lib/kubelet/device-plugins
for ((i = 1; i <= KUBELET_NODES; i++)); do
  n=$(node_name "$i") ns=$(netns_of "$i") d=$(node_dir "$i") ip=$(node_ip "$i")
  mkdir -p "$d"/{containerd,cni/net.d,cni/ipam,kubelet,runc}
  sock=$d/containerd/containerd.sock
  cat >"$d/containerd/config.toml" <<TOML
version = 2
root = "$d/containerd/root"
state = "$d/containerd/state"
[grpc]
  address = "$sock"
[ttrpc]
  address = "$sock.ttrpc"
[debug]
  level = "warn"
[metrics]
  address = ""
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "$PAUSE_IMAGE"
  restrict_oom_score_adj = true
  tolerate_missing_hugetlb_controller = true
  disable_hugetlb_controller = true
  enable_selinux = false
  disable_apparmor = true
  netns_mounts_under_state_dir = true  # pod namespaces under state, not /run/netns
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "$CNI_BIN"
    conf_dir = "$d/cni/net.d"
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
        Root = "$d/runc"
TOML
  cat >"$d/cni/net.d/10-caldera.conflist" <<JSON
{
  "cniVersion": "0.4.0",
  "name": "$PREFIX-pods",
  "plugins": [
    {
      "type": "bridge", "bridge": "cni0", "isGateway": true, "ipMasq": false, "hairpinMode": true,
      "ipam": {"type": "host-local", "dataDir": "$d/cni/ipam",
               "ranges": [[{"subnet": "$(pod_cidr "$i")"}]], "routes": [{"dst": "0.0.0.0/0"}]}
    }
  ]
}
JSON
  start_bg containerd "$d/containerd.pid" "$KB/logs/containerd-$n.log" \
    nsenter --net="/run/netns/$ns" containerd --config "$d/containerd/config.toml"
done
for ((i = 1; i <= KUBELET_NODES; i++)); do
  n=$(node_name "$i") d=$(node_dir "$i")
  sock=$d/containerd/containerd.sock
  wait_for "containerd of $n" 60 "$KB/logs/containerd-$n.log" ctr -a "$sock" version
  for img in pause job mpi; do
    ref=$PAUSE_IMAGE
    [ $img = job ] && ref=$JOB_IMAGE
    [ $img = mpi ] && ref=$MPI_IMAGE
    grep -qx "$ref" <<<"$(ctr -a "$sock" -n k8s.io images ls -q)" ||
      ctr -a "$sock" -n k8s.io images import "$KB/images/$img.tar" >/dev/null
  done
done

for ((i = 1; i <= KUBELET_NODES; i++)); do
  n=$(node_name "$i") ns=$(netns_of "$i") d=$(node_dir "$i") ip=$(node_ip "$i")
  if [ ! -s "$d/kubelet/token" ]; then
    "${KUBECTL[@]}" -n kube-system create token "$n" --duration=8760h >"$d/kubelet/token.tmp"
    chmod 600 "$d/kubelet/token.tmp" && mv "$d/kubelet/token.tmp" "$d/kubelet/token"
  fi
  cat >"$d/kubelet/kubeconfig" <<YAML
apiVersion: v1
kind: Config
clusters:
- name: caldera-k8s
  cluster: {server: "https://127.0.0.1:$API_PORT", certificate-authority: "$CA"}
users:
- name: $n
  user: {tokenFile: "$d/kubelet/token"}
contexts:
- name: $n
  context: {cluster: caldera-k8s, user: $n}
current-context: $n
YAML
  chmod 600 "$d/kubelet/kubeconfig"
  cat >"$d/kubelet/config.yaml" <<YAML
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: $ip
port: 10250
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: 10248
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: true, cacheTTL: 10s}
  x509: {clientCAFile: "$CLIENT_CA"}
authorization:
  mode: Webhook
  webhook: {cacheAuthorizedTTL: 10s, cacheUnauthorizedTTL: 5s}
enableDebuggingHandlers: true
containerRuntimeEndpoint: unix://$d/containerd/containerd.sock
cgroupDriver: cgroupfs
cgroupRoot: /$PREFIX-$n
cgroupsPerQOS: true
failSwapOn: false
podCIDR: $(pod_cidr "$i")
maxPods: 50
resolvConf: /etc/resolv.conf
serializeImagePulls: false
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
evictionHard: {memory.available: "100Mi", nodefs.available: "1%", imagefs.available: "1%"}
nodeStatusReportFrequency: 10s
nodeStatusUpdateFrequency: 2s  # readiness changes reach the API server within 2 s
syncFrequency: 10s
fileCheckFrequency: 10s
registerNode: true
podLogsDir: $d/pod-logs  # not /var/log/pods: each kubelet GCs log dirs of pods it does not know
YAML
  # cgroupRoot must exist in every hierarchy (cgroup v1 here); cpuset needs its cpus/mems set
  for c in /sys/fs/cgroup/*/; do
    [ -d "$c$PREFIX-$n" ] || mkdir "$c$PREFIX-$n"
  done
  if [ -f /sys/fs/cgroup/cpuset/cpuset.cpus ]; then
    cat /sys/fs/cgroup/cpuset/cpuset.cpus >"/sys/fs/cgroup/cpuset/$PREFIX-$n/cpuset.cpus"
    cat /sys/fs/cgroup/cpuset/cpuset.mems >"/sys/fs/cgroup/cpuset/$PREFIX-$n/cpuset.mems"
  fi
  # Its own mount namespace too: the kubelet's device manager socket and checkpoint are at a
  # fixed path (/var/lib/kubelet/device-plugins), which each kubelet gets from its node
  # directory by a bind mount that stays private to it; its volume mounts under $KB still
  # reach containerd because $KB is a shared mount (above) and unshare keeps propagation.
  mkdir -p "$d/device-plugins"
  # shellcheck disable=SC2016  # $1 and $@ are the inner shell's
  start_bg kubelet "$d/kubelet.pid" "$KB/logs/kubelet-$n.log" \
    nsenter --net="/run/netns/$ns" unshare --mount --propagation unchanged -- \
    /bin/sh -c 'mount --bind "$1" /var/lib/kubelet/device-plugins && shift && exec "$@"' sh \
    "$d/device-plugins" "$BIN/kubelet" \
    --config="$d/kubelet/config.yaml" --kubeconfig="$d/kubelet/kubeconfig" \
    --root-dir="$d/kubelet/root" --cert-dir="$d/kubelet/pki" \
    --hostname-override="$n" --node-ip="$ip" \
    --pod-infra-container-image="$PAUSE_IMAGE" \
    --node-labels="type=kubelet,caldera.io/partition=$NODE_LABEL_PARTITION" \
    --v=1
  # a kubelet started now must report Ready itself: the Node may still say Ready from before
  since[i]=1970-01-01T00:00:00Z
  [ "$STARTED" = 1 ] && since[i]=$(date -u +%FT%TZ)
done

step device-plugins
# fake devices, as the Slurm test nodes have: character devices made with mknod (GPUs major
# 195 like /dev/nvidiaN, HCAs major 231 minor 192+N like /dev/infiniband/uverbsN)
for ((i = 1; i <= KUBELET_NODES; i++)); do
  d=$(node_dir "$i")
  mkdir -p "$d/dev"
  for ((g = 0; g < KUBELET_GPUS; g++)); do
    [ -c "$d/dev/nvidia$g" ] || mknod -m 666 "$d/dev/nvidia$g" c 195 "$g"
  done
  for ((h = 0; h < KUBELET_HCAS; h++)); do
    [ -c "$d/dev/uverbs$h" ] || mknod -m 666 "$d/dev/uverbs$h" c 231 $((192 + h))
  done
  start_bg python3 "$d/device-plugin.pid" "$KB/logs/device-plugin-$(node_name "$i").log" \
    python3 "$KUBELET_TESTENV_DIR/fake_device_plugin.py" --plugin-dir "$d/device-plugins" \
    --dev-dir "$d/dev" --gpus "$KUBELET_GPUS" --hcas "$KUBELET_HCAS"
done

step ready
node_ready() { # node_ready NAME [SINCE]: Ready, with a heartbeat at or after SINCE (RFC 3339)
  local status beat
  read -r status beat < <("${KUBECTL[@]}" get node "$1" \
    -o jsonpath='{.status.conditions[?(@.type=="Ready")].status} {.status.conditions[?(@.type=="Ready")].lastHeartbeatTime}') || true  # no newline at the end: read says 1
  [ "${status:-}" = True ] && [[ ! $beat < ${2:-} ]]
}
node_has_devices() {
  [ "$("${KUBECTL[@]}" get node "$1" -o jsonpath='{.status.allocatable.nvidia\.com/gpu} {.status.allocatable.rdma/hca}')" = "$KUBELET_GPUS $KUBELET_HCAS" ]
}
node_ready_or_dead() { node_ready "$1" "$3" || ! pid_ok "$2" kubelet; }
for ((i = 1; i <= KUBELET_NODES; i++)); do
  n=$(node_name "$i")
  wait_for "node $n Ready" 120 "$KB/logs/kubelet-$n.log" node_ready_or_dead "$n" "$(node_dir "$i")/kubelet.pid" "${since[i]}"
  node_ready "$n" "${since[i]}" || { tail -n 30 "$KB/logs/kubelet-$n.log" >&2; die "the kubelet of $n exited"; }
  wait_for "fake GPUs and HCAs on $n" 60 "$KB/logs/device-plugin-$n.log" node_has_devices "$n"
done

step env.json
{
  echo '{'
  echo "  \"k8s_base\": \"$BASE\", \"base_dir\": \"$KB\", \"partition\": \"$NODE_LABEL_PARTITION\","
  echo "  \"job_image\": \"$JOB_IMAGE\", \"pause_image\": \"$PAUSE_IMAGE\", \"kubelet_port\": 10250,"
  echo "  \"mpi_image\": \"$MPI_IMAGE\","
  echo "  \"gpus_per_node\": $KUBELET_GPUS, \"hcas_per_node\": $KUBELET_HCAS,"
  echo '  "nodes": ['
  for ((i = 1; i <= KUBELET_NODES; i++)); do
    sep=,
    [ "$i" = "$KUBELET_NODES" ] && sep=
    echo "    {\"name\": \"$(node_name "$i")\", \"ip\": \"$(node_ip "$i")\", \"netns\": \"$(netns_of "$i")\", \"pod_cidr\": \"$(pod_cidr "$i")\", \"containerd\": \"$(node_dir "$i")/containerd/containerd.sock\", \"cgroup_root\": \"/$PREFIX-$(node_name "$i")\"}$sep"
  done
  echo '  ]'
  echo '}'
} >"$KB/env.json.tmp"
mv "$KB/env.json.tmp" "$KB/env.json"
step finish
log "$KUBELET_NODES kubelet node(s) Ready in $(elapsed "$total_start") (state in $KB)"
