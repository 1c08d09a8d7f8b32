"""The tail of a job's output file for its owner's dashboard page, read with the owner's
own ids: the path is the user's to name, so root never opens it (it runs `read_tail` in a
child that has become the job's user first)."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from containers.interpreter import shared_python

if TYPE_CHECKING:  # the child imports this module with the standard library only
    from gateway.model.job import Job

__all__ = ["TAIL_BYTES", "read_tail", "tail_as_owner"]

TAIL_BYTES = 64 * 1024

_ROOT = str(Path(__file__).resolve().parents[2])  # the directory holding `gateway`
_CHILD = (
    f"import sys; sys.path[:0] = [{_ROOT!r}]; from gateway.dashboard.tail import read_tail; "
    "t = read_tail(sys.argv[1], int(sys.argv[2])); "
    "sys.stdout.buffer.write(b'' if t is None else b'+' + t.encode())"
)


def read_tail(path: str, owner_uid: int, limit: int = TAIL_BYTES) -> str | None:
    """The last `limit` bytes of `path` as text, or None when it is missing, is not a
    regular file, or does not belong to `owner_uid`."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or info.st_uid != owner_uid:
            return None
        start = max(0, info.st_size - limit)
        data = os.pread(fd, limit, start)
    finally:
        os.close(fd)
    text = data.decode("utf-8", "replace")
    if start > 0:  # drop the partial first line
        text = text.partition("\n")[2]
    return text


def tail_as_owner(path: str, job: Job, limit: int = TAIL_BYTES) -> str | None:
    """`read_tail` with the job user's ids (in a child process when the gateway is root:
    changing ids in the threaded gateway itself would change them for every thread)."""
    if os.geteuid() != 0 or job.uid == 0:
        return read_tail(path, job.uid, limit) if os.geteuid() in (0, job.uid) else None
    try:
        groups = os.getgrouplist(job.user, job.gid)
    except (KeyError, OSError):
        groups = [job.gid]
    try:
        done = subprocess.run(
            [shared_python(sys.executable), "-IS", "-c", _CHILD, path, str(job.uid)],
            user=job.uid,
            group=job.gid,
            extra_groups=groups,
            capture_output=True,
            timeout=10,
            check=False,
            cwd="/",
        )
    except (OSError, subprocess.SubprocessError):
        return None
    out = done.stdout
    if done.returncode != 0 or not out.startswith(b"+"):
        return None
    return out[1:].decode("utf-8", "replace")
