"""The `[dashboard]` table of caldera.toml.

The dashboard is on the Unix socket always (the peer's credentials say who is looking);
a TCP listener exists only when `listen` is set, because a TCP peer can be anyone and must
then show a token. Unknown keys are refused, as the rest of caldera.toml refuses them, so a
misspelt `listen` does not silently leave the dashboard off.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gateway.api.tcp_listen import parse_listen
from gateway.dashboard.auth import KEY_NAME, MAX_LIFESPAN_S

__all__ = ["DashboardSettings", "dashboard_settings"]


@dataclass(frozen=True, slots=True)
class DashboardSettings:
    """What the dashboard needs from configuration."""

    key_path: Path
    listen: tuple[str, int] | None = None  # (host, port) of the TCP listener, if any
    sample_interval_s: float = 5.0  # how often queue length and utilisation are sampled
    history_samples: int = 720  # kept in memory: an hour at the default interval
    max_lifespan_s: int = MAX_LIFESPAN_S


def _listen(where: str, value: object) -> tuple[str, int]:
    if not isinstance(value, str) or ":" not in value:
        raise ValueError(f'{where}: listen must be "HOST:PORT", e.g. "127.0.0.1:6821"')
    try:
        return parse_listen(value)
    except ValueError as exc:
        raise ValueError(f"{where}: {exc}") from None


def dashboard_settings(home: Path, table: Mapping[str, Any] | None) -> DashboardSettings:
    """The settings of `[dashboard]` (None: no table, the defaults)."""
    where = f"{home / 'caldera.toml'}: [dashboard]"
    if table is not None and not isinstance(table, Mapping):
        raise ValueError(f"{where}: must be a table ([dashboard])")
    data = dict(table or {})
    known = {"listen", "jwt_key", "sample_interval_s", "history_samples", "max_lifespan_s"}
    unknown = sorted(set(data) - known)
    if unknown:
        raise ValueError(f"{where}: unknown setting(s) {', '.join(map(repr, unknown))}")
    key = Path(str(data.get("jwt_key", home / KEY_NAME)))
    listen = _listen(where, data["listen"]) if data.get("listen") else None
    interval = float(data.get("sample_interval_s", 5.0))
    samples = int(data.get("history_samples", 720))
    lifespan = int(data.get("max_lifespan_s", MAX_LIFESPAN_S))
    if interval <= 0 or samples <= 0 or lifespan <= 0:
        raise ValueError(f"{where}: intervals, sample counts and lifespans must be positive")
    return DashboardSettings(key, listen, interval, samples, lifespan)
