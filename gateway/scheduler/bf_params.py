"""The backfill knobs, read from Slurm's `SchedulerParameters` syntax (caldera.toml's
`scheduler_parameters = "bf_window=1440,bf_resolution=60,bf_max_job_test=500"`).

Slurm's names and units are kept so an operator's slurm.conf line carries over: bf_window
in minutes, bf_resolution in seconds. Caldera adds `bf_mode` (easy, conservative, fcfs)
`bf_depth` (how many blocked jobs hold a binding reservation in conservative mode;
EASY is depth 1 by definition) and `bf_estimates` (how many more get an expected start,
refreshed every `bf_interval` seconds when that is set, as slurmctld's backfill does),
because Slurm's own backfill is always conservative up to
bf_max_job_test while EASY is what most batch studies and Kubernetes users compare against.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Literal

__all__ = ["BackfillParams", "Mode", "parse_scheduler_parameters"]

Mode = Literal["fcfs", "easy", "conservative"]
_MODES: tuple[Mode, ...] = ("fcfs", "easy", "conservative")


@dataclass(frozen=True, slots=True)
class BackfillParams:
    """How far and how finely the planner looks ahead."""

    mode: Mode = "easy"
    depth: int = 1  # binding reservations (the first `depth` blocked jobs)
    window_s: int = 1440 * 60  # bf_window: no reservation further ahead than this
    resolution_s: int = 60  # bf_resolution: planned start times are rounded up to this
    max_job_test: int = 500  # bf_max_job_test: blocked jobs examined per cycle
    # bf_estimates: blocked jobs beyond the binding ones that get an expected start (squeue
    # --start); a replay that only needs decisions sets 0 and skips that work
    estimates: int = 1_000_000
    # bf_interval: seconds between two rounds of those estimates (slurmctld's backfill runs
    # every bf_interval, 30 s unless set, and only then updates StartTime); 0, Caldera's
    # default, estimates in every cycle. Starts and the binding reservations are decided
    # in every cycle either way.
    interval_s: int = 0

    def estimates_due(self, last: float | None, now: float) -> bool:
        """Whether a cycle at `now` estimates again, the last round having been at `last`."""
        return self.interval_s <= 0 or last is None or not 0 <= now - last < self.interval_s

    @property
    def binding(self) -> int:
        """Reservations that lower jobs may not delay."""
        if self.mode == "easy":
            return 1
        if self.mode == "fcfs":
            return 0
        return self.depth


_LIMITS = {
    "bf_window": (1, 43200),  # minutes, as Slurm bounds it (30 days)
    "bf_resolution": (1, 3600),
    "bf_max_job_test": (1, 1_000_000),
    "bf_depth": (1, 1_000_000),
    "bf_estimates": (0, 1_000_000),
    "bf_interval": (1, 10800),  # seconds, Slurm's bounds
}


def parse_scheduler_parameters(text: str) -> BackfillParams:
    """The knobs in a `SchedulerParameters` string; other Slurm options in it (bf_continue,
    default_queue_depth, ...) are accepted and ignored. Raises ValueError naming the item
    that is wrong, so a bad configuration fails at load rather than mid-cycle."""
    params = BackfillParams()
    for item in (p.strip() for p in text.split(",")):
        if not item:
            continue
        key, sep, value = item.partition("=")
        if key == "bf_mode":
            if value not in _MODES:
                raise ValueError(f"SchedulerParameters: {item!r}: bf_mode is one of {_MODES}")
            params = replace(params, mode=value)
            continue
        if key not in _LIMITS:
            continue
        lo, hi = _LIMITS[key]
        if not sep or not value.isdigit() or not lo <= int(value) <= hi:
            raise ValueError(f"SchedulerParameters: {item!r}: expected an integer in [{lo}, {hi}]")
        n = int(value)
        if key == "bf_window":
            params = replace(params, window_s=n * 60)
        elif key == "bf_resolution":
            params = replace(params, resolution_s=n)
        elif key == "bf_max_job_test":
            params = replace(params, max_job_test=n)
        elif key == "bf_estimates":
            params = replace(params, estimates=n)
        elif key == "bf_interval":
            params = replace(params, interval_s=n)
        else:
            params = replace(params, depth=n)
    return params
