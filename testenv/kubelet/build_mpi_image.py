#!/usr/bin/env python3
"""Build the MPI job image (python3 + Open MPI) from this machine's Debian packages.

Why from the host's packages: no registry and no Debian mirror is needed, the host already
has what install.sh installs (python3, openmpi-bin), and copying the files of the packages'
dependency closure (`dpkg -L`) takes seconds where a debootstrap + apt run takes minutes.
The root filesystem is merged-/usr (bin, lib, lib64, sbin link into usr, as Debian 12), has
busybox applets for what the packages do not bring, and the test users (tester 1001,
tester2 1002). The docker-archive tarball is cached under CACHE/<key>.tar; the key hashes
the package names and versions and this file, so a package upgrade rebuilds it.

usage: build_mpi_image.py REF CACHE_DIR  -> prints the tarball's path
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOTS = ("python3-minimal", "python3.11", "openmpi-bin", "libc-bin")
SKIP_PREFIXES: tuple[str, ...] = ("/usr/share/doc", "/usr/share/man", "/usr/share/locale")
SKIP_PREFIXES += ("/usr/share/info", "/usr/share/lintian", "/usr/share/bug")
USERS = (
    "root:x:0:0:root:/root:/bin/sh",
    "tester:x:1001:1001:tester:/home/tester:/bin/sh",
    "tester2:x:1002:1002:tester2:/home/tester2:/bin/sh",
    "nobody:x:65534:65534:nobody:/nonexistent:/bin/false",
)
GROUPS = ("root:x:0:", "tester:x:1001:", "tester2:x:1002:", "nogroup:x:65534:")


def _query(fmt: str, *pkgs: str) -> str:
    return subprocess.run(
        ["dpkg-query", "-W", "-f", fmt, *pkgs], check=True, capture_output=True, text=True
    ).stdout


def installed() -> tuple[dict[str, str], dict[str, str]]:
    """Installed packages -> version, and virtual names -> a package providing them."""
    versions: dict[str, str] = {}
    provides: dict[str, str] = {}
    for line in _query("${Package}\t${Version}\t${db:Status-Abbrev}\t${Provides}\n").splitlines():
        name, version, status, prov = [*line.split("\t"), "", "", ""][:4]
        if not status.startswith("ii"):
            continue
        versions[name] = version
        for item in prov.split(","):
            virtual = item.strip().split(" ")[0].split(":")[0]
            if virtual:
                provides.setdefault(virtual, name)
    return versions, provides


def closure(roots: tuple[str, ...]) -> list[str]:
    """The roots and everything they depend on (installed alternatives only)."""
    versions, provides = installed()
    seen: set[str] = set()
    todo = list(roots)
    while todo:
        pkg = todo.pop()
        if pkg in seen:
            continue
        seen.add(pkg)
        deps = _query("${Depends},${Pre-Depends}", pkg)
        for group in deps.split(","):
            for alt in group.split("|"):
                name = alt.strip().split(" ")[0].split(":")[0]
                if not name:
                    continue
                name = name if name in versions else provides.get(name, "")
                if name:
                    todo.append(name)
                    break
    return sorted(seen)


def cache_key(pkgs: list[str]) -> str:
    versions, _ = installed()
    h = hashlib.sha256(Path(__file__).read_bytes())
    for p in pkgs:
        h.update(f"{p}={versions[p]}\n".encode())
    return h.hexdigest()[:16]


def files_of(pkgs: list[str]) -> list[str]:
    """Every regular file and symlink the packages installed (directories are implied)."""
    out: set[str] = set()
    for p in pkgs:
        listed = subprocess.run(["dpkg", "-L", p], capture_output=True, text=True).stdout
        for path in listed.splitlines():
            if not path.startswith("/") or path.startswith(SKIP_PREFIXES):
                continue
            if not os.path.isdir(path) and (os.path.islink(path) or os.path.isfile(path)):
                out.add(path)
    # update-alternatives links (/usr/bin/mpirun -> /etc/alternatives/mpirun -> ...) belong
    # to no package: take every alternative whose chosen file is in the image
    names = subprocess.run(
        ["update-alternatives", "--get-selections"], capture_output=True, text=True
    ).stdout
    for line in names.splitlines():
        query = subprocess.run(
            ["update-alternatives", "--query", line.split()[0]], capture_output=True, text=True
        ).stdout
        links: dict[str, str] = {}
        for q in query.splitlines():
            if q.startswith("Link: "):
                links[line.split()[0]] = q[6:].strip()
            elif q.startswith("Slaves:") or q == "":
                continue
            elif q.startswith(" ") and len(q.split()) == 2:
                slave, path = q.split()
                links[slave] = path
        for alt, link in links.items():
            chosen = f"/etc/alternatives/{alt}"
            if os.path.islink(chosen) and os.path.realpath(chosen) in out:
                out.update((chosen, link))
    return sorted(out)


def fill(root: Path, files: list[str]) -> None:
    for d in ("usr/bin", "usr/sbin", "usr/lib", "usr/lib64", "etc", "proc", "sys", "dev"):
        (root / d).mkdir(parents=True, exist_ok=True)
    for d in ("tmp", "root", "home/tester", "home/tester2", "work", "var/tmp"):
        (root / d).mkdir(parents=True, exist_ok=True)
    for link in ("bin", "sbin", "lib", "lib64"):
        (root / link).symlink_to(f"usr/{link}")
    os.chmod(root / "tmp", 0o1777)  # noqa: S103 - /tmp of the image, as on any system
    os.chmod(root / "var/tmp", 0o1777)  # noqa: S103
    for i, home in ((1001, "home/tester"), (1002, "home/tester2")):
        os.chown(root / home, i, i)
    listing = root.parent / "files.txt"
    listing.write_text("".join(f"{f.lstrip('/')}\n" for f in files))
    # tar follows the host's /bin -> usr/bin in path components; the image's own links stay
    tar_in = subprocess.Popen(
        ["tar", "-C", "/", "--no-recursion", "-cf", "-", "-T", str(listing)],
        stdout=subprocess.PIPE,
    )
    subprocess.run(
        ["tar", "-C", str(root), "--keep-directory-symlink", "-xf", "-"],
        stdin=tar_in.stdout,
        check=True,
    )
    if tar_in.wait() != 0:
        raise SystemExit("tar of the package files failed")
    shutil.copy("/bin/busybox", root / "usr/bin/busybox")
    applets = subprocess.run(
        [str(root / "usr/bin/busybox"), "--list"], capture_output=True, text=True, check=True
    ).stdout.split()
    for applet in applets:
        target = root / "usr/bin" / applet
        if not target.exists() and not target.is_symlink():
            target.symlink_to("busybox")
    for name in ("sh", "bash"):
        if not (root / "usr/bin" / name).exists():
            (root / "usr/bin" / name).symlink_to("busybox")
    (root / "etc/passwd").write_text("\n".join(USERS) + "\n")
    (root / "etc/group").write_text("\n".join(GROUPS) + "\n")
    (root / "etc/ld.so.conf").write_text("include /etc/ld.so.conf.d/*.conf\n")
    subprocess.run(["ldconfig", "-r", str(root)], check=True)


def archive(ref: str, root: Path, out: Path) -> None:
    """A docker-archive with one layer (what `ctr images import` reads)."""
    work = root.parent
    layer = work / "layer.tar"
    argv = ["tar", "--sort=name", "--mtime=@0", "--numeric-owner", "-C", str(root)]
    subprocess.run([*argv, "-cf", str(layer), "."], check=True)
    digest = hashlib.sha256()
    with layer.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    config = {
        "architecture": "amd64",
        "os": "linux",
        "config": {"Env": ["PATH=/usr/local/bin:/usr/bin:/bin"], "Cmd": ["/bin/sh"]},
        "rootfs": {"type": "layers", "diff_ids": [f"sha256:{digest.hexdigest()}"]},
    }
    (work / "config.json").write_text(json.dumps(config))
    manifest = [{"Config": "config.json", "RepoTags": [ref], "Layers": ["layer.tar"]}]
    (work / "manifest.json").write_text(json.dumps(manifest))
    tmp = out.with_suffix(".tmp")
    subprocess.run(
        ["tar", "-C", str(work), "-cf", str(tmp), "manifest.json", "config.json", "layer.tar"],
        check=True,
    )
    tmp.replace(out)


def main(argv: list[str]) -> int:
    ref, cache = argv[1], Path(argv[2])
    pkgs = closure(ROOTS)
    out = cache / f"mpi-{cache_key(pkgs)}.tar"
    if not out.is_file():
        cache.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(dir=cache) as work:
            root = Path(work) / "root"
            root.mkdir()
            fill(root, files_of(pkgs))
            archive(ref, root, out)
        for old in cache.glob("mpi-*.tar"):  # one image per machine: drop stale keys
            if old != out:
                old.unlink()
    print(out)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
