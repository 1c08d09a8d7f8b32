"""The result of one sacctmgr change."""

from __future__ import annotations

from dataclasses import dataclass

from gateway.policy.model import PolicyState

__all__ = ["Outcome"]


@dataclass(frozen=True, slots=True)
class Outcome:
    """The new state (None: unchanged), what sacctmgr prints, and its exit status."""

    state: PolicyState | None
    out: str
    err: str = ""
    rc: int = 0
