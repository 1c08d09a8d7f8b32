#!/usr/bin/env bash
# Start a real Kubernetes control plane on loopback for Caldera's tests:
#   etcd, kube-apiserver (RBAC + static tokens), kube-scheduler, kube-controller-manager,
#   KWOK with N simulated GPU/RDMA nodes, and with --volcano Volcano's CRDs, vc-scheduler
#   and vc-controller-manager.
#
# usage: up.sh [--volcano] [--nodes N] [--kwok-taint]
#
# Builds the binaries first if they are not cached (build.sh). Idempotent: components already
# running are left alone, dead ones (stale pid files) are restarted, and the node set is made
# to match --nodes. State lives under ${CALDERA_K8S_BASE:-/tmp/caldera-k8s}; env.json there
# describes the running environment (server URL, CA, tokens, kubeconfigs). down.sh stops it.
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=lib.sh
source "$(dirname "$0")/lib.sh"

volcano=0
nodes=8
kwok_taint=${CALDERA_K8S_KWOK_TAINT:-0}
while [ $# -gt 0 ]; do
  case $1 in
    --volcano) volcano=1 ;;
    --nodes) nodes=${2:?--nodes needs a number}; shift ;;
    --nodes=*) nodes=${1#--nodes=} ;;
    --kwok-taint) kwok_taint=1 ;;
    -h | --help) sed -n '2,13p' "$0"; exit 0 ;;
    *) die "unknown argument $1" ;;
  esac
  shift
done
if ! [[ $nodes =~ ^[0-9]+$ ]] || [ "$nodes" -lt 1 ]; then die "--nodes must be a positive integer"; fi

# Simulated node shape (same for every node).
NODE_CPU=${CALDERA_K8S_NODE_CPU:-64}
NODE_MEMORY=${CALDERA_K8S_NODE_MEMORY:-512Gi}
NODE_PODS=${CALDERA_K8S_NODE_PODS:-110}
NODE_GPUS=${CALDERA_K8S_NODE_GPUS:-8}
NODE_HCAS=${CALDERA_K8S_NODE_HCAS:-8}
GPU_PRODUCT=${CALDERA_K8S_GPU_PRODUCT:-NVIDIA-A100-SXM4-80GB}
GPU_MEMORY_MIB=${CALDERA_K8S_GPU_MEMORY_MIB:-81920}
NODES_PER_LEAF=${CALDERA_K8S_NODES_PER_LEAF:-2}
LEAVES_PER_SPINE=${CALDERA_K8S_LEAVES_PER_SPINE:-2}

total_start=$(now_ms)
step_start=$total_start
step() { # step NAME: report the previous step's time, start timing the next
  [ -n "${step_name:-}" ] && log "step $step_name: $(elapsed "$step_start")"
  step_name=$1
  step_start=$(now_ms)
}

mkdir -p "$BASE"/{run,logs,pki,kubeconfig}
exec 8>"$BASE/.lock"
flock 8

step build
what=core
[ "$volcano" = 1 ] && what=all
DIR=$("$K8S_TESTENV_DIR/build.sh" "$what")
BIN=$DIR/bin
KUBECTL=("$BIN/kubectl" --kubeconfig "$BASE/kubeconfig/admin.kubeconfig")
SERVER=https://127.0.0.1:$API_PORT
CA=$BASE/pki/apiserver/apiserver.crt

# --- process helpers -------------------------------------------------------------------
pid_of() { cat "$BASE/run/$1.pid" 2>/dev/null || true; }
is_running() { # is_running NAME: the pid file names a live process of that binary
  local pid
  pid=$(pid_of "$1")
  [ -n "$pid" ] && [ "$(basename "$(readlink "/proc/$pid/exe" 2>/dev/null)")" = "$1" ]
}
start_daemon() { # start_daemon NAME ARGS...: start $BIN/NAME unless running
  local name=$1
  shift
  if is_running "$name"; then
    log "$name already running (pid $(pid_of "$name"))"
    return 0
  fi
  rm -f "$BASE/run/$name.pid"
  echo "--- $(date -u +%FT%TZ) starting $name" >>"$BASE/logs/$name.log"
  # KUBECONFIG too: some Volcano packages build a client from it (or ~/.kube/config) at init.
  KUBECONFIG=$BASE/kubeconfig/admin.kubeconfig setsid "$BIN/$name" "$@" </dev/null >>"$BASE/logs/$name.log" 2>&1 8>&- &
  echo $! >"$BASE/run/$name.pid"
  log "$name started (pid $!, log $BASE/logs/$name.log)"
}
wait_for() { # wait_for DESCRIPTION TIMEOUT_S NAME-OF-PROCESS-TO-WATCH CMD...
  local desc=$1 timeout=$2 proc=$3 deadline
  shift 3
  deadline=$(($(date +%s) + timeout))
  until "$@" >/dev/null 2>&1; do
    if [ -n "$proc" ] && ! is_running "$proc"; then
      tail -n 30 "$BASE/logs/$proc.log" >&2 || true
      die "$proc exited while waiting for $desc (log: $BASE/logs/$proc.log)"
    fi
    [ "$(date +%s)" -lt "$deadline" ] || die "timed out after ${timeout}s waiting for $desc"
    sleep 0.2
  done
}
port_free_or_ours() { # port_free_or_ours PORT NAME: fail clearly if a stranger holds the port
  local holder
  is_running "$2" && return 0
  holder=$(ss -Hltnp "sport = :$1" 2>/dev/null | head -n 1)
  [ -z "$holder" ] || die "port $1 (for $2) is taken: $holder. Set CALDERA_K8S_*_PORT or stop it."
}

# --- credentials (made once per base dir) ----------------------------------------------
step credentials
if [ ! -f "$BASE/pki/sa.key" ]; then
  openssl genrsa -out "$BASE/pki/sa.key" 2048 2>/dev/null
  openssl rsa -in "$BASE/pki/sa.key" -pubout -out "$BASE/pki/sa.pub" 2>/dev/null
fi
# The API server's client certificate towards kubelets (logs, exec, port-forward on the real
# nodes of testenv/kubelet, which trust kubelet-client-ca.crt and ask the API server whether
# user kube-apiserver-kubelet-client may): a CA and one certificate signed by it.
if [ ! -f "$BASE/pki/kubelet-client.crt" ]; then
  openssl req -x509 -newkey rsa:2048 -nodes -days 3650 -subj "/CN=caldera-kubelet-client-ca" \
    -keyout "$BASE/pki/kubelet-client-ca.key" -out "$BASE/pki/kubelet-client-ca.crt" 2>/dev/null
  openssl req -newkey rsa:2048 -nodes -subj "/CN=kube-apiserver-kubelet-client" \
    -keyout "$BASE/pki/kubelet-client.key" -out "$BASE/pki/kubelet-client.csr" 2>/dev/null
  openssl x509 -req -in "$BASE/pki/kubelet-client.csr" -days 3650 -CAcreateserial \
    -CA "$BASE/pki/kubelet-client-ca.crt" -CAkey "$BASE/pki/kubelet-client-ca.key" \
    -extfile <(printf 'extendedKeyUsage=clientAuth\nkeyUsage=digitalSignature,keyEncipherment\n') \
    -out "$BASE/pki/kubelet-client.crt.tmp" 2>/dev/null
  chmod 600 "$BASE/pki/kubelet-client.key" "$BASE/pki/kubelet-client-ca.key"
  mv "$BASE/pki/kubelet-client.crt.tmp" "$BASE/pki/kubelet-client.crt"
fi
if [ ! -f "$BASE/pki/tokens.csv" ]; then
  # token,user,uid,"groups" (kube-apiserver --token-auth-file format)
  {
    echo "$(openssl rand -hex 24),admin,caldera-admin,\"system:masters\""
    echo "$(openssl rand -hex 24),alice,caldera-alice,\"caldera:users\""
    echo "$(openssl rand -hex 24),bob,caldera-bob,\"caldera:users\""
  } >"$BASE/pki/tokens.csv.tmp"
  chmod 600 "$BASE/pki/tokens.csv.tmp"
  mv "$BASE/pki/tokens.csv.tmp" "$BASE/pki/tokens.csv"
fi
token_of() { awk -F, -v u="$1" '$2 == u {print $1}' "$BASE/pki/tokens.csv"; }
ADMIN_TOKEN=$(token_of admin)
write_kubeconfig() { # write_kubeconfig USER NAMESPACE
  local f="$BASE/kubeconfig/$1.kubeconfig"
  cat >"$f.tmp" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: caldera-k8s
  cluster:
    server: $SERVER
    certificate-authority: $CA
users:
- name: $1
  user:
    token: $(token_of "$1")
contexts:
- name: $1@caldera-k8s
  context:
    cluster: caldera-k8s
    user: $1
    namespace: $2
current-context: $1@caldera-k8s
EOF
  chmod 600 "$f.tmp"
  mv "$f.tmp" "$f"
}
write_kubeconfig admin default
write_kubeconfig alice alice
write_kubeconfig bob bob

# --- etcd ------------------------------------------------------------------------------
step etcd
port_free_or_ours "$ETCD_PORT" etcd
start_daemon etcd --name caldera-k8s --data-dir "$BASE/etcd-data" \
  --listen-client-urls "http://127.0.0.1:$ETCD_PORT" \
  --advertise-client-urls "http://127.0.0.1:$ETCD_PORT" \
  --listen-peer-urls "http://127.0.0.1:$ETCD_PEER_PORT" \
  --initial-advertise-peer-urls "http://127.0.0.1:$ETCD_PEER_PORT" \
  --initial-cluster "caldera-k8s=http://127.0.0.1:$ETCD_PEER_PORT" \
  --unsafe-no-fsync --log-level warn
wait_for "etcd health" 30 etcd curl -sf "http://127.0.0.1:$ETCD_PORT/health"

# --- kube-apiserver --------------------------------------------------------------------
step kube-apiserver
port_free_or_ours "$API_PORT" kube-apiserver
start_daemon kube-apiserver \
  --bind-address=127.0.0.1 --advertise-address=127.0.0.1 --secure-port="$API_PORT" \
  --etcd-servers="http://127.0.0.1:$ETCD_PORT" \
  --cert-dir="$BASE/pki/apiserver" \
  --token-auth-file="$BASE/pki/tokens.csv" \
  --authorization-mode=Node,RBAC \
  --service-account-issuer=https://kubernetes.default.svc.cluster.local \
  --service-account-key-file="$BASE/pki/sa.pub" \
  --service-account-signing-key-file="$BASE/pki/sa.key" \
  --service-cluster-ip-range=10.96.0.0/16 \
  --endpoint-reconciler-type=none \
  --kubelet-client-certificate="$BASE/pki/kubelet-client.crt" \
  --kubelet-client-key="$BASE/pki/kubelet-client.key" \
  --kubelet-preferred-address-types=InternalIP,Hostname \
  --allow-privileged=true \
  --profiling=false
healthy() { curl -sf --cacert "$CA" -H "Authorization: Bearer $ADMIN_TOKEN" "$SERVER/readyz"; }
wait_for "kube-apiserver /readyz" 90 kube-apiserver healthy
# Bootstrap RBAC (system:* roles) is created by a post-start hook; wait for what we rely on.
wait_for "bootstrap RBAC" 30 kube-apiserver "${KUBECTL[@]}" get clusterrole admin

step rbac
"${KUBECTL[@]}" apply -f "$K8S_TESTENV_DIR/manifests/rbac.yaml" >/dev/null

# --- scheduler and controller manager --------------------------------------------------
step controllers
ADMIN_KC=$BASE/kubeconfig/admin.kubeconfig
port_free_or_ours "$SCHED_PORT" kube-scheduler
# No --authentication/authorization-kubeconfig: they only guard the components' own
# metrics endpoints and make them poll a configmap that a token-only API server never writes.
# KUBE_SCHEDULER_ARGS, KUBE_CONTROLLER_MANAGER_ARGS: extra flags (benchmarks give them the
# client rate Caldera gets: --kube-api-qps/--kube-api-burst)
# shellcheck disable=SC2086
start_daemon kube-scheduler --kubeconfig="$ADMIN_KC" \
  --bind-address=127.0.0.1 --secure-port="$SCHED_PORT" --leader-elect=false ${KUBE_SCHEDULER_ARGS:-}
port_free_or_ours "$KCM_PORT" kube-controller-manager
# shellcheck disable=SC2086
start_daemon kube-controller-manager --kubeconfig="$ADMIN_KC" \
  --bind-address=127.0.0.1 --secure-port="$KCM_PORT" --leader-elect=false \
  --service-account-private-key-file="$BASE/pki/sa.key" --root-ca-file="$CA" \
  --use-service-account-credentials=false \
  '--controllers=*,-service-lb-controller,-cloud-node-lifecycle-controller,-node-route-controller' \
  ${KUBE_CONTROLLER_MANAGER_ARGS:-}
# Only nodes annotated kwok.x-k8s.io/node=fake (manifests/node.yaml.tmpl): real kubelet nodes
# (testenv/kubelet) in the same cluster must not be taken over.
start_daemon kwok --kubeconfig="$ADMIN_KC" --manage-nodes-with-annotation-selector=kwok.x-k8s.io/node=fake \
  --config="$K8S_TESTENV_DIR/manifests/kwok-stages.yaml" \
  --cidr=10.244.0.1/16 --node-lease-duration-seconds=40
wait_for "kube-scheduler healthz" 30 kube-scheduler curl -skf "https://127.0.0.1:$SCHED_PORT/healthz"
wait_for "kube-controller-manager healthz" 30 kube-controller-manager \
  curl -skf "https://127.0.0.1:$KCM_PORT/healthz"

# --- simulated nodes -------------------------------------------------------------------
step nodes
node_name() { printf 'kwok-node-%0*d' "$(( ${#nodes} > 2 ? ${#nodes} : 2 ))" "$1"; }
taints=""
if [ "$kwok_taint" = 1 ]; then
  taints=$'  taints:\n  - key: kwok.x-k8s.io/node\n    value: fake\n    effect: NoSchedule'
fi
: >"$BASE/nodes.yaml"
wanted=()
for ((i = 1; i <= nodes; i++)); do
  name=$(node_name "$i")
  wanted+=("$name")
  leaf=$(((i - 1) / NODES_PER_LEAF))
  spine=$((leaf / LEAVES_PER_SPINE))
  {
    echo "---"
    sed -e "s|@NAME@|$name|g" -e "s|@LEAF@|leaf-$leaf|g" -e "s|@SPINE@|spine-$spine|g" \
      -e "s|@CPU@|$NODE_CPU|g" -e "s|@MEMORY@|$NODE_MEMORY|g" -e "s|@PODS@|$NODE_PODS|g" \
      -e "s|@GPUS@|$NODE_GPUS|g" -e "s|@HCAS@|$NODE_HCAS|g" \
      -e "s|@GPU_PRODUCT@|$GPU_PRODUCT|g" -e "s|@GPU_MEMORY_MIB@|$GPU_MEMORY_MIB|g" \
      -e "s|@POD_CIDR@|10.244.$((i % 256)).0/24|g" \
      -e "s|@NODE_IP@|10.250.$((i / 256)).$((i % 256))|g" \
      "$K8S_TESTENV_DIR/manifests/node.yaml.tmpl" |
      awk -v t="$taints" '$0 == "@TAINTS@" { if (t != "") print t; next } { print }'
  } >>"$BASE/nodes.yaml"
done
"${KUBECTL[@]}" apply -f "$BASE/nodes.yaml" >/dev/null
for n in $("${KUBECTL[@]}" get nodes -l type=kwok -o name); do
  n=${n#node/}
  [[ " ${wanted[*]} " == *" $n "* ]] || "${KUBECTL[@]}" delete node "$n" --wait=false >/dev/null
done
all_ready() {
  local ready
  ready=$("${KUBECTL[@]}" get nodes -l type=kwok \
    -o jsonpath='{range .items[*]}{.status.conditions[?(@.type=="Ready")].status}{"\n"}{end}' |
    grep -c True)
  [ "$ready" -eq "$nodes" ]
}
wait_for "$nodes nodes Ready" 60 kwok all_ready

# --- Volcano ---------------------------------------------------------------------------
if [ "$volcano" = 1 ]; then
  step volcano
  "${KUBECTL[@]}" apply --server-side --force-conflicts -f "$DIR/volcano/crds" >/dev/null
  "${KUBECTL[@]}" wait --for condition=established --timeout=60s -f "$DIR/volcano/crds" >/dev/null
  "${KUBECTL[@]}" get namespace volcano-system >/dev/null 2>&1 ||
    "${KUBECTL[@]}" create namespace volcano-system >/dev/null
  port_free_or_ours "$VC_SCHED_HEALTHZ_PORT" vc-scheduler
  start_daemon vc-scheduler --kubeconfig="$ADMIN_KC" \
    --scheduler-conf="$DIR/volcano/volcano-scheduler.conf" --leader-elect=false \
    --enable-healthz --healthz-address="127.0.0.1:$VC_SCHED_HEALTHZ_PORT" \
    --listen-address=127.0.0.1:0 --cache-dump-dir="$BASE/run"
  port_free_or_ours "$VC_CM_HEALTHZ_PORT" vc-controller-manager
  start_daemon vc-controller-manager --kubeconfig="$ADMIN_KC" --leader-elect=false \
    --enable-healthz --healthz-address="127.0.0.1:$VC_CM_HEALTHZ_PORT"
  wait_for "vc-scheduler healthz" 60 vc-scheduler \
    curl -sf "http://127.0.0.1:$VC_SCHED_HEALTHZ_PORT/healthz"
  wait_for "vc-controller-manager healthz" 60 vc-controller-manager \
    curl -sf "http://127.0.0.1:$VC_CM_HEALTHZ_PORT/healthz"
  wait_for "Volcano's default queue" 60 vc-scheduler "${KUBECTL[@]}" get queue default
fi

# --- describe the environment ----------------------------------------------------------
step env.json
volcano_running=false
is_running vc-scheduler && is_running vc-controller-manager && volcano_running=true
cat >"$BASE/env.json.tmp" <<EOF
{
  "server": "$SERVER",
  "ca_file": "$CA",
  "tokens": {"admin": "$ADMIN_TOKEN", "alice": "$(token_of alice)", "bob": "$(token_of bob)"},
  "kubeconfigs": {
    "admin": "$BASE/kubeconfig/admin.kubeconfig",
    "alice": "$BASE/kubeconfig/alice.kubeconfig",
    "bob": "$BASE/kubeconfig/bob.kubeconfig"
  },
  "nodes": $nodes,
  "volcano": $volcano_running,
  "bin_dir": "$BIN",
  "base_dir": "$BASE",
  "kubernetes_version": "$K8S_VERSION",
  "volcano_version": "$VOLCANO_VERSION",
  "kwok_version": "$KWOK_VERSION"
}
EOF
chmod 600 "$BASE/env.json.tmp"
mv "$BASE/env.json.tmp" "$BASE/env.json"
cat >"$BASE/env.sh" <<EOF
# source me: kubectl of the same minor, pointed at the test cluster as admin
export KUBECONFIG=$BASE/kubeconfig/admin.kubeconfig
export PATH=$BIN:\$PATH
EOF
step finish
log "environment up in $(elapsed "$total_start"): $SERVER, $nodes nodes, volcano=$volcano_running"
log "  source $BASE/env.sh  # then: kubectl get nodes"
