"""sbatch's `-M/--clusters` at the submit edge: refuse a list naming no known cluster before
anything is stored (Slurm's sbatch asks its database first, too), and answer with the cluster
the job went to (`Submitted batch job N on cluster X`, `N;X`).

The option may come from the command line, `SBATCH_CLUSTERS` or an `#SBATCH` line, so the
list is read from sbatch's own passes; they run a second time only for submissions that may
name clusters (a cheap look at the words first), so the usual submission pays nothing.
"""

from __future__ import annotations

import asyncio
import re
import time
from typing import TYPE_CHECKING, Any

from gateway.compat.clusters import (
    ClusterChoice,
    ClusterSelectError,
    choose_clusters,
    cluster_of,
    submitted_on,
)
from gateway.compat.errors import CompatError
from gateway.compat.optypes import EarlyExit
from gateway.control.submit import Caller, NeedScript, SbatchCall, parse_call
from gateway.model.state import JobState

if TYPE_CHECKING:
    from gateway.control.gateway import Gateway, SubmitOutcome

__all__ = ["cluster_choice", "job_cluster", "refusal", "streams_on_cluster"]

_DECIDE_S = 3.0
_DIRECTIVE = re.compile(r"^#SBATCH\b.*(?:\s-\w*M|--cl)", re.MULTILINE)


def _may_name_clusters(call: SbatchCall) -> bool:
    """False only when no word could be -M/--clusters (a screen, not the parse)."""
    for arg in call.argv[1:]:
        if arg.startswith("--cl") or (
            arg.startswith("-") and not arg.startswith("--") and "M" in arg
        ):
            return True
    if "SBATCH_CLUSTERS" in call.env:
        return True
    return call.script is not None and _DIRECTIVE.search(call.script) is not None


def cluster_choice(gw: Gateway, caller: Caller, call: SbatchCall) -> ClusterChoice | None:
    """The clusters the submission names (None: it names none, or does not parse: the
    submission itself then answers). Raises ClusterSelectError when none is known."""
    if not _may_name_clusters(call):
        return None
    try:
        request = parse_call(call, caller, time.time(), gw.config.max_array_size, gw.gres_types())
    except (CompatError, EarlyExit, NeedScript):
        return None
    if not request.spec.clusters:
        return None
    return choose_clusters("sbatch", ",".join(request.spec.clusters), gw.clusters)


async def job_cluster(gw: Gateway, job_id: int, choice: ClusterChoice) -> str | None:
    """The cluster to name in sbatch's answer: the one cluster `-M` names (the job is pinned
    there, as in Slurm), else the cluster the first scheduling cycles chose (Slurm's sbatch
    asks each cluster's planner before it answers; Caldera waits up to _DECIDE_S for its
    routing or placement), else the cluster the job is listed under (None: it is gone)."""
    if len(choice.names) == 1:
        return choice.names[0]
    deadline = time.monotonic() + _DECIDE_S
    while True:
        job = await gw.find(job_id)
        if job is None:
            return None
        decided = job.routed_to or job.backend_id or job.state is not JobState.PENDING
        if decided or job.hold is not None or time.monotonic() >= deadline:
            return cluster_of(job)
        await asyncio.sleep(0.02)


def refusal(exc: ClusterSelectError) -> dict[str, Any]:
    """The submit answer when `-M` names no known cluster: nothing was stored."""
    return {
        "job_id": None,
        "stdout": "",
        "stderr": exc.stderr,
        "exit_code": exc.exit_code,
        "wait": False,
        "need_script": None,
    }


async def streams_on_cluster(
    gw: Gateway, out: SubmitOutcome, choice: ClusterChoice | None
) -> tuple[str, str]:
    """sbatch's stdout and stderr: with `-M`, the warnings for unknown names first and the
    cluster named in the `Submitted batch job` line."""
    if choice is None or out.job_id is None or out.exit_code != 0:
        return out.stdout, out.stderr
    where = await job_cluster(gw, out.job_id, choice)
    stdout = out.stdout if where is None else submitted_on(out.stdout, out.job_id, where)
    return stdout, choice.stderr + out.stderr
