#!/usr/bin/env bash
# Install what the real kubelet nodes need, from Debian's packages: containerd (1.6), runc,
# the CNI plugins (bridge, host-local), socat (the API server forwarder), busybox-static (the
# pause and job images' root filesystem), iproute2, iptables, python3 and openmpi-bin (the MPI
# job image's files). The kubelet itself is built by testenv/k8s/build.sh. Idempotent; needs
# root.
set -euo pipefail
need=()
# python3 and openmpi-bin: build_mpi_image.py copies them into the MPI job image
for pkg in containerd runc containernetworking-plugins socat busybox-static iproute2 iptables \
  util-linux python3 openmpi-bin; do
  dpkg -s "$pkg" >/dev/null 2>&1 || need+=("$pkg")
done
if [ "${#need[@]}" -gt 0 ]; then
  [ "$(id -u)" = 0 ] || { echo "install.sh: missing ${need[*]}; run me as root" >&2; exit 1; }
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi
# fake_device_plugin.py speaks the kubelet's gRPC device plugin API
python3 -c 'import grpc' 2>/dev/null || python3 -m pip install -q "grpcio>=1.60"
echo "kubelet nodes: containerd $(containerd --version | awk '{print $3}'), runc $(runc --version | awk 'NR==1{print $3}')"
