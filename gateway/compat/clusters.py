"""Slurm's `-M/--clusters` for every command: which clusters a list names, Slurm's words for
names it does not know, the `CLUSTER: name` blocks of the multi-cluster listings, and the
`on cluster X` form of sbatch's answer.

Slurm (slurmdb_get_info_cluster) asks the accounting database: `all` is every cluster; other
names are matched without regard to case, each unknown one is reported on stderr and left out,
and only when none is left the command fails (exit 1) naming the whole list. The database
answers in name order, so the listings go cluster by cluster in that order whatever the order
of the list.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace

from gateway.model.cluster import ClusterState
from gateway.model.job import Job
from gateway.model.state import JobState

__all__ = [
    "ClusterChoice",
    "ClusterSelectError",
    "blocks",
    "choose_clusters",
    "cluster_of",
    "on_clusters",
    "split_state",
    "submitted_on",
]


class ClusterSelectError(Exception):
    """No cluster of the list exists: the command's stderr (every line) and exit code 1."""

    def __init__(self, stderr: str) -> None:
        super().__init__(stderr.rstrip("\n"))
        self.stderr = stderr
        self.exit_code = 1


@dataclass(frozen=True)
class ClusterChoice:
    """The known clusters a list names, in Slurm's (name) order, and the warnings printed."""

    names: tuple[str, ...]
    stderr: str = ""


def choose_clusters(prog: str, text: str, known: Iterable[str]) -> ClusterChoice:
    """Resolve `-M text` against the site's clusters; raises ClusterSelectError as Slurm
    fails (`No cluster 'x' known by database.` per unknown name, then `'text' can't be
    reached now, ...`)."""
    by_lower = {name.lower(): name for name in known}
    if text.lower() == "all":
        return ClusterChoice(tuple(sorted(by_lower.values())))
    words = [w for w in text.split(",") if w] or [""]
    chosen: dict[str, str] = {}
    errors: list[str] = []
    for word in words:
        name = by_lower.get(word.lower())
        if name is None:
            errors.append(f"{prog}: error: No cluster '{word}' known by database.\n")
        else:
            chosen[name] = name
    if not chosen:
        errors.append(
            f"{prog}: error: '{text}' can't be reached now, or it is an invalid entry for "
            "--cluster.  Use 'sacctmgr list clusters' to see available clusters.\n"
        )
        raise ClusterSelectError("".join(errors))
    return ClusterChoice(tuple(sorted(chosen)), "".join(errors))


def blocks(parts: Iterable[tuple[str, str]], noheader: bool) -> str:
    """Listings of several clusters as squeue and sinfo print them: `CLUSTER: name` before
    each cluster's own output and a blank line between clusters; with -h neither."""
    out: list[str] = []
    for i, (name, text) in enumerate(parts):
        if noheader:
            out.append(text)
            continue
        out.append(f"{'' if i == 0 else chr(10)}CLUSTER: {name}\n{text}")
    return "".join(out)


def submitted_on(stdout: str, job_id: int, cluster: str) -> str:
    """sbatch's answer once `-M` was given: `Submitted batch job N on cluster X`, or
    `N;X` with --parsable; anything else (--quiet: nothing) as it was."""
    if stdout == f"Submitted batch job {job_id}\n":
        return f"Submitted batch job {job_id} on cluster {cluster}\n"
    if stdout == f"{job_id}\n":
        return f"{job_id};{cluster}\n"
    return stdout


def split_state(
    state: ClusterState, node_cluster: Mapping[str, str], names: Iterable[str]
) -> dict[str, ClusterState]:
    """One site-wide view (the gateway's node list) as each named cluster's own: its nodes,
    and the partitions with nodes there, each cut to those nodes (the site shows a partition
    several clusters offer as one, over all their nodes)."""
    out: dict[str, ClusterState] = {}
    for name in names:
        nodes = tuple(n for n in state.nodes if node_cluster.get(n.name) == name)
        mine = {n.name for n in nodes}
        parts = tuple(
            replace(p, nodes=tuple(n for n in p.nodes if n in mine))
            for p in state.partitions
            if mine.intersection(p.nodes)
        )
        out[name] = ClusterState(name=name, nodes=nodes, partitions=parts)
    return out


def cluster_of(job: Job) -> str:
    """The cluster a job is listed under (squeue -M, the CLUSTER and Cluster fields, sbatch's
    `on cluster X`): where it runs or ran; while it waits, where it is routed, else the one
    cluster its `-M` pins it to, else the cluster the gateway records."""
    if job.state is JobState.PENDING:
        if job.routed_to:
            return job.routed_to
        pinned = job.spec.clusters
        if len(pinned) == 1 and pinned[0].lower() != "all":
            return pinned[0]
    return job.cluster


def on_clusters(jobs: Iterable[Job], names: Iterable[str]) -> list[Job]:
    """The jobs listed under these clusters (names compared without regard to case, as
    Slurm's database compares them)."""
    wanted = {n.lower() for n in names}
    return [j for j in jobs if cluster_of(j).lower() in wanted]
