"""Sockets to the gateway connected by another local user, held by the test process.

SO_PEERCRED records the credentials of the process that called connect(), so a helper
running as `user` (through runuser) connects and hands the connected descriptors back over
a socketpair (SCM_RIGHTS): the test then speaks HTTP on them and the gateway sees `user`.
"""

from __future__ import annotations

import socket
import subprocess
from types import TracebackType

__all__ = ["UserSockets", "http_request"]

_BATCH = 200  # descriptors per message (the kernel takes at most 253)

_HELPER = r"""
import resource, socket, sys
_, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
chan = socket.socket(fileno=int(sys.argv[1]))
path, batch = sys.argv[2], int(sys.argv[3])
while True:
    msg = chan.recv(16)
    if not msg:
        break
    held = []
    for _ in range(int(msg)):
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.connect(path)
        held.append(s)
    for i in range(0, len(held), batch):
        socket.send_fds(chan, [b"k"], [s.fileno() for s in held[i : i + batch]])
    for s in held:
        s.close()
"""


class UserSockets:
    """A helper process running as `user` that connects to `path` on request."""

    def __init__(self, user: str, path: str) -> None:
        self._chan, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self._proc = subprocess.Popen(
            [
                "runuser",
                "-u",
                user,
                "--",
                "/usr/bin/python3",  # the system's: other users cannot reach pyenv's
                "-c",
                _HELPER,
                str(theirs.fileno()),
                path,
                str(_BATCH),
            ],
            pass_fds=[theirs.fileno()],
        )
        theirs.close()

    def connect(self, n: int = 1) -> list[socket.socket]:
        """`n` connections made by the user, in the order they were made."""
        self._chan.send(str(n).encode())
        out: list[socket.socket] = []
        while len(out) < n:
            _, fds, _, _ = socket.recv_fds(self._chan, 16, _BATCH)
            assert fds, "the connecting helper died"
            out.extend(socket.socket(fileno=fd) for fd in fds)
        return out

    def close(self) -> None:
        """Stop the helper."""
        self._chan.close()
        self._proc.wait(timeout=10)

    def __enter__(self) -> UserSockets:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


def http_request(
    sock: socket.socket,
    method: str,
    path: str,
    body: bytes | None = None,
    headers: dict[str, str] | None = None,
    timeout: float = 30,
) -> tuple[int, bytes]:
    """One HTTP/1.1 request on a connected socket: (status, body). Reads by Content-Length."""
    head = [f"{method} {path} HTTP/1.1", "Host: caldera"]
    for name, value in (headers or {}).items():
        head.append(f"{name}: {value}")
    if body is not None:
        head.append(f"Content-Length: {len(body)}")
        head.append("Content-Type: application/json")
    sock.settimeout(timeout)
    sock.sendall(("\r\n".join(head) + "\r\n\r\n").encode() + (body or b""))
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        if not chunk:
            raise ConnectionError(f"closed before an answer: {data!r}")
        data += chunk
    raw_head, rest = data.split(b"\r\n\r\n", 1)
    lines = raw_head.decode("latin-1").split("\r\n")
    status = int(lines[0].split()[1])
    length = 0
    for line in lines[1:]:
        name, _, value = line.partition(":")
        if name.strip().lower() == "content-length":
            length = int(value)
    while len(rest) < length:
        chunk = sock.recv(65536)
        if not chunk:
            break
        rest += chunk
    return status, rest[:length]
