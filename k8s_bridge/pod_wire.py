"""The rank agent's wire protocol (pure, standard library only): frames and the proof that a
client knows the job's token. Shipped into job pods beside pod_launcher.py (launch.py's
launcher ConfigMap), so it imports nothing of the caldera package.

Frames: one type byte, a 4-byte big-endian length, the payload (at most MAX_FRAME bytes).
A connection: the agent says HELLO with a fresh nonce; the client answers AUTH (the
request's SHA-256 digest and an HMAC-SHA256 of it with the nonce under the token), at most
AUTH_SIZE bytes read before the peer is authenticated; then REQUEST, the JSON whose digest
was proven; then the task's OUT/ERR frames and its EXIT (FAIL: refused or broken), and
SIGNAL frames the client forwards.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import struct
from typing import Protocol

MAX_FRAME = 8 << 20
AUTH_SIZE = 64  # an AUTH frame: a SHA-256 digest and an HMAC-SHA256
HELLO, AUTH, REQUEST, OUT, ERR, EXIT, SIGNAL, FAIL = (bytes([c]) for c in b"HARoexSF")
_HEADER = struct.Struct(">cI")
# rank 0's termination message: the container's terminationMessagePath (the default), one
# line per finished srun step (k8s_bridge/pod_steps.py), and the init's line when it ended
# the job at its time limit (pod_init.py; lifecycle.py reads TIMEOUT)
STEP_LOG = "/dev/termination-log"
STEP_RECORD = "caldera-step "
TIME_LIMIT_RECORD = "caldera-time-limit"

__all__ = [
    "AUTH",
    "AUTH_SIZE",
    "ERR",
    "EXIT",
    "FAIL",
    "HELLO",
    "MAX_FRAME",
    "OUT",
    "REQUEST",
    "SIGNAL",
    "STEP_LOG",
    "STEP_RECORD",
    "TIME_LIMIT_RECORD",
    "ProtocolError",
    "authentic",
    "frame",
    "matches",
    "parse_request",
    "proof",
    "read_frame",
]


class _Reader(Protocol):
    def read(self, size: int, /) -> bytes: ...


class ProtocolError(Exception):
    """A peer that does not speak the protocol (or not to the end)."""


def frame(kind: bytes, payload: bytes = b"") -> bytes:
    """One frame: type, length, payload."""
    if len(payload) > MAX_FRAME:
        raise ProtocolError(f"frame of {len(payload)} bytes is too large")
    return _HEADER.pack(kind, len(payload)) + payload


def read_frame(stream: _Reader, limit: int = MAX_FRAME) -> tuple[bytes, bytes]:
    """The next frame of `stream` (at most `limit` bytes); EOFError at a clean end,
    ProtocolError on a bad one."""
    head = stream.read(_HEADER.size)
    if not head:
        raise EOFError
    if len(head) < _HEADER.size:
        raise ProtocolError("truncated frame header")
    kind, size = _HEADER.unpack(head)
    if size > limit:
        raise ProtocolError(f"frame of {size} bytes is too large")
    payload = stream.read(size) if size else b""
    if len(payload) < size:
        raise ProtocolError("truncated frame")
    return kind, payload


def proof(token: bytes, nonce: bytes, request: bytes) -> bytes:
    """The AUTH frame of a client who knows the token, answering the agent's nonce for this
    request: the request's digest, then the HMAC binding the digest to the nonce."""
    digest = hashlib.sha256(request).digest()
    return digest + hmac.new(token, b"caldera-launch\0" + nonce + digest, hashlib.sha256).digest()


def authentic(token: bytes, nonce: bytes, answer: bytes) -> bool:
    """The AUTH frame proves the token (constant-time compare; an empty token proves
    nothing); the request that follows must then have its digest (`matches`)."""
    return (
        len(answer) == AUTH_SIZE
        and bool(token)
        and hmac.compare_digest(
            hmac.new(token, b"caldera-launch\0" + nonce + answer[:32], hashlib.sha256).digest(),
            answer[32:],
        )
    )


def matches(answer: bytes, request: bytes) -> bool:
    """The request is the one the AUTH frame was made for."""
    return hmac.compare_digest(hashlib.sha256(request).digest(), answer[:32])


def parse_request(payload: bytes) -> tuple[list[str], dict[str, str], str]:
    """argv (a list of strings, run as is), environment, working directory."""
    try:
        req = json.loads(payload)
        argv, env, cwd = req["argv"], req["env"], req.get("cwd") or "/"
    except (ValueError, KeyError, TypeError) as exc:
        raise ProtocolError(f"bad request: {exc}") from None
    if not (isinstance(argv, list) and argv and all(isinstance(a, str) for a in argv)):
        raise ProtocolError("bad request: argv must be a non-empty list of strings")
    if not (isinstance(env, dict) and all(isinstance(v, str) for v in env.values())):
        raise ProtocolError("bad request: env must map strings to strings")
    if not isinstance(cwd, str):
        raise ProtocolError("bad request: cwd must be a string")
    return argv, env, cwd
