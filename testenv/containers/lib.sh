# Shared settings of testenv/containers (sourced).
BASE="${CALDERA_CONTAINERS_BASE:-/tmp/caldera-containers}"
SOCK="$BASE/podman.sock"
IMAGE="${CALDERA_TEST_IMAGE:-localhost/caldera-test:busybox}"
export CONTAINERS_CONF="$BASE/containers.conf"

write_containers_conf() {
    mkdir -p "$BASE/log"
    # runc, not crun (crun refuses hybrid cgroup v1 hosts); cgroupfs (no systemd);
    # ulimits within this machine's hard limits (no CAP_SYS_RESOURCE to raise them).
    local nofile
    nofile="$(ulimit -Hn)"
    [ "$nofile" = unlimited ] && nofile=20000
    [ "$nofile" -gt 20000 ] && nofile=20000
    cat >"$CONTAINERS_CONF.tmp" <<CONF
[containers]
default_ulimits = ["nofile=${nofile}:${nofile}", "nproc=20000:20000"]
[engine]
runtime = "runc"
cgroup_manager = "cgroupfs"
events_logger = "file"
CONF
    mv "$CONTAINERS_CONF.tmp" "$CONTAINERS_CONF"
}

ping_socket() {
    curl -fsS --max-time 5 --unix-socket "$SOCK" http://d/_ping >/dev/null 2>&1
}
