"""A cluster's backfill plan as a free-processor profile: the predicted start of one more job.

What `sbatch --test-only` answers on a Slurm cluster, for the replay's virtual clusters: the
running jobs end at their requested limits, each queued job (priority order, the first
`depth` of them, as bf_max_job_test bounds Slurm's planner) holds the earliest slot where
enough processors stay free for its whole limit (conservative backfilling), and the new
job gets the earliest slot left. Processors are counted, not named (the textbook model):
cheap enough to ask at every submission, and the replay measures what it costs in accuracy.
"""

from __future__ import annotations

from bisect import bisect_left, insort
from collections.abc import Iterable, Sequence

__all__ = ["Profile"]


class Profile:
    """Free processors over time from `now` on: a step function (breakpoints, free counts)."""

    __slots__ = ("free", "times")

    def __init__(self, now: float, size: int, running: Iterable[tuple[float, int]]) -> None:
        """`running`: (estimated end, processors) of the jobs holding processors at `now`."""
        ends: dict[float, int] = {}
        busy = 0
        for end, procs in running:
            busy += procs
            t = max(end, now)
            ends[t] = ends.get(t, 0) + procs
        self.times = [now]
        self.free = [size - busy]
        for t in sorted(ends):
            if t == now:
                self.free[0] += ends[t]
                continue
            self.times.append(t)
            self.free.append(self.free[-1] + ends[t])

    def earliest(self, procs: int, duration: float, not_before: float | None = None) -> float:
        """The earliest start at which `procs` stay free for `duration` (inf: never)."""
        times, free = self.times, self.free
        n = len(times)
        k = 0 if not_before is None else max(0, bisect_left(times, not_before + 1e-9) - 1)
        while k < n:
            if free[k] < procs:
                k += 1
                continue
            start = times[k] if not_before is None else max(times[k], not_before)
            j = k + 1
            while j < n and times[j] < start + duration and free[j] >= procs:
                j += 1
            if j >= n or times[j] >= start + duration:
                return start
            k = j + 1
        return float("inf")

    def reserve(self, procs: int, duration: float, not_before: float | None = None) -> float:
        """Hold the earliest slot (as `earliest`) and return its start."""
        start = self.earliest(procs, duration, not_before)
        if start == float("inf"):
            return start
        end = start + duration
        for t in (start, end):
            i = bisect_left(self.times, t)
            if i == len(self.times) or self.times[i] != t:
                insort(self.times, t)
                self.free.insert(i, self.free[i - 1])
        i = bisect_left(self.times, start)
        while self.times[i] < end:
            self.free[i] -= procs
            i += 1
        return start


def plan(
    now: float,
    size: int,
    running: Iterable[tuple[float, int]],
    queue: Sequence[tuple[int, float, float]],
    depth: int,
) -> tuple[Profile, float]:
    """The profile after the first `depth` queued jobs ((procs, limit s, not before) in
    priority order) hold their slots, and the latest start among them: a job behind a
    deeper queue is predicted no earlier than that (the planner did not look further)."""
    prof = Profile(now, size, running)
    floor = now
    for procs, duration, not_before in queue[:depth]:
        s = prof.reserve(procs, duration, not_before)
        if s != float("inf"):
            floor = max(floor, s)
    return prof, (floor if len(queue) > depth else now)
