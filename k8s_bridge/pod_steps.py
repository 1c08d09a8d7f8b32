"""sacct's srun steps of a Kubernetes job: srun in rank 0's pod appends one line per
finished step (`caldera-step {json}`) to its container's termination message
(/dev/termination-log), which the kubelet hands to the API server when the container ends.
Pure: the lines out of a message, and the steps out of the lines, every field checked as
the local runner's records are (the job's user can write that file too).

The kubelet keeps the last 4 KiB of the message (about 25 steps): older steps are lost,
and a step srun could not finish recording (SIGKILL) is not there.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import replace

from containers.spool import parse_step
from gateway.model.job import Step
from k8s_bridge.pod_wire import STEP_RECORD

__all__ = ["MAX_STEP_LINES", "split_message", "srun_steps"]

MAX_STEP_LINES = 256  # more than 4 KiB can hold


def split_message(text: str) -> tuple[tuple[str, ...], str]:
    """The step lines of a termination message (their JSON) and the rest of it."""
    steps: list[str] = []
    rest: list[str] = []
    for line in text.splitlines():
        if line.startswith(STEP_RECORD):
            if len(steps) < MAX_STEP_LINES:
                steps.append(line[len(STEP_RECORD) :])
        else:
            rest.append(line)
    return tuple(steps), "\n".join(rest)


def srun_steps(
    records: Sequence[str], job_id: int, run: int, placed_on: Mapping[int, str]
) -> list[Step]:
    """The numbered steps those lines describe, on the nodes their ranks' pods ran on;
    anything malformed, unnumbered or naming a rank without a node is left out."""
    steps: dict[str, Step] = {}
    for text in records:
        try:
            data = json.loads(text)
        except ValueError:
            continue  # the kubelet's cut may start mid-line
        if not isinstance(data, dict):
            continue
        ranks = data.pop("ranks", None)
        if not isinstance(ranks, list) or not all(
            isinstance(r, int) and r in placed_on for r in ranks
        ):
            continue
        step = parse_step({**data, "nodes": [placed_on[r] for r in ranks]}, job_id)
        if step is not None and step.step_id.isdigit():
            steps[step.step_id] = replace(step, run=run)
    return sorted(steps.values(), key=lambda s: int(s.step_id))
