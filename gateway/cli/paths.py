"""Where the gateway's socket is, found with `posix` only (commands must start fast: the
`os` module alone costs about a millisecond of a ~7 ms interpreter start)."""

from __future__ import annotations

import posix

__all__ = ["environ", "socket_path"]


def environ() -> dict[str, str]:
    """The environment as `os.environ` decodes it (UTF-8, undecodable bytes escaped)."""
    return {
        k.decode("utf-8", "surrogateescape"): v.decode("utf-8", "surrogateescape")
        for k, v in posix.environ.items()
    }


def _join(directory: str, name: str) -> str:
    return directory + name if directory.endswith("/") else f"{directory}/{name}"


def _exists(path: str) -> bool:
    try:
        posix.stat(path)
    except OSError:
        return False
    return True


def socket_path() -> str:
    """`$CALDERA_SOCKET`, else the socket of `$CALDERA_HOME`, else the default home's."""
    env = posix.environ.get(b"CALDERA_SOCKET")
    if env:
        return env.decode("utf-8", "surrogateescape")
    home = posix.environ.get(b"CALDERA_HOME")
    if home:
        return _join(home.decode("utf-8", "surrogateescape"), "gateway.sock")
    system = "/var/lib/caldera/gateway.sock"
    if posix.geteuid() == 0 or _exists(system):
        return system
    import os.path  # rare: a user without CALDERA_HOME

    return os.path.join(os.path.expanduser("~"), ".caldera", "gateway.sock")
