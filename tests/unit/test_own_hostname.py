"""A batch script's host name is its batch host's (containers/proc.own_hostname): in a UTS
namespace of its own, so this machine's name never changes, and only as root."""

from __future__ import annotations

import os
import socket

import pytest

from containers.proc import own_hostname


def _in_child(node: str, uid: int | None = None) -> str:
    """The host name a forked child sees after own_hostname(node) (as uid, when given)."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # child
        try:
            os.close(read)
            if uid is not None:
                os.setuid(uid)
            own_hostname(node)
            os.write(write, socket.gethostname().encode())
        finally:
            os._exit(0)
    os.close(write)
    with os.fdopen(read, "rb") as fh:
        seen = fh.read().decode()
    os.waitpid(pid, 0)
    return seen


@pytest.mark.skipif(os.geteuid() != 0, reason="a UTS namespace needs root (CI runs as root)")
def test_the_child_is_named_after_its_node_and_the_machine_keeps_its_name() -> None:
    machine = socket.gethostname()
    assert _in_child("vnode07") == "vnode07"
    assert socket.gethostname() == machine
    assert _in_child("") == machine  # no name: nothing changes


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to become another uid")
def test_a_non_root_process_keeps_the_machines_name() -> None:
    assert _in_child("vnode07", uid=1001) == socket.gethostname()
