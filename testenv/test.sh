#!/usr/bin/env bash
# The test command of the README: installs what the tests need (Debian packages, Python
# packages, the Kubernetes components built from upstream through the Go module proxy),
# starts the real Slurm cluster and the Podman Docker-API socket, and runs every test.
# Runs as root on a Debian 12 machine. Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
t0=$(date +%s)
step() { printf '[%s +%ss] %s\n' "$(date +%T)" "$(( $(date +%s) - t0 ))" "$*"; }

step "Debian packages"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
bash testenv/slurm/install.sh
if [ -x testenv/containers/install.sh ]; then bash testenv/containers/install.sh; fi
bash testenv/kubelet/install.sh  # containerd, runc, CNI plugins, socat (real kubelet nodes)
bash testenv/metrics/install.sh  # Debian's Prometheus (the /metrics e2e test)
bash testenv/dashboard/install.sh  # Debian's chromium + driver, selenium (dashboard e2e)

step "Python packages"
python3 -m pip install -q --upgrade pip >/dev/null 2>&1 || true
python3 -m pip install -q -e '.[test]'

step "Kubernetes components (cached after the first build)"
bash testenv/k8s/build.sh

step "Real Slurm cluster"
bash testenv/slurm/up.sh
# a fresh Podman service every run: one left behind by an interrupted run can answer pings
# and still fail to start containers ("write child: broken pipe")
if [ -x testenv/containers/down.sh ]; then bash testenv/containers/down.sh >/dev/null 2>&1 || true; fi
if [ -x testenv/containers/up.sh ]; then bash testenv/containers/up.sh; fi

cleanup() {
  step "stopping test services"
  bash testenv/k8s/down.sh >/dev/null 2>&1 || true
  # the kubelet nodes and their own control plane (tests/support/kubelet_env.py), if a test
  # run was interrupted before its session fixture stopped them
  CALDERA_K8S_BASE=/tmp/caldera-k8s-kubelet bash testenv/kubelet/down.sh >/dev/null 2>&1 || true
  CALDERA_K8S_BASE=/tmp/caldera-k8s-kubelet bash testenv/k8s/down.sh >/dev/null 2>&1 || true
  if [ -x testenv/containers/down.sh ]; then bash testenv/containers/down.sh >/dev/null 2>&1 || true; fi
  bash testenv/slurm/down.sh >/dev/null 2>&1 || true
}
trap cleanup EXIT

step "pytest"
# the same Hypothesis examples on every CI run (tests/conftest.py)
# pytest is interrupted (SIGINT: it still prints its summary) 5 minutes before CI's 90-minute
# limit, so a stall shows which tests ran instead of ending as a bare timeout.
budget=$(( 5400 - 300 - ($(date +%s) - t0) ))
CALDERA_HYPOTHESIS_PROFILE="${CALDERA_HYPOTHESIS_PROFILE:-ci}" \
  timeout -s INT -k 120 "$budget" python3 -m pytest -q -ra -p no:cacheprovider --durations=30 "$@"
