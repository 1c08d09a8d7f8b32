"""What srun in a job pod writes besides its output (standard library only; shipped to the
pods beside pod_launcher.py): each task's -o/-e file, and the finished step's record in
the container's termination message, where the backend finds it (pod_steps.py)."""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from typing import Any, BinaryIO

from containers.step_rules import task_file_name
from k8s_bridge.pod_init import append_message
from k8s_bridge.pod_launch_plan import SrunExit
from k8s_bridge.pod_wire import STEP_RECORD

__all__ = ["record_step", "task_files"]


def task_files(
    opts: Mapping[str, str | None],
    ranks_node: Sequence[str],
    nodes: Sequence[str],
    step_id: int,
    env: Mapping[str, str],
    cwd: str,
) -> dict[tuple[int, int], BinaryIO]:
    """Each task's -o/-e file by (rank, fd), as the local runner's srun opens them: each
    name once (truncated), stderr in the -o file unless -e names another, names relative
    to the tasks' directory. Opened here in rank 0's pod, beside the batch script's own."""
    opened: dict[str, BinaryIO] = {}
    files: dict[tuple[int, int], BinaryIO] = {}
    err_pattern = opts.get("error") or opts.get("output")
    try:
        for rank, node in enumerate(ranks_node):
            for fd, pattern in ((1, opts.get("output")), (2, err_pattern)):
                name = task_file_name(
                    pattern,
                    rank=rank,
                    node_index=nodes.index(node),
                    node=node,
                    job=env.get("SLURM_JOB_ID", "0"),
                    step_id=step_id,
                    user=env.get("USER", ""),
                )
                if name is not None:
                    path = os.path.join(cwd, name)
                    if path not in opened:
                        opened[path] = open(path, "wb")  # noqa: SIM115 - closed by srun()
                    files[(rank, fd)] = opened[path]
    except OSError as exc:
        for f in opened.values():
            f.close()
        raise SrunExit([f"srun: error: {exc.filename}: {exc.strerror}"]) from None
    return files


def record_step(env: Mapping[str, str], record: Mapping[str, Any]) -> None:
    """Append the finished step's record (one line) to the termination message; a pod
    without one (or a file the user replaced) just records nothing."""
    append_message(env, STEP_RECORD + json.dumps(record, separators=(",", ":")))
