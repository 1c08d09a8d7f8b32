#!/usr/bin/env bash
# Install what the dashboard's browser tests need, from Debian's packages and PyPI only:
# chromium and chromium-driver (Debian's own build: no browser download) and selenium.
# Idempotent: does nothing when everything is already there. Needs root.
set -euo pipefail

need=()
command -v chromium >/dev/null 2>&1 || need+=(chromium)
command -v chromedriver >/dev/null 2>&1 || need+=(chromium-driver)
# fonts, so that screenshots show text rather than boxes
dpkg -s fonts-dejavu-core >/dev/null 2>&1 || need+=(fonts-dejavu-core)

if [ "${#need[@]}" -gt 0 ]; then
    if [ "$(id -u)" -ne 0 ]; then
        echo "dashboard/install.sh: missing ${need[*]}; run me as root" >&2
        exit 1
    fi
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi

python3 - <<'PY' || python3 -m pip install -q "selenium>=4.20"
import selenium  # noqa: F401
PY
echo "dashboard: $(chromium --version 2>/dev/null), $(chromedriver --version 2>/dev/null | awk '{print $1, $2}')"
