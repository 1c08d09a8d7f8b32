#!/usr/bin/env bash
# Install what the container tests need, from Debian's packages and PyPI only:
# podman (serving the Docker API), runc (crun cannot run on hybrid cgroup v1 hosts),
# busybox-static (the root filesystem of the local test image), and the docker SDK.
# Idempotent: does nothing when everything is already there. Needs root.
set -euo pipefail

need=()
command -v podman >/dev/null 2>&1 || need+=(podman)
command -v runc >/dev/null 2>&1 || need+=(runc)
[ -x /bin/busybox ] || need+=(busybox-static)
dpkg -s uidmap >/dev/null 2>&1 || need+=(uidmap)
dpkg -s containernetworking-plugins >/dev/null 2>&1 || need+=(containernetworking-plugins)
dpkg -s catatonit >/dev/null 2>&1 || need+=(catatonit)

if [ "${#need[@]}" -gt 0 ]; then
    if [ "$(id -u)" -ne 0 ]; then
        echo "install.sh: missing ${need[*]}; run me as root" >&2
        exit 1
    fi
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi

python3 - <<'PY' || python3 -m pip install -q "docker>=7" "psutil>=5.9"
import docker, psutil  # noqa: F401
PY
echo "containers: podman $(podman --version | awk '{print $3}'), runc $(runc --version | awk 'NR==1{print $3}')"
