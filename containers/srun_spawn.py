"""Starting a task whose program is a bare name found nowhere in PATH.

slurmstepd then calls execve() with the bare name, which the kernel takes relative to the
working directory: `srun inner_job.sh` runs ./inner_job.sh, and a script sees its bare name
as $0 (`inner_job.sh: line 10: ...`). Popen searches PATH for any name without a slash, and
`./inner_job.sh` would show as $0, so such a task is started with posix_spawn (no PATH
search), with the same standard streams and its own process group.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Mapping, Sequence
from typing import IO, Any

__all__ = ["Spawned"]

_Stream = IO[bytes] | int | None


class Spawned:
    """A task started by posix_spawn, with the parts of Popen that srun uses (pid, the
    piped stdout/stderr, wait, poll). One thread waits for it; poll reads what it found."""

    def __init__(
        self,
        argv: Sequence[str],
        env: Mapping[str, str],
        stdin: _Stream,
        stdout: _Stream,
        stderr: _Stream,
    ) -> None:
        self.returncode: int | None = None
        self.stdout: IO[bytes] | None = None
        self.stderr: IO[bytes] | None = None
        actions: list[tuple[Any, ...]] = []
        ours: list[int] = []  # the child's ends of the pipes, closed here once it started
        for fd, stream in ((0, stdin), (1, stdout), (2, stderr)):
            if fd and stream == subprocess.PIPE:
                read, write = os.pipe()
                actions.append((os.POSIX_SPAWN_DUP2, write, fd))
                ours.append(write)
                setattr(self, ("stdout", "stderr")[fd - 1], open(read, "rb", buffering=0))  # noqa: SIM115
            elif stream is not None and not isinstance(stream, int):
                actions.append((os.POSIX_SPAWN_DUP2, stream.fileno(), fd))
        try:
            self.pid = os.posix_spawn(
                argv[0], list(argv), dict(env), file_actions=actions, setpgroup=0
            )
        except OSError:
            for pipe in (self.stdout, self.stderr):
                if pipe is not None:
                    pipe.close()
            raise
        finally:
            for fd in ours:
                os.close(fd)

    def wait(self) -> int:
        """The exit code, or minus the signal that ended the task (as Popen's)."""
        if self.returncode is None:
            _, status = os.waitpid(self.pid, 0)
            self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode

    def poll(self) -> int | None:
        return self.returncode
