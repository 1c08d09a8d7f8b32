"""The local site: its nodes, partitions and licences as a ClusterState (from caldera.toml's
tables or a slurm.conf, read by gateway/control/site_tables.py), and the submit-time checks and
answers slurmctld makes against a site (partition names and states, EnforcePartLimits,
licences, whether any node could ever fit a job, what a partition adds to a job, GresTypes,
`sbatch --test-only`).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace

from gateway.compat.duration import time_str_to_mins
from gateway.compat.slurm_errors import SlurmErrno
from gateway.compat.verify import SubmitError
from gateway.control.config import GatewayConfig
from gateway.control.site_topology import switch_paths
from gateway.model.cluster import ClusterState, Gpu, Node, NodeState, Partition
from gateway.model.jobspec import JobSpec, Sharing
from gateway.model.values import INFINITE, NO_VAL
from gateway.policy.preempt_rules import mode_text, parse_mode
from gateway.scheduler.licenses import valid_request
from gateway.scheduler.part_limits import config_detail, could_hold, fitting_nodes
from gateway.scheduler.request import constraint_satisfied, node_request
from gateway.scheduler.selection import default_target

__all__ = [
    "check_request",
    "gres_types_of",
    "local_cluster",
    "partition_defaults",
    "partition_minutes",
    "pick_partitions",
]


def partition_minutes(text: str | None) -> int | None:
    """A partition's MaxTime/DefaultTime in minutes (ValueError: not a time)."""
    if text is None:
        return None
    value = time_str_to_mins(text)
    if value == NO_VAL:
        raise ValueError(f"invalid time {text!r} in the partition configuration")
    return value


_NODE_STATES = {"DOWN": NodeState.DOWN, "DRAIN": NodeState.DRAINED, "FAIL": NodeState.DRAINED}


def local_cluster(config: GatewayConfig) -> ClusterState:
    """The local backend's nodes and partitions from the configuration."""
    names = tuple(n.name for n in config.nodes)
    partitions = tuple(
        Partition(
            name=p.name,
            nodes=p.nodes or names,
            default=p.default,
            up=p.state in ("UP", "DRAIN"),  # DRAIN: runs what it has, takes no more
            state=p.state,
            max_time=partition_minutes(p.max_time) or 0,
            default_time=partition_minutes(p.default_time),
            max_nodes=p.max_nodes,
            oversubscribe=p.oversubscribe,
            def_mem_per_cpu_mb=p.def_mem_per_cpu_mb,
            priority_tier=p.priority_tier,
            priority_job_factor=p.priority_job_factor,
            preempt_mode=p.preempt_mode
            or mode_text(parse_mode("preempt_mode", config.preempt_mode, site=True)),
            grace_time_s=p.grace_time_s,
        )
        for p in config.partitions
    )
    if partitions and not any(p.default for p in partitions):
        partitions = (replace(partitions[0], default=True), *partitions[1:])
    paths = switch_paths(config.topology)
    nodes = tuple(
        Node(
            name=n.name,
            cpus=n.cpus,
            memory_mb=n.memory_mb,
            state=_NODE_STATES.get(n.state, NodeState.IDLE),
            reason=n.reason,
            partitions=tuple(p.name for p in partitions if n.name in p.nodes),
            features=n.features,
            gres=n.gres or ((("gpu", None, n.gpus),) if n.gpus else ()),
            gpus=tuple(Gpu(index=i) for i in range(n.gpus)),
            sockets=n.sockets or n.cpus,
            cores_per_socket=n.cores_per_socket or 1,
            threads_per_core=n.threads_per_core,
            weight=n.weight,
            tmp_disk_mb=n.tmp_disk_mb,
            switch=paths[n.name][0] if paths.get(n.name) else None,
            uplinks=paths.get(n.name, ())[1:],
            address=n.address,
            port=n.port,
        )
        for n in config.nodes
    )
    return ClusterState(
        name=config.cluster_name,
        nodes=nodes,
        partitions=partitions,
        licenses=config.licenses,
        enforce_part_limits=config.enforce_part_limits,
    )


def partition_defaults(
    spec: JobSpec, partitions: tuple[str, ...], clusters: dict[str, ClusterState]
) -> JobSpec:
    """What the first partition named adds to a job at submission, as slurmctld stores it
    in the job: its DefMemPerCPU when the job asks no memory (MinMemoryCPU), and whole
    nodes in an OverSubscribe=EXCLUSIVE partition (OverSubscribe=NO)."""
    part = next((p for c in clusters.values() if (p := c.partition(partitions[0]))), None)
    if part is None:
        return spec
    asked = (spec.mem_per_node_mb, spec.mem_per_cpu_mb, spec.mem_per_gpu_mb)
    if part.def_mem_per_cpu_mb is not None and all(m is None for m in asked):
        spec = replace(spec, mem_per_cpu_mb=part.def_mem_per_cpu_mb)
    if part.oversubscribe == "EXCLUSIVE" and spec.sharing is None:
        spec = replace(spec, sharing=Sharing.EXCLUSIVE)
    return spec


def pick_partitions(spec: JobSpec, clusters: dict[str, ClusterState]) -> tuple[str, ...]:
    """The partitions a job may use; raises Slurm's "Invalid partition name" otherwise."""
    known = {p.name for c in clusters.values() for p in c.partitions}
    if spec.partitions:
        for name in spec.partitions:
            if name not in known:  # slurmctld's err_msg names the first unknown one
                raise SubmitError(
                    SlurmErrno.INVALID_PARTITION_NAME, f"invalid partition specified: {name}"
                )
        return spec.partitions
    home = default_target(clusters)
    if home is None:
        raise SubmitError(SlurmErrno.DEFAULT_PARTITION_NOT_SET)
    return (home.partition,)


def check_request(
    spec: JobSpec,
    partitions: tuple[str, ...],
    clusters: dict[str, ClusterState],
    def_mem_per_cpu_mb: int,
    *,
    fit: bool = True,
) -> None:
    """Reject a request no node of its partitions could ever hold, as slurmctld does;
    without `fit` (a held job, or one beyond its partition's size) only names are checked.
    In `_job_create`'s order: node names, partitions that take no jobs (DRAIN, INACTIVE),
    partition limits (EnforcePartLimits), licences, then what the nodes could hold."""
    from gateway.compat.hostlist import HostlistError, expand

    nodelist = tuple(expand(spec.nodelist)) if spec.nodelist else ()
    try:
        excluded = set(expand(spec.exclude)) if spec.exclude else set()
    except HostlistError:
        raise SubmitError(SlurmErrno.INVALID_NODE_NAME) from None
    known = {n.name for c in clusters.values() for n in c.nodes}
    if any(name not in known for name in (*nodelist, *excluded)) or excluded & set(nodelist):
        raise SubmitError(SlurmErrno.INVALID_NODE_NAME)  # (-w and -x naming one node too)
    parts = [p for c in clusters.values() for name in partitions if (p := c.partition(name))]
    if parts and all(p.state in ("DRAIN", "INACTIVE") for p in parts):
        raise SubmitError(SlurmErrno.PARTITION_NOT_AVAIL)
    _enforce_part_limits(spec, partitions, clusters)
    if spec.licenses is not None:
        holding = [c for c in clusters.values() if any(c.partition(p) for p in partitions)]
        if not valid_request(spec.licenses, holding):
            raise SubmitError(SlurmErrno.INVALID_LICENSES)
    req = node_request(spec, nodelist)
    seen: list[Node] = []
    for cluster in clusters.values():
        for pname in partitions:
            part = cluster.partition(pname)
            if part is None:
                continue
            members = [n for n in cluster.nodes if n.name in part.nodes]
            members = [n for n in members if n.name not in excluded]
            seen.extend(members)
            if nodelist and any(name not in part.nodes for name in nodelist):
                continue
            required = [n for n in members if n.name in nodelist]
            if fit and fitting_nodes(req, required, def_mem_per_cpu_mb) < len(nodelist):
                continue  # a required node that could never take its share
            if fit and could_hold(req, members, def_mem_per_cpu_mb):
                return
            if spec.constraint and not any(
                constraint_satisfied(spec.constraint, n.features) for n in members
            ):
                raise SubmitError(SlurmErrno.INVALID_FEATURE)
    if fit:
        raise SubmitError(SlurmErrno.REQUESTED_NODE_CONFIG_UNAVAILABLE, config_detail(spec, seen))


def _part_refusal(spec: JobSpec, cluster: ClusterState, part: Partition) -> SlurmErrno | None:
    """What slurmctld's `_part_access_check` answers, in its order: more CPUs than the
    partition has, more nodes than it has or than its MaxNodes (the job's maximum: `-N 2`
    is 2-2), a time limit beyond its MaxTime."""
    members = [n for n in cluster.nodes if n.name in set(part.nodes)]
    if spec.min_cpus > sum(n.cpus for n in members):
        return SlurmErrno.TOO_MANY_REQUESTED_CPUS
    if spec.nodes_min is not None and spec.nodes_min > len(part.nodes):
        return SlurmErrno.INVALID_NODE_COUNT
    most = spec.nodes_max or spec.nodes_min
    if most is not None and part.max_nodes is not None and most > part.max_nodes:
        return SlurmErrno.INVALID_NODE_COUNT
    limit = spec.time_limit
    if (
        part.max_time != INFINITE
        and limit is not None
        and (limit == INFINITE or limit > part.max_time)
    ):
        return SlurmErrno.INVALID_TIME_LIMIT
    return None


def _enforce_part_limits(
    spec: JobSpec, partitions: tuple[str, ...], clusters: dict[str, ClusterState]
) -> None:
    """EnforcePartLimits=ALL refuses a job that some partition it names would not admit
    (the first refusal), ANY one that none would (the last refusal, as `_valid_job_part`
    keeps it); NO, the default, lets it wait (gateway/scheduler/part_limits.py)."""
    refusals: list[SlurmErrno | None] = []
    enforce = "NO"
    for cluster in clusters.values():
        for name in partitions:
            part = cluster.partition(name)
            if part is not None:
                enforce = cluster.enforce_part_limits
                refusals.append(_part_refusal(spec, cluster, part))
    failed = [r for r in refusals if r is not None]
    if enforce == "ALL" and failed:
        raise SubmitError(failed[0])
    if enforce == "ANY" and failed and len(failed) == len(refusals):
        raise SubmitError(failed[-1])


def gres_types_of(clusters: Iterable[ClusterState]) -> tuple[str, ...]:
    """Slurm's GresTypes: the generic resources some node of these clusters has."""
    clusters = tuple(clusters)
    names = {name for c in clusters for n in c.nodes for name, _, _ in n.gres}
    names |= {"gpu"} if any(n.gpus for c in clusters for n in c.nodes) else set()
    return tuple(sorted(names))
