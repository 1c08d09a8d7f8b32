"""A temporary slurm.conf for the burst test cluster (preemption settings), always restored.

Preemption cannot be observed on the caldera cluster (it must keep preempt/none), so tests
that compare preemption with real Slurm append lines to the burst cluster's rendered
slurm.conf and restart its slurmctld only (PreemptType needs a restart; its slurmds keep
running and keep their jobs: `slurmctld -i` reads the saved state). On the way out the
original bytes are written back and slurmctld is restarted again, so up.sh finds the file
unchanged and the other burst tests see the cluster as it renders it. A restart takes
about two seconds here (until the slurmds have registered again).
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from tests.support.slurm_burst import run_on
from tests.support.slurm_stack import SlurmStack, SlurmStackError

__all__ = ["burst_site", "restart_slurmctld", "temporary_slurm_conf"]

_SLURMCTLD = "/usr/sbin/slurmctld"


def _pid(stack: SlurmStack) -> int | None:
    path = stack.base / "run" / "slurmctld.pid"
    try:
        pid = int(path.read_text().split()[0])
        comm = Path(f"/proc/{pid}/comm").read_text().strip()
    except (OSError, ValueError, IndexError):
        return None
    return pid if comm == "slurmctld" else None


def _ping(stack: SlurmStack) -> bool:
    out = subprocess.run(
        ["scontrol", "ping"],
        env=stack.env_dict(),
        capture_output=True,
        text=True,
        timeout=10,
        check=False,
    )
    return "is UP" in out.stdout


_USABLE = ("idle", "mixed", "allocated", "completing", "planned", "reserved")


def _nodes_back(stack: SlurmStack) -> bool:
    """Every real node registered again in a usable state (as up.sh's health check asks)."""
    out = subprocess.run(
        ["sinfo", "-h", "-N", "-n", ",".join(stack.nodes), "-o", "%N %T"],
        env=stack.env_dict(),
        capture_output=True,
        text=True,
        timeout=10,
        check=False,
    )
    states = {line.split()[1] for line in out.stdout.splitlines() if len(line.split()) == 2}
    seen = {line.split()[0] for line in out.stdout.splitlines() if line.strip()}
    return seen == set(stack.nodes) and states <= set(_USABLE)


def restart_slurmctld(stack: SlurmStack, timeout: float = 30.0) -> None:
    """Stop the cluster's slurmctld (its pid file's process only) and start it again with
    `-i`, as up.sh does; returns once it answers `scontrol ping` and its nodes are back."""
    pid = _pid(stack)
    if pid is not None:
        os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + timeout
        while os.path.exists(f"/proc/{pid}") and _pid(stack) == pid:
            if time.monotonic() > deadline:
                raise SlurmStackError(f"slurmctld {pid} did not stop in {timeout:.0f} s")
            time.sleep(0.05)
    (stack.base / "run" / "slurmctld.pid").unlink(missing_ok=True)
    started = subprocess.run(
        [_SLURMCTLD, "-i"],
        env=stack.env_dict(),
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    if started.returncode != 0:
        raise SlurmStackError("slurmctld failed", started.returncode, started.stderr)
    deadline = time.monotonic() + timeout
    while not (_ping(stack) and _nodes_back(stack)):
        if time.monotonic() > deadline:
            log = stack.log_dir / "slurmctld.log"
            tail = log.read_text(errors="replace")[-2000:] if log.exists() else ""
            raise SlurmStackError("slurmctld or its nodes not back after a restart", None, tail)
        time.sleep(0.1)


@contextmanager
def temporary_slurm_conf(stack: SlurmStack, lines: Sequence[str]) -> Iterator[None]:
    """Run the body with `lines` appended to the cluster's slurm.conf; the original file
    and a slurmctld that read it are back afterwards, whatever happened."""
    conf = stack.slurm_conf
    original = conf.read_bytes()
    try:
        conf.write_bytes(original + ("\n" + "\n".join(lines) + "\n").encode())
        restart_slurmctld(stack)
        yield
    finally:
        conf.write_bytes(original)
        restart_slurmctld(stack)


@contextmanager
def burst_site(
    stack: SlurmStack,
    lines: Sequence[str],
    partitions: Sequence[str],
    qos: Sequence[Sequence[str]] = (),
) -> Iterator[None]:
    """A differential module's site on the burst cluster: the QOS its `sacctmgr -i add qos
    NAME ...` lines add (in the shared slurmdbd), `lines` appended to slurm.conf; on the
    way out the jobs left in `partitions` are cancelled (a failed step's requeued job would
    otherwise start inside the next module) and the QOS deleted, whatever happened."""
    try:
        for argv in qos:
            done = run_on(stack, ["sacctmgr", *argv])
            assert done.returncode == 0, done.stderr
        with temporary_slurm_conf(stack, lines):
            try:
                yield
            finally:
                run_on(stack, ["scancel", "-p", ",".join(partitions)])
    finally:
        if qos:
            run_on(stack, ["sacctmgr", "-i", "delete", "qos", ",".join(a[3] for a in qos)])
