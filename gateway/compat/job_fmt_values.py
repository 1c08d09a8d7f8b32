"""A job's values as slurmctld's `job_info_t` holds them, derived from Caldera's records.

squeue, sacct and `scontrol show job` print the same facts (node count, CPUs, minimum
memory, TRES, sharing, dependency, I/O paths); `JobValues` computes each once from a `Job`,
its `JobSpec`, the optional `JobExtras` a backend reported, and the site's defaults, so that
every formatter agrees with the others and with Slurm.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from gateway.compat.filename import NO_TASK, PatternContext, expand_for_display
from gateway.compat.fmt_common import (
    UNIT_MEGA,
    JobExtras,
    convert_num_unit,
    hostlist_compress,
)
from gateway.compat.hostlist import expand
from gateway.compat.job_fields import SiteDefaults
from gateway.compat.tres import TresCounts, count_gres, licence_counts
from gateway.model.job import Job
from gateway.model.jobspec import Sharing
from gateway.model.state import JobState
from gateway.model.suspension import run_seconds
from gateway.model.values import INFINITE, GresItem

__all__ = ["JobValues", "job_values"]

_NO_EXTRAS = JobExtras()

# job_share_string(job->shared)
_SHARED = {
    None: "OK",
    Sharing.EXCLUSIVE: "NO",
    Sharing.OVERSUBSCRIBE: "YES",
    Sharing.USER: "USER",
    Sharing.MCS: "MCS",
}


def _fmt_mb(mb: int) -> str:
    return convert_num_unit(mb, UNIT_MEGA)


@dataclass(frozen=True, slots=True)
class JobValues:
    """One job (or one array task row) with Slurm's derived values."""

    job: Job
    extras: JobExtras = field(default_factory=JobExtras)
    site: SiteDefaults = field(default_factory=SiteDefaults)

    # --- identity ----------------------------------------------------------------
    @property
    def spec_name(self) -> str:
        return self.job.spec.name

    @property
    def array_task_str(self) -> str | None:
        """The pending part of an array meta record (`3-9%2`), else None."""
        job = self.job
        if not job.is_array_meta:
            return None
        if self.extras.array_task_str is not None:
            return self.extras.array_task_str or None
        return job.array_pending.task_str() if job.array_pending else None

    @property
    def array_max_tasks(self) -> int:
        if self.extras.array_max_tasks is not None:
            return self.extras.array_max_tasks
        spec_array = self.job.spec.array
        if self.job.array_pending is not None and self.job.array_pending.throttle:
            return self.job.array_pending.throttle
        return spec_array.throttle if spec_array is not None else 0

    # --- state ---------------------------------------------------------------------
    @property
    def is_pending(self) -> bool:
        return self.job.state is JobState.PENDING

    @property
    def reason(self) -> str:
        """state_desc when set, else the reason's name (squeue %r, scontrol Reason=)."""
        return self.job.state_desc or self.reason_name

    @property
    def reason_name(self) -> str:
        """`job_reason_string(state_reason)`."""
        return self.extras.reason_text or self.job.reason.value

    def time_used(self, now: float) -> int:
        """`job_time_used`: seconds run so far (pre-suspend time while suspended)."""
        job = self.job
        if not job.start_time or job.state is JobState.PENDING or job.shown_requeued:
            return 0
        if self.extras.suspend_time is None and job.suspend_time is not None:
            return run_seconds(job, now)  # suspended by the gateway (model/suspension.py)
        if job.state is JobState.SUSPENDED:
            return self.extras.pre_sus_time
        end = now if job.state is JobState.RUNNING or not job.end_time else job.end_time
        if self.extras.suspend_time:
            return int(end - self.extras.suspend_time) + self.extras.pre_sus_time
        return int(end) - int(job.start_time)

    @property
    def restarts(self) -> int:
        """Restarts: a record being requeued already counts its next run."""
        return self.job.restart_count + int(self.job.shown_requeued)

    # --- size ----------------------------------------------------------------------
    @property
    def num_nodes(self) -> int:
        if self.extras.num_nodes is not None:
            return self.extras.num_nodes
        if self.job.nodes and not self.is_pending:
            return len(self.job.nodes)
        spec = self.job.spec
        widest = self.site.partition_cpus.get(self.job.partition.split(",")[0], 0)
        if spec.spreads_tasks and widest:  # slurmctld's estimate: on the partition's widest
            least = -(-(spec.ntasks or 1) * (spec.cpus_per_task or 1) // widest)
            return max(least, spec.nodes_min or 1)
        return max(spec.nodes_min or 1, 1)

    @property
    def max_nodes(self) -> int:
        if self.extras.max_nodes is not None:
            return self.extras.max_nodes
        return self.job.spec.nodes_max or 0

    @property
    def num_tasks(self) -> int:
        spec = self.job.spec
        if spec.ntasks is not None:
            if spec.ntasks_per_node and spec.nodes_min is None and self.job.placement:
                # allocated: every node its --ntasks-per-node (`-n3 --ntasks-per-node=2`
                # runs four tasks' CPUs: NumTasks=4 once it started, 3 while pending)
                return max(spec.ntasks, len(self.job.placement) * spec.ntasks_per_node)
            return spec.ntasks
        if spec.ntasks_per_node is not None:
            return self.num_nodes * spec.ntasks_per_node
        return self.num_nodes

    @property
    def cpus_per_task(self) -> int:
        if self.extras.cpus_per_task is not None:
            return self.extras.cpus_per_task
        return self.job.spec.cpus_per_task or 1

    @property
    def num_cpus(self) -> int:
        if self.job.num_cpus:
            return self.job.num_cpus
        spec = self.job.spec
        per_task = self.num_tasks * self.cpus_per_task
        return max(per_task, spec.mincpus or 0, self.num_nodes)

    @property
    def min_cpus_node(self) -> int:
        if self.extras.min_cpus_node is not None:
            return self.extras.min_cpus_node
        spec = self.job.spec
        if spec.mincpus is not None:
            return spec.mincpus
        per_node = spec.ntasks_per_node or 1
        return per_node * self.cpus_per_task

    @property
    def memory(self) -> tuple[int, bool]:
        """(MB, per_cpu): pn_min_memory with the MEM_PER_CPU flag split off. A started
        `--mem-per-gpu` job shows 0 per node: slurmctld replaces the default with the GPUs'
        memory when it allocates."""
        spec, site = self.job.spec, self.site
        if not self.is_pending and self._mem_per_gpu_only():
            return 0, False
        if spec.mem_per_node_mb is not None:
            return spec.mem_per_node_mb, False
        if spec.mem_per_cpu_mb is not None:
            return spec.mem_per_cpu_mb, True
        if site.def_mem_per_cpu_mb is not None:
            return site.def_mem_per_cpu_mb, True
        return site.def_mem_per_node_mb or 0, False

    @property
    def min_memory_str(self) -> str:
        return _fmt_mb(self.memory[0])

    @property
    def tmp_disk_str(self) -> str:
        return _fmt_mb(self.job.spec.tmp_mb or 0)

    @property
    def total_memory_mb(self) -> int:
        """The memory TRES: per node x nodes or per CPU x CPUs; `--mem-per-gpu` alone
        counts per GPU x the job's GPUs, as slurmctld does."""
        if self._mem_per_gpu_only():
            return (self.job.spec.mem_per_gpu_mb or 0) * self._gpus()
        mb, per_cpu = self.memory
        return mb * self.num_cpus if per_cpu else mb * self.num_nodes

    def _mem_per_gpu_only(self) -> bool:
        spec = self.job.spec
        only_gpu = spec.mem_per_node_mb is None and spec.mem_per_cpu_mb is None
        return spec.mem_per_gpu_mb is not None and only_gpu and self._gpus() > 0

    def _gpus(self) -> int:
        """The job's GPUs (per node x nodes, per job, per task x tasks)."""
        spec = self.job.spec
        per_node = [*spec.gpus_per_node, *(g for g in spec.gres if g.name == "gpu")]
        return (
            sum(g.count for g in per_node) * self.num_nodes
            + sum(g.count for g in spec.gpus)
            + sum(g.count for g in spec.gpus_per_task) * self.num_tasks
        )

    # --- TRES (gateway/compat/tres.py: what slurmctld accounts, in its order) ---------
    def _whole_nodes_memory(self) -> bool:
        """`--mem=0`: the job takes all the memory of its nodes."""
        return self.job.spec.mem_per_node_mb == 0

    def _request_counts(self, node_types: Sequence[str | None], job: bool) -> TresCounts:
        """The request's GRES: per node on each of these nodes (typed as the node's GPUs
        when the request names no type); with `job`, also per job and per task x tasks."""
        spec, counts = self.job.spec, TresCounts()
        for item in (*spec.gpus_per_node, *spec.gres):
            for node_type in node_types:
                count_gres(counts, item, item.count, node_type)
        if job:
            for item in spec.gpus:
                count_gres(counts, item, item.count, None)
            for item in spec.gpus_per_task:
                count_gres(counts, item, item.count * self.num_tasks, None)
        return counts

    def _allocated_gpus(self, nodes: Sequence[str] | None = None) -> TresCounts | None:
        """The GPUs the job holds on these nodes (all of its nodes when None), by type, from
        its placement; None when the placement records none."""
        placed = [p for p in self.job.placement if nodes is None or p.node in nodes]
        if not any(p.gpus for p in placed):
            return None
        counts = TresCounts()
        for p in placed:
            if p.gpus:
                count_gres(counts, GresItem("gpu", None, 0), len(p.gpus), p.gpu_type)
        return counts

    def _render(self, cpus: int, mem: int, nodes: int, gres: TresCounts, job: bool) -> str:
        counts = TresCounts(cpu=cpus, mem=mem, node=nodes)
        if job:
            counts["billing"] = cpus
            counts.update(licence_counts(self.job.spec.licenses))
        counts.update(gres)
        return self.site.tres_names.render(counts)

    @property
    def req_cpus(self) -> int:
        """The CPUs asked for (ReqTRES, sacct's ReqCPUS): an exclusive job is allocated
        whole nodes, its request stays."""
        if self.job.spec.sharing is Sharing.EXCLUSIVE or not self.job.num_cpus:
            spec = self.job.spec
            return max(self.num_tasks * self.cpus_per_task, spec.mincpus or 0, self.num_nodes)
        return self.job.num_cpus

    def step_tres(
        self,
        cpus: int,
        nodes: Sequence[str],
        batch: bool,
        gpus: Sequence[int] | None = None,
        mem_mb: int | None = None,
    ) -> str:
        """A step's TRES for backends that record none: its CPUs and the memory it recorded
        (`mem_mb`), else its nodes' share of the job's; the batch step holds every GPU the
        job has on the batch host, an srun step the GPUs it recorded on each of its nodes
        (`gpus`), else the job's per-node GRES request there."""
        mb, per_cpu = self.memory
        placed = {p.node: p for p in self.job.placement}
        if mem_mb is not None:
            mem = mem_mb
        elif self._whole_nodes_memory() and all(n in placed for n in nodes):
            mem = sum(placed[n].memory_mb for n in nodes)
        elif per_cpu and not self._mem_per_gpu_only():
            mem = mb * cpus
        else:
            mem = self._alloc_memory_mb() * len(nodes) // max(self.num_nodes, 1)
        gres = self._allocated_gpus(nodes) if batch else None
        if gpus is not None and len(gpus) == len(nodes):
            gres = TresCounts()
            for node, count in zip(nodes, gpus, strict=True):
                if count:
                    gpu_type = placed[node].gpu_type if node in placed else None
                    count_gres(gres, GresItem("gpu", None, 0), count, gpu_type)
        if gres is None:
            gres = self._request_counts(
                [placed[n].gpu_type if n in placed else None for n in nodes], False
            )
        return self._render(cpus, mem, len(nodes), gres, job=False)

    def _alloc_memory_mb(self) -> int:
        if self._whole_nodes_memory() and self.job.placement:
            return sum(p.memory_mb for p in self.job.placement)
        return self.total_memory_mb

    @property
    def tres_req(self) -> str:
        if self.extras.tres_req is not None:
            return self.extras.tres_req
        cpus = self.req_cpus
        mb, per_cpu = self.memory
        if self._whole_nodes_memory():  # slurmctld counts the partition's largest node
            part = self.job.partition.split(",")[0] or self.site.default_partition
            mem = self.site.partition_mem.get(part, 0) * self.num_nodes
        elif per_cpu and not self._mem_per_gpu_only():
            mem = mb * cpus
        else:
            mem = self.total_memory_mb
        # per node on the nodes ReqTRES counts (`-n3 --gres=gpu:1`, held: node=1, gres/gpu=1
        # on the test cluster, though it will take two nodes), in the request's own types
        gres = self._request_counts([None] * self.req_nodes, True)
        return self._render(cpus, mem, self.req_nodes, gres, job=True)

    @property
    def req_nodes(self) -> int:
        """ReqTRES's node count: the minimum the job was given (-N, raised to its --nodelist's
        hosts), as slurmctld records it at submission, not the nodes it got: `-n3
        --ntasks-per-node=1` without -N asks for 1 node and is allocated 3."""
        spec = self.job.spec
        listed = len(expand(spec.nodelist)) if spec.nodelist else 0
        return max(spec.nodes_min or 1, listed, 1)

    @property
    def tres_alloc(self) -> str | None:
        if self.extras.tres_alloc is not None:
            return self.extras.tres_alloc or None
        if self.is_pending or not self.job.nodes:
            return None
        gres = self._request_counts([None] * self.num_nodes, True)
        gpus = self._allocated_gpus()
        if gpus is not None:
            gres = {k: v for k, v in gres.items() if not k.startswith("gres/gpu")} | gpus
        return self._render(self.num_cpus, self._alloc_memory_mb(), self.num_nodes, gres, job=True)

    @property
    def tres_per_node(self) -> str | None:
        if self.extras.tres_per_node is not None:
            return self.extras.tres_per_node or None
        spec = self.job.spec
        items = [i.tres() for i in spec.gpus_per_node] + [i.tres() for i in spec.gres]
        return ",".join(items) if items else None

    @property
    def tres_per_job(self) -> str | None:
        if self.extras.tres_per_job is not None:
            return self.extras.tres_per_job or None
        items = [i.tres() for i in self.job.spec.gpus]
        return ",".join(items) if items else None

    @property
    def tres_per_task(self) -> str | None:
        if self.extras.tres_per_task is not None:
            return self.extras.tres_per_task or None
        items = [i.tres() for i in self.job.spec.gpus_per_task]
        return ",".join(items) if items else None

    @property
    def tres_per_socket(self) -> str | None:
        if self.extras.tres_per_socket is not None:
            return self.extras.tres_per_socket or None
        items = [i.tres() for i in self.job.spec.gpus_per_socket]
        return ",".join(items) if items else None

    @property
    def mem_per_tres(self) -> str | None:
        mb = self.job.spec.mem_per_gpu_mb
        return f"gres:gpu:{mb}" if mb is not None else None

    # --- placement and requests ----------------------------------------------------
    @property
    def nodes_str(self) -> str:
        return hostlist_compress(self.job.nodes)

    @property
    def shared(self) -> str:
        return _SHARED[self.job.spec.sharing]

    @property
    def dependency(self) -> str | None:
        if self.extras.dependency is not None:
            return self.extras.dependency or None
        dep = self.job.spec.dependency
        if dep is None or self.job.start_time is not None:  # slurmctld clears it when met
            return None
        return dep.display() or None

    @property
    def features(self) -> str | None:
        return self.job.spec.constraint or None

    @property
    def command(self) -> str | None:
        return self.job.command or None

    @property
    def nice(self) -> int:
        return self.job.spec.nice or 0

    @property
    def requeue(self) -> bool:
        spec = self.job.spec
        return spec.requeue if spec.requeue is not None else self.site.job_requeue

    @property
    def time_limit(self) -> int:
        return self.job.time_limit

    @property
    def time_min(self) -> int:
        return self.job.spec.time_min or 0

    @property
    def batch_flag(self) -> bool:
        return self.extras.batch_flag if self.extras.batch_flag is not None else self.job.batch

    @property
    def batch_host(self) -> str | None:
        if self.extras.batch_host is not None:
            return self.extras.batch_host or None
        if self.is_pending or not self.job.nodes:
            return None
        return self.job.nodes[0]

    @property
    def task_id_for_patterns(self) -> int:
        job = self.job
        return job.array_task_id if job.array_task_id is not None else NO_TASK

    def _ctx(self) -> PatternContext:
        job = self.job
        return PatternContext(
            job_id=job.job_id,
            job_name=job.spec.name,
            user=job.user,
            workdir=job.spec.workdir,
            array_job_id=job.array_job_id,
            array_task_id=self.task_id_for_patterns,
        )

    @property
    def stdout_raw(self) -> str | None:
        if self.extras.stdout_raw is not None:
            return self.extras.stdout_raw or None
        return self.job.spec.stdout

    @property
    def stderr_raw(self) -> str | None:
        if self.extras.stderr_raw is not None:
            return self.extras.stderr_raw or None
        return self.job.spec.stderr

    @property
    def stdin_raw(self) -> str | None:
        if self.extras.stdin_raw is not None:
            return self.extras.stdin_raw or None
        return self.job.spec.stdin or "/dev/null"

    @property
    def stdout(self) -> str:
        return expand_for_display(self.stdout_raw, self._ctx())

    @property
    def stderr(self) -> str:
        return expand_for_display(self.stderr_raw or self.stdout_raw, self._ctx())

    @property
    def stdin(self) -> str:
        raw = self.stdin_raw
        return expand_for_display(None if raw == "/dev/null" else raw, self._ctx(), True)

    @property
    def end_time(self) -> float:
        return self.job.end_time or 0.0

    @property
    def time_limit_is_infinite(self) -> bool:
        return self.job.time_limit == INFINITE


def job_values(
    job: Job, extras: JobExtras | None = None, site: SiteDefaults | None = None
) -> JobValues:
    """JobValues for a job with optional extras and site defaults."""
    return JobValues(job, extras or _NO_EXTRAS, site or SiteDefaults())
