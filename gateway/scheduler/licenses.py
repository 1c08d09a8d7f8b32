"""Licences as slurmctld schedules them: cluster-wide counters (slurm.conf `Licenses=`)
that a job holds from its start to its end (`sbatch -L name[:count][,...]`).

At submission a request naming a licence the site lacks, or more than its total, is
"Invalid license specification"; a job whose licences are in use waits with Reason=Licenses;
what running jobs hold is counted from the snapshot, so a licence is free again as soon as
its job ends.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from gateway.model.cluster import ClusterState
from gateway.model.job import Job
from gateway.model.state import Reason
from gateway.scheduler.plugins import OK, Code, Status
from gateway.scheduler.snapshot import Snapshot

__all__ = [
    "LicenseGate",
    "LicenseUse",
    "license_request",
    "license_totals",
    "license_usage",
    "licenses_in_use",
    "valid_request",
]


def license_request(text: str | None) -> dict[str, int] | None:
    """`-L`'s counts by name, as slurmctld reads them (`_build_license_list`): items split
    on `,` or `;`, `name[:count]` (count 1 when absent, 0 when empty), the same name added
    up. None when malformed (whitespace, a count that is not a number)."""
    if not text:
        return {}
    out: dict[str, int] = {}
    for item in text.replace(";", ",").split(","):
        if not item:
            continue
        name, sep, num = item.partition(":")
        if any(c.isspace() for c in item) or (num and not num.isdigit()):
            return None
        out[name] = out.get(name, 0) + (int(num or 0) if sep else 1)
    return out


def license_totals(clusters: Iterable[ClusterState]) -> dict[str, int]:
    """Every licence the clusters declare, with its total (a name declared twice: the
    largest; licences are cluster-wide and a job runs on one cluster)."""
    out: dict[str, int] = {}
    for cluster in clusters:
        for name, total in cluster.licenses or ():
            out[name] = max(out.get(name, 0), total)
    return out


def valid_request(text: str | None, clusters: Iterable[ClusterState]) -> bool:
    """Whether some cluster has every licence named, each at least as many as asked (a
    cluster that counts its own licences, `licenses` None, is left to judge)."""
    req = license_request(text)
    if req is None:
        return False
    if not req:
        return True
    for cluster in clusters:
        if cluster.licenses is None:
            return True
        have = dict(cluster.licenses)
        if all(name in have and count <= have[name] for name, count in req.items()):
            return True
    return False


def licenses_in_use(jobs: Iterable[Job]) -> dict[str, int]:
    """What running jobs hold, by name (requests that cannot be read hold nothing)."""
    used: dict[str, int] = {}
    for job in jobs:
        for name, count in (license_request(job.spec.licenses) or {}).items():
            used[name] = used.get(name, 0) + count
    return used


@dataclass(frozen=True, slots=True)
class LicenseUse:
    """One line of `scontrol show licenses`."""

    name: str
    total: int
    used: int


def license_usage(clusters: Iterable[ClusterState], running: Iterable[Job]) -> list[LicenseUse]:
    """Every licence with its total and what running jobs hold, in slurmctld's order
    (by name, byte order)."""
    totals = license_totals(clusters)
    if not totals:  # sent with every job listing: no work on sites without licences
        return []
    used = licenses_in_use(running)
    return [LicenseUse(n, totals[n], min(used.get(n, 0), totals[n])) for n in sorted(totals)]


class LicenseGate:
    """Reason=Licenses while a job's licences are held by running jobs (or by jobs ahead
    of it in this cycle's queue order: each job that passes is counted, so two jobs never
    start on the same licence). Licences no cluster here declares are left to the
    cluster that runs the job (a Slurm cluster counts its own)."""

    name = "licenses"

    def __init__(self) -> None:
        self._snap: Snapshot | None = None
        self._free: dict[str, int] = {}

    def _reset(self, snap: Snapshot) -> None:
        self._snap = snap
        totals = license_totals(snap.clusters.values())
        used = licenses_in_use(j for j in snap.running if j.state.is_active)
        self._free = {name: total - used.get(name, 0) for name, total in totals.items()}

    def check(self, job: Job, snap: Snapshot) -> Status:
        """OK (and counted) when every licence asked for is free."""
        if not job.spec.licenses:
            return OK
        if snap is not self._snap:
            self._reset(snap)
        req = license_request(job.spec.licenses) or {}
        ours = {n: c for n, c in req.items() if n in self._free}
        if any(c > self._free[n] for n, c in ours.items()):
            return Status(Code.WAIT, Reason.LICENSES)
        for name, count in ours.items():
            self._free[name] -= count
        return OK
