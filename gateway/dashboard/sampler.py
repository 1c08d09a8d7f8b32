"""Queue length and utilisation over time, sampled in memory for the dashboard's chart.

Nothing is stored: the chart shows the last hour or so since the gateway started, which is
what an operator glancing at the page wants; long-term series belong to Prometheus
(/metrics). Samples are taken on a timer (loop.call_later, so that nothing is left pending
when the loop closes) and, when no timer runs, whenever the history is asked for and the
last sample is older than the interval.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from dataclasses import dataclass
from typing import Any

from gateway.control.gateway import Gateway
from gateway.model.state import JobState

__all__ = ["Sample", "Sampler", "take_sample"]


@dataclass(frozen=True, slots=True)
class Sample:
    """One point of the chart."""

    time: float
    pending: int
    running: int
    cpus: int
    alloc_cpus: int

    def as_dict(self) -> dict[str, Any]:
        """JSON form."""
        return {
            "time": self.time,
            "pending": self.pending,
            "running": self.running,
            "cpus": self.cpus,
            "alloc_cpus": self.alloc_cpus,
        }


def take_sample(gw: Gateway, now: float | None = None) -> Sample:
    """Pending and running jobs, total and allocated CPUs of every cluster, now."""
    pending = running = 0
    for job in gw.jobs.values():
        if job.state is JobState.PENDING:
            pending += 1
        elif job.state is JobState.RUNNING:
            running += 1
    free = gw.free_resources()
    cpus = alloc = 0
    for cluster in gw.clusters.values():
        for node in cluster.nodes:
            cpus += node.cpus
            f = free.get(node.name)
            if f is not None:
                alloc += max(0, node.cpus - f.cpus)
    return Sample(time.time() if now is None else now, pending, running, cpus, alloc)


class Sampler:
    """A ring of samples of one gateway."""

    def __init__(self, gw: Gateway, interval_s: float, keep: int) -> None:
        self.gw = gw
        self.interval_s = interval_s
        self.samples: deque[Sample] = deque(maxlen=keep)
        self._timer: asyncio.TimerHandle | None = None

    def start(self) -> None:
        """Sample on a timer from now on (needs a running loop; no-op without one)."""
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return
        if self._timer is None:
            self._tick(loop)

    def _tick(self, loop: asyncio.AbstractEventLoop) -> None:
        self.sample()
        self._timer = loop.call_later(self.interval_s, self._tick, loop)

    def stop(self) -> None:
        """Stop the timer."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def sample(self) -> Sample:
        """Take one sample now and keep it."""
        s = take_sample(self.gw)
        self.samples.append(s)
        return s

    def history(self) -> list[dict[str, Any]]:
        """Every kept sample, oldest first, with a fresh one when the last is stale."""
        if not self.samples or time.time() - self.samples[-1].time >= self.interval_s:
            self.sample()
        return [s.as_dict() for s in self.samples]
