"""Who may preempt whom, and how (slurm.conf PreemptType, PreemptMode, PreemptExemptTime;
the QOS's Preempt list, PreemptMode, PreemptExemptTime and GraceTime from sacctmgr).

caldera.toml holds the site settings at the top level, in slurm.conf's words:

    preempt_type = "preempt/qos"          # or "preempt/partition_prio", "preempt/none"
    preempt_mode = "REQUEUE"              # or "CANCEL", "OFF", "SUSPEND,GANG"
    preempt_exempt_time = "00:05:00"      # running at least this long before preemptible

A QOS's PreemptMode (other than `cluster`) overrides the site's for its jobs as victims
(with the site's OFF, only jobs of a QOS with its own CANCEL or REQUEUE are preemptible);
its PreemptExemptTime overrides the site's. Under preempt/partition_prio the victim's
partition gives PreemptMode and GraceTime instead (slurm.conf's PartitionName= keys, or
caldera.toml's [[partitions]] priority_tier, preempt_mode, grace_time), and nothing is
preempted when the site's mode is OFF (the plugin's PREEMPT_DATA_ENABLED). A job that may
not be requeued (--no-requeue) is cancelled instead (Slurm does the same). A QOS with
Caldera's `Privileged` flag is never a victim. Everything here is pure.

SUSPEND (the victim is stopped while its preemptor runs on its room, and continues when the
preemptor ends) is taken under preempt/partition_prio only, and the site's mode must then
say GANG too, as slurmctld insists ("PreemptMode=SUSPEND requires GANG too"). slurmctld
also takes SUSPEND,GANG with preempt/qos, but then suspends nothing: on the burst test
cluster (22.05, partitions with OverSubscribe=NO sharing one node, a QOS with
PreemptMode=suspend listed in the other's Preempt) the higher QOS's job in another
partition started at once beside the victim, both using the node's CPUs, the victim never
stopped; one in the victim's own partition waited for it to end (tests/data/
slurm_preempt_22.05.json). Caldera does not oversubscribe, so it refuses that setting
rather than do something else under its name. A QOS's own `preemptmode=suspend` is not
used (the site's mode applies), for the same reason.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import Enum
from typing import Any

from gateway.compat.duration import time_str_to_mins
from gateway.model.cluster import ClusterState, Partition
from gateway.model.job import Job
from gateway.model.values import INFINITE, NO_VAL
from gateway.policy.model import PolicyState, Qos

__all__ = [
    "PRIVILEGED",
    "Mode",
    "Parts",
    "PreemptConfig",
    "grace_s",
    "job_tier",
    "may_preempt",
    "may_preempt_any",
    "mode_of",
    "mode_text",
    "parse_mode",
    "partition_tiers",
    "preempt_config",
    "privileged",
]

PRIVILEGED = "Privileged"  # Caldera's QOS flag: delayed, job-level preemption (WillEvict)
_TYPES = ("preempt/none", "preempt/qos", "preempt/partition_prio")


class Mode(Enum):
    """What happens to a victim."""

    OFF = "off"
    CANCEL = "cancel"
    REQUEUE = "requeue"
    SUSPEND = "suspend"  # preempt/partition_prio only; the local runner (else REQUEUE)


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


def parse_mode(where: str, value: Any, site: bool = False) -> Mode:
    """A PreemptMode as slurm.conf writes it; ValueError naming `where` otherwise. The
    site's (`site`) SUSPEND needs GANG beside it, as slurmctld requires."""
    words = [w.strip().lower() for w in str(value).split(",") if w.strip()]
    gang = "gang" in words
    # GANG may accompany a mode in slurm.conf (PreemptMode=REQUEUE,GANG); it adds nothing here
    words = [w for w in words if w != "gang"] or ["off"]
    if len(words) != 1 or words[0] not in {m.value for m in Mode}:
        raise ValueError(
            f"{where}: PreemptMode must be OFF, CANCEL, REQUEUE or SUSPEND, not {value!r}"
        )
    if site and words[0] == Mode.SUSPEND.value and not gang:
        raise ValueError(f"{where}: PreemptMode=SUSPEND requires GANG too")
    return Mode(words[0])


def mode_text(mode: Mode) -> str:
    """A mode as `scontrol show partition` prints the site's (GANG is implied by, and
    required with, SUSPEND: slurmctld prints `GANG,SUSPEND`)."""
    return "GANG,SUSPEND" if mode is Mode.SUSPEND else mode.name


def preempt_config(values: Mapping[str, Any]) -> PreemptConfig:
    """The site's settings from caldera.toml's top-level keys (absent: Slurm's defaults,
    preempt/none); a bad value is a ValueError naming the key."""
    kind = str(values.get("preempt_type", "preempt/none")).lower()
    if kind not in _TYPES:
        raise ValueError(f"preempt_type: one of {', '.join(_TYPES)}, not {kind!r}")
    mode = parse_mode("preempt_mode", values.get("preempt_mode", "OFF"), site=True)
    if mode is Mode.SUSPEND and kind == "preempt/qos":
        raise ValueError(
            "preempt_mode: SUSPEND is supported with preempt/partition_prio only, not with "
            "preempt/qos (slurmctld suspends nothing then: it runs the jobs of different "
            "partitions side by side on the same CPUs)"
        )
    exempt = values.get("preempt_exempt_time", "0")
    mins = time_str_to_mins(str(exempt))
    if mins in (NO_VAL, INFINITE) or mins < 0:
        raise ValueError(f"preempt_exempt_time: invalid time {exempt!r}")
    return PreemptConfig(kind, mode, int(mins) * 60)


Parts = Mapping[str, Partition]  # the site's partitions by name


def _qos(state: PolicyState | None, name: str) -> Qos | None:
    return state.qos.get(name) if state is not None else None


def privileged(state: PolicyState | None, job: Job) -> bool:
    """Whether the job's QOS has Caldera's `Privileged` flag: it preempts with WillEvict
    marks and a delay (control/will_evict.py), and is never itself a victim."""
    qos = _qos(state, job.qos)
    return qos is not None and PRIVILEGED in qos.flags


def mode_of(
    cfg: PreemptConfig,
    state: PolicyState | None,
    victim: Job,
    requeue_default: bool = True,
    parts: Parts | None = None,
) -> Mode:
    """How the victim is preempted, as the plugin's get_mode: preempt/qos, its QOS's
    PreemptMode unless `cluster`, else the site's; preempt/partition_prio, its
    partition's PreemptMode (the site's when not set: `local_cluster` fills it in).
    REQUEUE becomes CANCEL for a job that may not be requeued (--no-requeue, or no
    --requeue where the site's JobRequeue default is off: `requeue_default`)."""
    mode = cfg.mode
    if cfg.type == "preempt/partition_prio":
        part = (parts or {}).get(victim.partition)
        if part is not None:
            mode = parse_mode(f"partition {part.name}", part.preempt_mode)
    else:
        qos = _qos(state, victim.qos)
        if qos is not None and qos.preempt_mode in ("off", "cancel", "requeue"):
            mode = Mode(qos.preempt_mode)
    requeue = requeue_default if victim.spec.requeue is None else victim.spec.requeue
    if mode is Mode.REQUEUE and not requeue:
        return Mode.CANCEL
    return mode


def grace_s(
    cfg: PreemptConfig, state: PolicyState | None, victim: Job, parts: Parts | None = None
) -> int:
    """The victim's GraceTime in seconds (0: ended at once): its QOS's under preempt/qos,
    its partition's under preempt/partition_prio (as the plugins' get_grace_time)."""
    if cfg.type == "preempt/partition_prio":
        part = (parts or {}).get(victim.partition)
        return part.grace_time_s if part is not None else 0
    qos = _qos(state, victim.qos)
    return qos.grace_time_s if qos is not None else 0


def _exempt(cfg: PreemptConfig, state: PolicyState | None, victim: Job, now: float) -> bool:
    qos = _qos(state, victim.qos)
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
        qos = _qos(state, job.qos)
        return qos is not None and bool(qos.preempt)
    return cfg.mode is not Mode.OFF


def _tier_over(parts: Parts, preemptor: Job, victim: Job) -> bool:
    """preempt_partition_prio.c: some partition of the preemptor that shares nodes with
    the victim's partition has a strictly higher PriorityTier."""
    theirs = parts.get(victim.partition)
    if theirs is None:
        return False
    shared = set(theirs.nodes)
    for name in (p for p in preemptor.partition.split(",") if p):
        mine = parts.get(name)
        if mine and mine.priority_tier > theirs.priority_tier and shared.intersection(mine.nodes):
            return True
    return False


def may_preempt(
    cfg: PreemptConfig,
    state: PolicyState | None,
    parts: Parts,
    now: float,
    preemptor: Job,
    victim: Job,
) -> bool:
    """Whether `preemptor` may preempt the running `victim` now: preempt/qos, the
    preemptor's QOS lists the victim's in Preempt; preempt/partition_prio, a partition of
    the preemptor sharing nodes with the victim's has a higher PriorityTier. Never a
    victim whose mode is OFF, that has not yet run PreemptExemptTime, or whose QOS is
    Privileged."""
    if not cfg.enabled or mode_of(cfg, state, victim, parts=parts) is Mode.OFF:
        return False
    if _exempt(cfg, state, victim, now) or privileged(state, victim):
        return False
    if cfg.type == "preempt/qos":
        qos = _qos(state, preemptor.qos)
        return qos is not None and victim.qos in qos.preempt
    return _tier_over(parts, preemptor, victim)


def partition_tiers(clusters: Mapping[str, ClusterState]) -> dict[str, int]:
    """Each partition's PriorityTier by name, or {} when every tier is the default 1 (the
    common case: the queue order then costs nothing more)."""
    tiers = {p.name: p.priority_tier for c in clusters.values() for p in c.partitions}
    return tiers if any(t != 1 for t in tiers.values()) else {}


def job_tier(tiers: Mapping[str, int], job: Job) -> int:
    """The highest PriorityTier among the job's partitions (slurmctld queues a job once
    per partition and tries the highest tier first)."""
    return max((tiers.get(p, 1) for p in job.partition.split(",") if p), default=1)
