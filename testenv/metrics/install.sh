#!/usr/bin/env bash
# Install what the metrics tests need from Debian's packages: Prometheus (the server that
# scrapes the gateway's /metrics in tests/e2e/test_metrics_prometheus.py). The package's
# own service is not used: the test starts its own Prometheus on a loopback port with a
# private configuration and data directory.
# Idempotent: does nothing when Prometheus is already there. Needs root to install.
set -euo pipefail

if ! command -v prometheus >/dev/null 2>&1; then
    if [ "$(id -u)" -ne 0 ]; then
        echo "metrics/install.sh: prometheus is missing; run me as root" >&2
        exit 1
    fi
    export DEBIAN_FRONTEND=noninteractive
    apt-get -o DPkg::Lock::Timeout=600 update -qq
    # policy-rc.d 101: the package's postinst must not start the system-wide service
    # (it would hold port 9090 and scrape nothing the tests care about)
    rc=/usr/sbin/policy-rc.d
    made_rc=0
    if [ ! -e "$rc" ]; then
        printf '#!/bin/sh\nexit 101\n' >"$rc" && chmod 755 "$rc" && made_rc=1
    fi
    apt-get -o DPkg::Lock::Timeout=600 install -y -qq --no-install-recommends prometheus \
        >/tmp/caldera-metrics-install.log 2>&1 || {
        tail -30 /tmp/caldera-metrics-install.log >&2
        [ "$made_rc" = 1 ] && rm -f "$rc"
        exit 1
    }
    [ "$made_rc" = 1 ] && rm -f "$rc"
fi
echo "metrics: $(prometheus --version 2>&1 | head -1)"
