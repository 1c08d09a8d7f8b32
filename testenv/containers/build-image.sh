#!/usr/bin/env bash
# Build the local test image without any registry: a busybox root filesystem imported with
# `podman import`. `/bin/sh` and `/bin/bash` are busybox's ash. Idempotent.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
# shellcheck source=lib.sh
. "$here/lib.sh"
[ -f "$CONTAINERS_CONF" ] || write_containers_conf

if podman image exists "$IMAGE" && [ "${1:-}" != "--force" ]; then
    echo "$IMAGE"
    exit 0
fi
[ -x /bin/busybox ] || { echo "build-image.sh: /bin/busybox missing (testenv/containers/install.sh)" >&2; exit 1; }
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
root="$work/root"
mkdir -p "$root"/{bin,etc,proc,sys,dev,tmp,root,home,work}
chmod 1777 "$root/tmp"
cp /bin/busybox "$root/bin/busybox"
for applet in $("$root/bin/busybox" --list); do
    [ -e "$root/bin/$applet" ] || ln -s busybox "$root/bin/$applet"
done
ln -sf busybox "$root/bin/bash"
cat >"$root/etc/passwd" <<PW
root:x:0:0:root:/root:/bin/sh
tester:x:1001:1001:tester:/home/tester:/bin/sh
tester2:x:1002:1002:tester2:/home/tester2:/bin/sh
nobody:x:65534:65534:nobody:/nonexistent:/bin/false
PW
cat >"$root/etc/group" <<GR
root:x:0:
tester:x:1001:
tester2:x:1002:
nogroup:x:65534:
GR
echo "caldera-test" >"$root/etc/hostname"
tar -C "$root" -cf "$work/rootfs.tar" .
podman import --change 'CMD ["/bin/sh"]' --change 'ENV PATH=/bin' "$work/rootfs.tar" "$IMAGE" >/dev/null
echo "$IMAGE"
