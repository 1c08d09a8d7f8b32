"""Who may preempt whom, and how (slurm.conf PreemptType, PreemptMode, PreemptExemptTime;
the QOS's Preempt list, PreemptMode, PreemptExemptTime and GraceTime from sacctmgr).

caldera.toml holds the site settings at the top level, in slurm.conf's words:

    preempt_type = "preempt/qos"          # or "preempt/partition_prio", "preempt/none"
    preempt_mode = "REQUEUE"              # or "CANCEL", "OFF"
    preempt_exempt_time = "00:05:00"      # running at least this long before preemptible

A QOS's PreemptMode (other than `cluster`) overrides the site's for its jobs as victims
(with the site's OFF, only jobs of a QOS with its own CANCEL or REQUEUE are preemptible);
its PreemptExemptTime overrides the site's. A job that may not be requeued (--no-requeue)
is cancelled instead (Slurm does the same). Everything here is pure.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import Enum
from typing import Any

from gateway.compat.duration import time_str_to_mins
from gateway.model.job import Job
from gateway.model.values import INFINITE, NO_VAL
from gateway.policy.model import PolicyState

__all__ = [
    "Mode",
    "PreemptConfig",
    "grace_s",
    "may_preempt",
    "may_preempt_any",
    "mode_of",
    "preempt_config",
]

_TYPES = ("preempt/none", "preempt/qos", "preempt/partition_prio")


class Mode(Enum):
    """What happens to a victim."""

    OFF = "off"
    CANCEL = "cancel"
    REQUEUE = "requeue"


@dataclass(frozen=True, slots=True)
class PreemptConfig:
    """The site's preemption settings."""

    type: str = "preempt/none"
    mode: Mode = Mode.OFF
    exempt_s: int = 0

    @property
    def enabled(self) -> bool:
        """Whether any job may preempt another."""
        return self.type != "preempt/none"


def _mode(where: str, value: Any) -> Mode:
    words = [w.strip().lower() for w in str(value).split(",") if w.strip()]
    # GANG may accompany a mode in slurm.conf (PreemptMode=REQUEUE,GANG); it adds nothing here
    words = [w for w in words if w != "gang"] or ["off"]
    if len(words) != 1 or words[0] not in {m.value for m in Mode}:
        raise ValueError(f"{where}: PreemptMode must be OFF, CANCEL or REQUEUE, not {value!r}")
    return Mode(words[0])


def preempt_config(values: Mapping[str, Any]) -> PreemptConfig:
    """The site's settings from caldera.toml's top-level keys (absent: Slurm's defaults,
    preempt/none); a bad value is a ValueError naming the key."""
    kind = str(values.get("preempt_type", "preempt/none")).lower()
    if kind not in _TYPES:
        raise ValueError(f"preempt_type: one of {', '.join(_TYPES)}, not {kind!r}")
    mode = _mode("preempt_mode", values.get("preempt_mode", "OFF"))
    exempt = values.get("preempt_exempt_time", "0")
    mins = time_str_to_mins(str(exempt))
    if mins in (NO_VAL, INFINITE) or mins < 0:
        raise ValueError(f"preempt_exempt_time: invalid time {exempt!r}")
    return PreemptConfig(kind, mode, int(mins) * 60)


def mode_of(
    cfg: PreemptConfig, state: PolicyState | None, victim: Job, requeue_default: bool = True
) -> Mode:
    """How the victim is preempted: its QOS's PreemptMode, else the site's; REQUEUE
    becomes CANCEL for a job that may not be requeued (--no-requeue, or no --requeue
    where the site's JobRequeue default is off: `requeue_default`)."""
    qos = state.qos.get(victim.qos) if state is not None else None
    mode = cfg.mode
    if qos is not None and qos.preempt_mode not in ("cluster", ""):
        mode = Mode(qos.preempt_mode) if qos.preempt_mode in ("off", "cancel", "requeue") else mode
    requeue = requeue_default if victim.spec.requeue is None else victim.spec.requeue
    if mode is Mode.REQUEUE and not requeue:
        return Mode.CANCEL
    return mode


def grace_s(state: PolicyState | None, victim: Job) -> int:
    """The victim's QOS GraceTime in seconds (0: ended at once)."""
    qos = state.qos.get(victim.qos) if state is not None else None
    return qos.grace_time_s if qos is not None else 0


def _exempt(cfg: PreemptConfig, state: PolicyState | None, victim: Job, now: float) -> bool:
    qos = state.qos.get(victim.qos) if state is not None else None
    exempt = cfg.exempt_s
    if qos is not None and qos.preempt_exempt_s is not None:
        exempt = qos.preempt_exempt_s
    return exempt > 0 and now - (victim.start_time or now) < exempt


def may_preempt_any(cfg: PreemptConfig, state: PolicyState | None, job: Job) -> bool:
    """A cheap first test for a pending job: could it preempt anything at all (its QOS
    lists another in Preempt; preempt/partition_prio: always worth asking)."""
    if not cfg.enabled:
        return False
    if cfg.type == "preempt/qos":
        qos = state.qos.get(job.qos) if state is not None else None
        return qos is not None and bool(qos.preempt)
    return True


def may_preempt(
    cfg: PreemptConfig,
    state: PolicyState | None,
    tiers: Mapping[str, int],
    now: float,
    preemptor: Job,
    victim: Job,
) -> bool:
    """Whether `preemptor` may preempt the running `victim` now: preempt/qos, the
    preemptor's QOS lists the victim's in Preempt; preempt/partition_prio, the preemptor's
    partition has a higher PriorityTier (`tiers`, default 1) than the victim's. Never a
    victim whose mode is OFF or that has not yet run PreemptExemptTime."""
    if not cfg.enabled or mode_of(cfg, state, victim) is Mode.OFF:
        return False
    if _exempt(cfg, state, victim, now):
        return False
    if cfg.type == "preempt/qos":
        qos = state.qos.get(preemptor.qos) if state is not None else None
        return qos is not None and victim.qos in qos.preempt
    parts = [p for p in preemptor.partition.split(",") if p]
    mine = max((tiers.get(p, 1) for p in parts), default=1)
    return mine > tiers.get(victim.partition, 1)
