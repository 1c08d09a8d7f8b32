"""Bearer tokens for the dashboard's TCP listener, as slurmrestd's auth/jwt takes them.

On the Unix socket the kernel says who is calling (SO_PEERCRED); a TCP peer has no such
credentials, so there the caller shows a token. Tokens are HS256 JWTs signed with a key file
in $CALDERA_HOME (`jwt_hs256.key`, like Slurm's `jwt_hs256.key`, readable by the gateway's
user only) and name the user in the `sun` claim as Slurm's do, so a site that already hands
out `scontrol token` output to scripts gets the same shape (`SLURM_JWT=...`). They are
minted over the Unix socket only (`caldera token`), where the peer's identity is known.

Verification refuses anything but HS256 (no `alg: none`, no confusion with other
algorithms), a bad signature (constant-time compare), a missing or past `exp`, and a user
that no longer exists.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
import math
import os
import pwd
import secrets
import stat
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = [
    "DEFAULT_LIFESPAN_S",
    "KEY_NAME",
    "MAX_LIFESPAN_S",
    "TokenError",
    "TokenUser",
    "bearer_from",
    "issue_token",
    "load_key",
    "verify_token",
]

KEY_NAME = "jwt_hs256.key"
DEFAULT_LIFESPAN_S = 1800  # scontrol token's default
MAX_LIFESPAN_S = 7 * 24 * 3600
MAX_TOKEN_CHARS = 4096
_KEY_BYTES = 32
_SKEW_S = 60  # clocks of the minting and checking hosts may differ a little


class TokenError(Exception):
    """The token is missing, malformed, forged, expired, or names no user; the message
    says which (for the log; the client is told only that access is denied)."""


@dataclass(frozen=True, slots=True)
class TokenUser:
    """Who a verified token speaks for."""

    user: str
    uid: int
    gid: int
    expires: float


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def _unb64(text: str) -> bytes:
    try:
        return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    except (binascii.Error, ValueError):
        raise TokenError("not base64url") from None


def load_key(path: Path, create: bool = True) -> bytes:
    """The signing key; made (32 random bytes, mode 0600) when missing and `create`.

    A key others can read or write would let them mint tokens for anyone, so such a file
    is refused rather than used, as ssh refuses a private key open to others."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except FileNotFoundError:
        if not create:
            raise
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        try:
            os.write(fd, secrets.token_bytes(_KEY_BYTES))
        finally:
            os.close(fd)
        return load_key(path, create=False)
    try:
        info = os.fstat(fd)
        if info.st_uid != os.geteuid() or info.st_mode & (stat.S_IRWXG | stat.S_IRWXO):
            raise PermissionError(
                f"{path}: the JWT key must belong to uid {os.geteuid()} with mode 0600"
            )
        key = os.read(fd, 4096)
    finally:
        os.close(fd)
    if len(key) < _KEY_BYTES:
        raise PermissionError(f"{path}: the JWT key is shorter than {_KEY_BYTES} bytes")
    return key


def issue_token(key: bytes, user: str, lifespan_s: int, now: float | None = None) -> str:
    """A token for `user` valid for `lifespan_s` seconds (claims as Slurm's: iat, exp, sun)."""
    at = time.time() if now is None else now
    header = _b64(json.dumps({"alg": "HS256", "typ": "JWT"}, separators=(",", ":")).encode())
    # whole seconds, as Slurm's; the expiry rounded up so a token never lives shorter than
    # asked (iat + lifespan would cut up to a second off a 1 s token)
    claims = {"iat": int(at), "exp": math.ceil(at + lifespan_s), "sun": user}
    body = _b64(json.dumps(claims, separators=(",", ":")).encode())
    signing = f"{header}.{body}".encode("ascii")
    sig = _b64(hmac.new(key, signing, hashlib.sha256).digest())
    return f"{header}.{body}.{sig}"


def _json_part(text: str) -> dict[str, Any]:
    try:
        value = json.loads(_unb64(text))
    except (UnicodeDecodeError, ValueError):
        raise TokenError("not JSON") from None
    if not isinstance(value, dict):
        raise TokenError("not a JSON object")
    return value


def verify_token(key: bytes, token: str, now: float | None = None) -> TokenUser:
    """The user a token speaks for, or TokenError."""
    if not token or len(token) > MAX_TOKEN_CHARS:
        raise TokenError("no token, or one too long")
    parts = token.split(".")
    if len(parts) != 3:
        raise TokenError("not a JWT (three parts)")
    header = _json_part(parts[0])
    if header.get("alg") != "HS256":
        raise TokenError(f"algorithm {header.get('alg')!r} refused (HS256 only)")
    expected = hmac.new(key, f"{parts[0]}.{parts[1]}".encode("ascii"), hashlib.sha256).digest()
    if not hmac.compare_digest(expected, _unb64(parts[2])):
        raise TokenError("bad signature")
    claims = _json_part(parts[1])
    exp, iat, user = claims.get("exp"), claims.get("iat", 0), claims.get("sun")
    if not isinstance(exp, int | float) or isinstance(exp, bool):
        raise TokenError("no expiry (exp)")
    at = time.time() if now is None else now
    if at >= exp:
        raise TokenError("expired")
    if isinstance(iat, int | float) and iat > at + _SKEW_S:
        raise TokenError("issued in the future")
    if not isinstance(user, str) or not user:
        raise TokenError("no user name (sun)")
    try:
        entry = pwd.getpwnam(user)
    except KeyError:
        raise TokenError(f"unknown user {user!r}") from None
    return TokenUser(user, entry.pw_uid, entry.pw_gid, float(exp))


def bearer_from(headers: dict[str, str]) -> str | None:
    """The token of a request: `Authorization: Bearer T` or slurmrestd's
    `X-SLURM-USER-TOKEN: T` (header names lower-cased, as ASGI gives them)."""
    auth = headers.get("authorization", "")
    scheme, _, value = auth.partition(" ")
    if scheme.lower() == "bearer" and value.strip():
        return value.strip()
    token = headers.get("x-slurm-user-token", "").strip()
    return token or None
