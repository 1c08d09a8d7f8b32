"""Node states as Slurm 22.05 encodes and prints them (`node_state_string` and friends).

A node state is a base (UNKNOWN, DOWN, IDLE, ALLOCATED, MIXED, FUTURE) ORed with flags
(DRAIN, COMPLETING, NOT_RESPONDING, RESERVED, ...). sinfo prints `down*`, `drain`, `mix`;
scontrol prints `DOWN+RESERVED+NOT_RESPONDING`; sinfo sorts by the number. `node_state`
builds that number from a Caldera `Node` and the flags a backend reported.
"""

from __future__ import annotations

from typing import Final

from gateway.compat.fmt_common import NodeExtras
from gateway.model.cluster import Node, NodeState

__all__ = [
    "BASE",
    "FLAGS",
    "node_state",
    "node_state_base_string",
    "node_state_string",
    "node_state_string_compact",
    "node_state_string_complete",
]

BASE: Final = {
    "UNKNOWN": 0,
    "DOWN": 1,
    "IDLE": 2,
    "ALLOCATED": 3,
    "ERROR": 4,
    "MIXED": 5,
    "FUTURE": 6,
}
_BASE_NAME = {v: k for k, v in BASE.items()}

# node_state_flags[] in the order slurm_protocol_defs.c lists (and prints) them
FLAGS: Final = {
    "CLOUD": 1 << 7,
    "COMPLETING": 1 << 10,
    "DRAIN": 1 << 9,
    "DYNAMIC_FUTURE": 1 << 19,
    "DYNAMIC_NORM": 1 << 26,
    "INVALID_REG": 1 << 22,
    "FAIL": 1 << 13,
    "MAINTENANCE": 1 << 15,
    "POWER_DOWN": 1 << 23,
    "POWER_UP": 1 << 24,
    "PERFCTRS": 1 << 4,
    "POWERED_DOWN": 1 << 12,
    "REBOOT_REQUESTED": 1 << 16,
    "REBOOT_ISSUED": 1 << 20,
    "RESERVED": 1 << 5,
    "RESUME": 1 << 8,
    "NOT_RESPONDING": 1 << 11,
    "PLANNED": 1 << 21,
    "POWERING_UP": 1 << 14,
    "POWERING_DOWN": 1 << 18,
}
_F = FLAGS

_FROM_MODEL = {
    NodeState.IDLE: (BASE["IDLE"], 0),
    NodeState.MIXED: (BASE["MIXED"], 0),
    NodeState.ALLOCATED: (BASE["ALLOCATED"], 0),
    NodeState.DOWN: (BASE["DOWN"], 0),
    NodeState.DRAINED: (BASE["IDLE"], _F["DRAIN"]),
    NodeState.DRAINING: (BASE["ALLOCATED"], _F["DRAIN"]),
    NodeState.UNKNOWN: (BASE["UNKNOWN"], 0),
}


def node_state(node: Node, extras: NodeExtras | None = None) -> int:
    """The node's state number: the reported base and flags, else the model's state."""
    base, flags = _FROM_MODEL[node.state]
    if extras is not None:
        if extras.base_state is not None and extras.base_state.upper() in BASE:
            base = BASE[extras.base_state.upper()]
        for name in extras.state_flags:
            flags |= FLAGS.get(name.upper(), 0)
    return base | flags


def node_state_base_string(state: int) -> str:
    """`DOWN`, `IDLE`, ... (`node_state_base_string`)."""
    return _BASE_NAME.get(state & 0xF, "INVALID")


def node_state_string_complete(state: int) -> str:
    """`DOWN+RESERVED+NOT_RESPONDING`, as `scontrol show node` prints State=."""
    out = node_state_base_string(state)
    flags = state & ~0xF
    for name, bit in FLAGS.items():
        if flags & bit:
            out += f"+{name}"
            flags &= ~bit
    while flags:
        flags &= flags - 1
        out += "+?"
    return out


def _suffix(state: int) -> str | None:
    """The one-character marks for maintenance, reboot and power states, and `*`."""
    for bit, mark in (
        (_F["MAINTENANCE"], "$"),
        (_F["REBOOT_ISSUED"], "^"),
        (_F["REBOOT_REQUESTED"], "@"),
        (_F["POWERING_UP"], "#"),
        (_F["POWERING_DOWN"], "%"),
        (_F["POWERED_DOWN"], "~"),
        (_F["POWER_DOWN"], "!"),
        (_F["NOT_RESPONDING"], "*"),
    ):
        if state & bit:
            return mark
    return None


def _name(state: int, compact: bool) -> str:
    base = state & 0xF

    def has(name: str) -> bool:
        return bool(state & _F[name])

    alloc, down, mixed = BASE["ALLOCATED"], BASE["DOWN"], BASE["MIXED"]
    mark = _suffix(state) or ""
    if has("INVALID_REG"):
        return "INVAL"
    if has("MAINTENANCE") and not (has("DRAIN") or base in (alloc, down, mixed)):
        return "MAINT*" if has("NOT_RESPONDING") else "MAINT"
    if (has("REBOOT_REQUESTED") or has("REBOOT_ISSUED")) and base not in (alloc, mixed):
        word = "BOOT" if compact else "REBOOT"
        if has("REBOOT_ISSUED"):
            return word + "^"
        return word + "*" if has("NOT_RESPONDING") else word
    if has("DRAIN"):
        busy = has("COMPLETING") or base in (alloc, mixed)
        if compact:
            return ("DRNG" if busy else "DRAIN") + mark
        return ("DRAINING" if busy else "DRAINED") + mark
    if has("FAIL"):
        failing = has("COMPLETING") or base == alloc
        word = ("FAILG" if compact else "FAILING") if failing else "FAIL"
        return word + "*" if has("NOT_RESPONDING") else word
    flags_only = state & ~0xF
    for name, long_text, short_text in (
        ("REBOOT_ISSUED", "REBOOT_ISSUED", "BOOT^"),
        ("CLOUD", "CLOUD", "CLOUD"),
        ("POWER_DOWN", "POWER_DOWN", "POW_DN"),
        ("POWER_UP", "POWER_UP", "POW_UP"),
        ("POWERING_DOWN", "POWERING_DOWN", "POWRING_DN"),
        ("POWERED_DOWN", "POWERED_DOWN", "POWERED_DN"),
        ("POWERING_UP", "POWERING_UP", "POWERING_UP"),
    ):
        if state == _F[name] and flags_only == state:
            return short_text if compact else long_text
    if base == down:
        return "DOWN" + mark
    if base == alloc:
        word = "ALLOC" if compact else "ALLOCATED"
        if mark:
            return word + mark
        return word + "+" if has("COMPLETING") else word
    if has("COMPLETING"):
        return ("COMP" if compact else "COMPLETING") + mark
    if base == BASE["IDLE"]:
        if mark:
            return "IDLE" + mark
        if has("PERFCTRS"):
            return "NPC" if compact else "PERFCTRS"
        if has("RESERVED"):
            return "RESV" if compact else "RESERVED"
        if has("PLANNED"):
            return "PLND" if compact else "PLANNED"
        return "IDLE"
    if base == mixed:
        word = "MIX" if compact else "MIXED"
        if mark:
            return word + mark
        return word + "-" if has("PLANNED") else word
    if base == BASE["FUTURE"]:
        return ("FUTR" if compact else "FUTURE") + mark
    if has("RESUME"):
        return "RESM" if compact else "RESUME"
    if base == BASE["UNKNOWN"]:
        word = "UNK" if compact else "UNKNOWN"
        return word + "*" if has("NOT_RESPONDING") else word
    return "?"


def node_state_string(state: int) -> str:
    """`node_state_string`: `DOWN*`, `DRAINING`, `MIXED`, ... (sinfo %T upper-cased)."""
    return _name(state, compact=False)


def node_state_string_compact(state: int) -> str:
    """`node_state_string_compact`: `DOWN*`, `DRNG`, `MIX`, ... (sinfo %t upper-cased)."""
    return _name(state, compact=True)
