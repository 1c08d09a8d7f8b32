"""Translate a real Slurm 22.05 cluster's `--json` output into Caldera's model objects.

- `squeue --json` (openapi/v0.0.38 `jobs`) -> `Job`s with `JobExtras`;
- `sacct --json` (dbv0.0.38 `jobs` with `steps`) -> `Job`s, `Step`s and `JobExtras`;
- `sinfo --json` (openapi/v0.0.38 `nodes`) plus slurmrestd's `/slurm/v0.0.38/partitions`
  (22.05's sinfo has no partitions in its JSON) -> a `ClusterState` with `NodeExtras` and
  `PartitionExtras`.

Known gaps of 22.05's JSON that the callers fill in: `sacct --json` reports wrong exit codes
(use `exit_codes_from_sacct` on `sacct -P -o JobIDRaw,ExitCode,DerivedExitCode`) and has no
uid/gid/submit line; squeue's JSON has no AllocNode:Sid, mail settings nor, in general,
cpus_per_task (22.05 prints it only when `--cpu-freq` set a minimum), so cpus_per_task is
derived from cpus/tasks.

Layout: `common` (results, value converters), `squeue`, `sacct`, `sinfo`.
"""

from __future__ import annotations

from slurm_plugin.from_slurm_json.common import SlurmAccounting, SlurmCluster, SlurmJobs
from slurm_plugin.from_slurm_json.sacct import exit_codes_from_sacct, jobs_from_sacct_json
from slurm_plugin.from_slurm_json.sinfo import cluster_from_sinfo_json
from slurm_plugin.from_slurm_json.squeue import jobs_from_squeue_json

__all__ = [
    "SlurmAccounting",
    "SlurmCluster",
    "SlurmJobs",
    "cluster_from_sinfo_json",
    "exit_codes_from_sacct",
    "jobs_from_sacct_json",
    "jobs_from_squeue_json",
]
