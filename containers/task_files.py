"""srun's per-task file names (`-o out-%t.txt`, -e, -i), one rule for the local runner's
srun and the pods' (shipped to job pods beside the launcher: standard library only)."""

from __future__ import annotations

import re

__all__ = ["task_file_name"]

_FIELD = re.compile(r"%(\d*)([tnNjsJu%])")


def task_file_name(
    pattern: str | None,
    *,
    rank: int,
    node_index: int,
    node: str,
    job: str,
    step_id: int,
    user: str,
) -> str | None:
    """The name for one task (%t task, %n node index, %N node, %j job, %s step, %J
    job.step, %u user, %% a percent sign; a width as in %3t); None: srun's own stream."""
    if pattern is None or pattern == "none":
        return None
    values = {
        "t": str(rank),
        "n": str(node_index),
        "N": node,
        "j": job,
        "s": str(step_id),
        "J": f"{job}.{step_id}",
        "u": user,
        "%": "%",
    }
    return _FIELD.sub(lambda m: values[m.group(2)].zfill(int(m.group(1) or 0)), pattern)
