"""The second real Slurm cluster (``burst``) next to the ``caldera`` one, for multi-cluster tests.

``CALDERA_SLURM_CLUSTER=burst testenv/slurm/up.sh`` starts it: ClusterName ``burst``, base
``/tmp/caldera-slurm-burst``, slurmctld 6827, slurmd 6828, bridge ``br-slurmb`` 10.78.0.0/24,
real nodes ``bnode01`` and ``bnode02`` (2 CPUs each; ``bnode02`` has ``gpu:h100:2``, a gres
type the caldera cluster lacks). It has no slurmdbd of its own: it registers with the caldera
cluster's, so ``-M``/``--clusters`` reaches both from either ``SLURM_CONF`` (one accounting
database as on a real multi-cluster site; not federated, so job ids are independent).

The session fixture ``slurm_burst_cluster`` (in slurm_stack.py, so that every conftest
registering that plugin has it) starts both (up.sh starts the caldera cluster
first) and leaves them running, like ``slurm_cluster``; the caldera cluster's ``down.sh``
stops both.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from tests.support.slurm_stack import (
    TESTENV,
    SlurmStack,
    SlurmStackError,
    ensure_up,
    slurm_env,
)

__all__ = [
    "BURST",
    "BURST_BASE",
    "BURST_NODES",
    "HOME",
    "SlurmClusters",
    "burst_stack",
    "ensure_burst_up",
    "run_on",
]

HOME = "caldera"
BURST = "burst"
BURST_BASE = Path(os.environ.get("CALDERA_SLURM_BURST_BASE", "/tmp/caldera-slurm-burst"))
BURST_NODES: tuple[str, ...] = ("bnode01", "bnode02")
_TIMEOUT = 120.0


@dataclass(frozen=True)
class SlurmClusters:
    """Both running clusters, by ClusterName."""

    home: SlurmStack
    burst: SlurmStack

    def by_name(self, name: str) -> SlurmStack:
        """The stack of cluster ``name`` (``caldera`` or ``burst``)."""
        if name == HOME:
            return self.home
        if name == BURST:
            return self.burst
        raise KeyError(f"no test cluster named {name!r} ({HOME}, {BURST})")

    @property
    def names(self) -> tuple[str, str]:
        """Cluster names in the order Slurm lists them for ``-M all`` (alphabetical)."""
        return (BURST, HOME)


def burst_stack(base: Path = BURST_BASE) -> SlurmStack:
    """Paths and environment of the burst cluster (starts and checks nothing)."""
    env = slurm_env(base)
    return SlurmStack(
        base=base,
        slurm_conf=base / "etc" / "slurm.conf",
        rest_socket=base / "rest" / "slurmrestd.sock",  # not started: burst has no REST
        env=env,
        nodes=BURST_NODES,
    )


def ensure_burst_up(base: Path = BURST_BASE) -> SlurmClusters:
    """Start (or check, ~0.3 s when healthy) the caldera cluster and then the burst cluster."""
    if os.geteuid() != 0:
        raise SlurmStackError("the Slurm test clusters need root to start (testenv/slurm/up.sh)")
    home = ensure_up()
    env = dict(os.environ)
    env.pop("CALDERA_SLURM_LOCKED", None)
    env["CALDERA_SLURM_CLUSTER"] = BURST
    env["CALDERA_SLURM_BASE"] = str(base)
    try:
        proc = subprocess.run(
            [str(TESTENV / "up.sh")],
            env=env,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=900,
            check=False,
        )
    except subprocess.TimeoutExpired as exc:
        raise SlurmStackError("up.sh (burst) timed out after 900 s") from exc
    if proc.returncode != 0:
        raise SlurmStackError("up.sh (burst) failed", proc.returncode, proc.stdout + proc.stderr)
    return SlurmClusters(home=home, burst=burst_stack(base))


def run_on(
    stack: SlurmStack,
    argv: Sequence[str],
    *,
    user: str | None = None,
    cwd: Path | None = None,
    env: Mapping[str, str] | None = None,
    timeout: float = _TIMEOUT,
) -> subprocess.CompletedProcess[str]:
    """Run a Slurm command with ``stack``'s ``SLURM_CONF`` (as ``user`` via runuser); never
    raises on a non-zero exit: Slurm's rejections are results too."""
    full = list(argv) if user is None else ["runuser", "-u", user, "--", *argv]
    return subprocess.run(
        full,
        env=dict(env) if env is not None else stack.env_dict(),
        cwd=str(cwd if cwd is not None else stack.jobs_dir),
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
