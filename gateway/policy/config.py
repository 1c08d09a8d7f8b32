"""The `[priority]` table of caldera.toml, in slurm.conf's words, to a PriorityConfig:

    [priority]
    PriorityType = "priority/multifactor"
    PriorityWeightAge = 1000
    PriorityWeightFairshare = 10000
    PriorityWeightTRES = "CPU=1000,Mem=2000,GRES/gpu=3000"
    PriorityMaxAge = "14-0"
    PriorityDecayHalfLife = "14-0"
    PriorityFlags = "NO_FAIR_TREE,SMALL_RELATIVE_TO_TIME"

A bad key or value is a ValueError naming it (the gateway refuses to start on it).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gateway.compat.duration import time_str_to_mins
from gateway.model.values import INFINITE, NO_VAL
from gateway.policy.priority import PriorityConfig

__all__ = ["priority_config"]

_WEIGHTS = {
    "priorityweightage": "weight_age",
    "priorityweightassoc": "weight_assoc",
    "priorityweightfairshare": "weight_fairshare",
    "priorityweightjobsize": "weight_jobsize",
    "priorityweightpartition": "weight_partition",
    "priorityweightqos": "weight_qos",
}
_FLAGS = {
    "FAIR_TREE": None,
    "NO_FAIR_TREE": "no_fair_tree",
    "SMALL_RELATIVE_TO_TIME": "small_relative_to_time",
    "NO_NORMAL_ASSOC": "no_normal_assoc",
    "NO_NORMAL_PART": "no_normal_part",
    "NO_NORMAL_QOS": "no_normal_qos",
    "NO_NORMAL_TRES": "no_normal_tres",
    "NO_NORMAL_ALL": "no_normal_all",
    "ACCRUE_ALWAYS": None,
    "CALCULATE_RUNNING": None,
    "INCR_ONLY": None,
    "MAX_TRES": None,
}


def _weight(where: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= 0xFFFFFFFF:
        raise ValueError(f"{where}: must be an integer from 0 to 4294967295, not {value!r}")
    return value


def _duration_s(where: str, value: Any) -> int:
    mins = time_str_to_mins(str(value))
    if mins in (NO_VAL, INFINITE) or mins < 0:
        raise ValueError(f"{where}: invalid time {value!r} (min, hr:min:00, days-hr:min:00...)")
    return int(mins) * 60


def _tres(where: str, value: Any) -> dict[str, float]:
    out: dict[str, float] = {}
    for item in (i for i in str(value).split(",") if i):
        name, eq, num = item.partition("=")
        try:
            weight = float(num)
        except ValueError:
            weight = -1.0
        if not eq or weight < 0:
            raise ValueError(f"{where}: bad weight {item!r} (Name=weight, e.g. CPU=1000)")
        out[name.strip().lower()] = weight
    return out


def priority_config(table: Mapping[str, Any] | None, where: str = "[priority]") -> PriorityConfig:
    """The PriorityConfig of the table (defaults: slurm.conf's, priority/basic)."""
    values: dict[str, Any] = {}
    for key, value in (table or {}).items():
        k = key.lower()
        at = f"{where} {key}"
        if k == "prioritytype":
            if value not in ("priority/basic", "priority/multifactor"):
                raise ValueError(f"{at}: priority/basic or priority/multifactor, not {value!r}")
            values["type"] = value
        elif k in _WEIGHTS:
            values[_WEIGHTS[k]] = _weight(at, value)
        elif k == "priorityweighttres":
            values["weight_tres"] = _tres(at, value)
        elif k == "prioritymaxage":
            values["max_age_s"] = _duration_s(at, value)
        elif k == "prioritydecayhalflife":
            values["decay_half_life_s"] = _duration_s(at, value)
        elif k == "prioritycalcperiod":
            values["calc_period_s"] = max(1, _duration_s(at, value))
        elif k == "priorityfavorsmall":
            values["favor_small"] = str(value).lower() in ("yes", "true", "1")
        elif k == "fairsharedampeningfactor":
            values["dampening"] = max(1, _weight(at, value))
        elif k == "priorityflags":
            values.update(_flags(at, value))
        else:
            raise ValueError(f"{at}: unknown setting")
    return PriorityConfig(**values)


def _flags(where: str, value: Any) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for flag in (f.strip().upper() for f in str(value).split(",") if f.strip()):
        if flag not in _FLAGS:
            raise ValueError(f"{where}: unknown flag {flag!r}")
        name = _FLAGS[flag]
        if name == "no_fair_tree":
            out["fair_tree"] = False
        elif name == "no_normal_all":
            for n in ("no_normal_assoc", "no_normal_part", "no_normal_qos", "no_normal_tres"):
                out[n] = True
        elif name is not None:
            out[name] = True
    return out
