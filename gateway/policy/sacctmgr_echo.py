"""What sacctmgr echoes under " Settings" when it adds or modifies: the fields that were
given, in the order and with the padding of `sacctmgr_print_assoc_limits` and
`sacctmgr_print_qos_limits` (src/sacctmgr/common.c)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from gateway.compat.duration import mins_to_str
from gateway.policy.sacctmgr_keys import Change
from gateway.policy.values import CLEAR, format_tres

__all__ = ["assoc_echo", "qos_echo"]

_ASSOC_ORDER = (
    ("Fairshare", "  Fairshare     = "),
    ("GrpJobs", "  GrpJobs       = "),
    ("GrpSubmitJobs", "  GrpSubmitJobs = "),
    ("GrpTRES", "  GrpTRES       = "),
    ("GrpWall", "  GrpWall       = "),
    ("MaxJobs", "  MaxJobs       = "),
    ("MaxSubmitJobs", "  MaxSubmitJobs = "),
    ("MaxTRES", "  MaxTRES       = "),
    ("MaxWall", "  MaxWall       = "),
    ("Parent", "  Parent        = "),
    ("Priority", "  Priority      = "),
    ("QOS", "  QOS           = "),
    ("DefQOS", "  DefQOS        = "),
)

_QOS_ORDER = (
    ("Flags", "  Flags                    = "),
    ("GraceTime", "  GraceTime                = "),
    ("GrpJobs", "  GrpJobs                  = "),
    ("GrpSubmitJobs", "  GrpSubmitJobs            = "),
    ("GrpTRES", "  GrpTRES                  = "),
    ("GrpWall", "  GrpWall                  = "),
    ("MaxJobsPerUser", "  MaxJobsPerUser = "),
    ("MaxSubmitJobsPerUser", "  MaxSubmitJobsPerUser     = "),
    ("MaxTRESPerJob", "  MaxTRESPerJob            = "),
    ("MaxTRESPerUser", "  MaxTRESPerUser           = "),
    ("MaxWall", "  MaxWall                  = "),
    ("Preempt", "  Preempt                  = "),
    ("PreemptMode", "  PreemptMode              = "),
    ("PreemptExemptTime", "  PreemptExemptTime        = "),
    ("Priority", "  Priority                 = "),
    ("UsageFactor", "  UsageFactor              = "),
)


def _text(change: Change) -> str:
    value: Any = change.value
    if isinstance(value, dict):
        kept = {k: v for k, v in value.items() if v != CLEAR}
        return format_tres(kept) or "NONE"
    if value is None:
        return "parent"
    if value == CLEAR:
        return "NONE"
    if change.field in ("max_wall", "grp_wall"):
        return mins_to_str(int(value))
    if change.field in ("grace_time_s",):
        return str(int(value))
    if change.field == "preempt_exempt_s":
        return mins_to_str(int(value) // 60)
    if change.field == "usage_factor":
        return f"{float(value):.4f}"
    if change.field == "preempt_mode":
        return str(value).upper()
    if isinstance(value, tuple):
        return ",".join(sorted(value))
    return str(value)


def _echo(order: Sequence[tuple[str, str]], changes: Sequence[Change]) -> str:
    by_label = {c.label: c for c in changes}
    return "".join(
        f"{prefix}{_text(by_label[label])}\n" for label, prefix in order if label in by_label
    )


def assoc_echo(changes: Sequence[Change]) -> str:
    """The association settings block."""
    return _echo(_ASSOC_ORDER, changes)


def qos_echo(changes: Sequence[Change]) -> str:
    """The QOS settings block (after its Description line)."""
    return _echo(_QOS_ORDER, changes)
