"""`scontrol show config`: the part of slurm.conf Caldera has, in scontrol's layout.

scontrol prints `Configuration data as of <time>`, then `%-23s = %s` per key in its own
order (`_write_key_pairs` over `slurm_ctl_conf_2_key_pairs`), then the controllers' ping
lines after a blank line. Keys whose value Caldera does not hold are left out rather than
invented.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from gateway.compat.fmt_common import make_time_str
from gateway.compat.options_help import SLURM_COMPAT_VERSION

__all__ = ["SiteConfig", "show_config"]


@dataclass(frozen=True, slots=True, kw_only=True)
class SiteConfig:
    """What the gateway reports of its configuration."""

    cluster: str
    def_mem_per_cpu_mb: int | None
    job_requeue: bool
    max_array_size: int
    gres_types: Sequence[str] = ()
    host: str = "localhost"


def show_config(conf: SiteConfig, *, now: float, up: bool = True) -> str:
    """The text of `scontrol show config` (each line ends with a newline)."""
    pairs: list[tuple[str, str]] = [("ClusterName", conf.cluster)]
    if conf.def_mem_per_cpu_mb:
        pairs.append(("DefMemPerCPU", str(conf.def_mem_per_cpu_mb)))
    else:
        pairs.append(("DefMemPerNode", "UNLIMITED"))
    pairs += [
        ("GresTypes", ",".join(conf.gres_types) or "(null)"),
        ("JobRequeue", str(int(conf.job_requeue))),
        ("MaxArraySize", str(conf.max_array_size)),
        ("SLURM_VERSION", SLURM_COMPAT_VERSION),
    ]
    lines = [f"Configuration data as of {make_time_str(now)}"]
    lines += [f"{key:<23} = {value}" for key, value in pairs]
    lines += ["", f"Slurmctld(primary) at {conf.host} is {'UP' if up else 'DOWN'}"]
    return "".join(line + "\n" for line in lines)
