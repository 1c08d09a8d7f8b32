"""CURVE key pairs for the gateway (server) and the node agents (clients).

Files use ZeroMQ's certificate format (`zmq.auth.load_certificate` reads them):
`<name>.key` holds the public key, `<name>.key_secret` the public and the secret key. Both
are written with mode 0600 in a 0700 directory, and a secret file readable by group or
others is refused, as ssh refuses such a private key.

The gateway authorises agents by their public key files in one directory: the file name
(`node01.key`) names the node that key may report for.
"""

from __future__ import annotations

import datetime
import os
import stat
from dataclasses import dataclass
from pathlib import Path

import zmq
import zmq.auth

__all__ = [
    "KeyFileError",
    "KeyPair",
    "authorized_keys",
    "generate_keypair",
    "load_keypair",
    "load_public_key",
]


class KeyFileError(OSError):
    """A key file that is missing, malformed or too widely readable."""


@dataclass(frozen=True, slots=True)
class KeyPair:
    """A CURVE key pair (z85 text as bytes); `secret` is None for a public key only."""

    name: str
    public: bytes
    secret: bytes | None = None


def _write(path: Path, text: str, force: bool) -> None:
    flags = os.O_WRONLY | os.O_CREAT | (os.O_TRUNC if force else os.O_EXCL)
    try:
        fd = os.open(path, flags, 0o600)
    except FileExistsError as exc:
        raise KeyFileError(f"{path} exists (use force to replace it)") from exc
    with os.fdopen(fd, "w") as fh:
        fh.write(text)
    os.chmod(path, 0o600)


def _cert(name: str, public: bytes, secret: bytes | None) -> str:
    kind = "Secret" if secret is not None else "Public"
    when = datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")
    lines = [
        f"#   ****  Generated on {when} by Caldera  ****",
        f"#   ZeroMQ CURVE **{kind}** Certificate",
    ]
    if secret is not None:
        lines.append("#   DO NOT PROVIDE THIS FILE TO OTHER USERS nor change its permissions.")
    lines += [
        "",
        "metadata",
        f'    name = "{name}"',
        "curve",
        f'    public-key = "{public.decode()}"',
    ]
    if secret is not None:
        lines.append(f'    secret-key = "{secret.decode()}"')
    return "\n".join(lines) + "\n"


def generate_keypair(directory: str | Path, name: str, *, force: bool = False) -> KeyPair:
    """Make a key pair and write `<name>.key` and `<name>.key_secret` (0600) into
    `directory` (created 0700 when missing)."""
    if not name or "/" in name or name.startswith("."):
        raise KeyFileError(f"bad key name {name!r}")
    folder = Path(directory)
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    public, secret = zmq.curve_keypair()
    _write(folder / f"{name}.key", _cert(name, public, None), force)
    _write(folder / f"{name}.key_secret", _cert(name, public, secret), force)
    return KeyPair(name, public, secret)


def _load(path: Path) -> tuple[bytes, bytes | None]:
    try:
        public, secret = zmq.auth.load_certificate(str(path))
    except (OSError, ValueError) as exc:
        raise KeyFileError(f"cannot read key file {path}: {exc}") from exc
    if public is None or len(public) != 40:
        raise KeyFileError(f"{path} has no valid public-key")
    return public, secret


def load_keypair(path: str | Path) -> KeyPair:
    """A key pair from a `.key_secret` file; refuses one readable by group or others."""
    file = Path(path)
    try:
        mode = file.stat().st_mode
    except OSError as exc:
        raise KeyFileError(f"cannot read key file {file}: {exc}") from exc
    if mode & (stat.S_IRWXG | stat.S_IRWXO):
        raise KeyFileError(f"{file} is accessible by others (mode {mode & 0o777:o}); chmod 600 it")
    public, secret = _load(file)
    if secret is None or len(secret) != 40:
        raise KeyFileError(f"{file} has no secret-key")
    return KeyPair(file.name.split(".key")[0], public, secret)


def load_public_key(path: str | Path) -> bytes:
    """The public key (z85) in a `.key` or `.key_secret` file."""
    return _load(Path(path))[0]


def authorized_keys(directory: str | Path) -> dict[bytes, str]:
    """Public key (z85) -> node name, from every `<name>.key` in a directory."""
    out: dict[bytes, str] = {}
    folder = Path(directory)
    if not folder.is_dir():
        raise KeyFileError(f"no authorized-keys directory {folder}")
    for file in sorted(folder.glob("*.key")):
        out[load_public_key(file)] = file.name[: -len(".key")]
    return out
