"""Checks of option values that Caldera keeps as text but sbatch refuses when malformed.

Task distribution (`-m`), CPU frequency, memory binding, accounting frequency and
profiling are checked by sbatch when it reads the option (Slurm 22.05's
`verify_dist_type`, `cpu_freq_verify_cmdline`, `slurm_verify_mem_bind`,
`validate_acctg_freq`, `acct_gather_profile_from_string`). Each function returns None for
a good value or the lines sbatch prints before exiting with status 255.
"""

from __future__ import annotations

from gateway.compat.cnum import strtol, strtoul, to_uint32

__all__ = [
    "acctg_freq_errors",
    "cpu_freq_errors",
    "distribution_errors",
    "is_arbitrary",
    "mem_bind_errors",
    "profile_is_valid",
]

_DISTRIBUTIONS = frozenset(
    {"cyclic", "block", "arbitrary", "hostfile"}
    | {f"{a}:{b}" for a in ("cyclic", "block") for b in ("cyclic", "block", "fcyclic")}
    | {
        f"{a}:{b}:{c}"
        for a in ("cyclic", "block")
        for b in ("cyclic", "block", "fcyclic")
        for c in ("cyclic", "block", "fcyclic")
    }
)
_DIST_FLAGS = frozenset({"pack", "nopack"})
INT_MAX = 2**31 - 1


def _dist_base(text: str) -> bool:
    """`_parse_dist_base`: `node[:socket[:core]]` (`*` for defaults) and a pack flag."""
    if text == "" or text.startswith(","):
        return False
    base, _, flag = text.partition(",")
    tokens = [t for t in base.split(":") if t]
    if not tokens or len(tokens) > 3:
        return False
    out: list[str] = []
    socket = ""
    for i, tok in enumerate(tokens):
        if tok == "*":
            word = ("block", "cyclic", socket)[i]
            if i == 1:
                socket = "cyclic"
        else:
            word = tok
            if i == 1:
                socket = tok
        out.append(word)
    joined = ":".join(out).lower()
    if joined not in _DISTRIBUTIONS and joined not in _DIST_FLAGS:
        return False
    return flag == "" or flag.lower() in _DIST_FLAGS


def is_arbitrary(text: str | None) -> bool:
    """Whether a (valid) distribution is `arbitrary` (or its alias `hostfile`)."""
    if not text:
        return False
    base = text.partition(",")[0].split(":")[0].lower()
    return base in ("arbitrary", "hostfile")


def distribution_errors(text: str) -> list[str] | None:
    """`verify_dist_type`: None when valid, else sbatch's error lines."""
    if text[:5].lower() == "plane":
        eq = text.find("=")
        size_text = text[eq + 1 :] if eq >= 0 else ""
        value, end = strtol(size_text)
        if size_text == "" or end != len(size_text) or not 0 < value <= INT_MAX:
            return [
                "Invalid plane size or size not specified",
                "Invalid --distribution specification",
            ]
        return None
    return None if _dist_base(text) else ["Invalid --distribution specification"]


# CPU frequencies: governors and named frequencies (slurm.h's CPU_FREQ_* values).
_RANGE = 0x8000_0000
_GOVERNORS: tuple[tuple[str, int], ...] = (
    ("co", 0x8800_0000),
    ("perf", 0x8200_0000),
    ("pow", 0x8100_0000),
    ("user", 0x8080_0000),
    ("onde", 0x8400_0000),
    ("sche", 0x8040_0000),
)
_DEFAULT_GOVERNORS = 0x8400_0000 | 0x8200_0000 | 0x8080_0000  # OnDemand,Performance,UserSpace


def _governor(text: str) -> int:
    low = text.lower()
    return next((value for prefix, value in _GOVERNORS if low.startswith(prefix)), 0)


def _frequency(text: str, lines: list[str]) -> int:
    low = text.lower()
    if low.startswith("lo"):
        return 0x8000_0001
    if low.startswith(("him1", "highm1")):
        return 0x8000_0004
    if low.startswith("hi"):
        return 0x8000_0003
    if low.startswith("med"):
        return 0x8000_0002
    value = to_uint32(strtoul(text)[0])
    if value:
        return value
    lines.append(f'unrecognized --cpu-freq argument "{text}"')
    return 0


def cpu_freq_errors(arg: str, governors: int = _DEFAULT_GOVERNORS) -> list[str] | None:
    """`cpu_freq_verify_cmdline` (`low[-high][:governor]`): None when valid."""
    lines: list[str] = []
    colon = arg.find(":")
    p3 = arg[colon + 1 :] if colon >= 0 else None
    dash = arg.find("-")
    if dash >= 0:
        p1 = arg[:dash]
        p2: str | None = arg[dash + 1 : colon] if colon >= 0 else arg[dash + 1 :]
    else:
        p1, p2 = (arg[:colon] if colon >= 0 else arg), None
    no_val = 0xFFFF_FFFE
    gov = 0
    failed = False
    high = no_val
    if (g := _governor(p1)) != 0:
        if p3 is not None:
            lines.append(f"governor cannot be specified twice {p1}{{-}}:{p3} in --cpu-freq")
            failed = True
        else:
            gov = g
    else:
        high = _frequency(p1, lines)
        failed = high == 0
    if not failed and p2 is not None:
        value = _frequency(p2, lines)
        if value == 0:
            failed = True
        else:
            low, high = high, value
            if high < low:
                lines.append(f"min cpu-frec ({p1}) must be < max cpu-freq ({p2})")
                failed = True
    if not failed and p3 is not None:
        if p2 is None:
            lines.append(f"gov on cpu-frec ({p3}) illegal without max")
            failed = True
        elif (g := _governor(p3)) == 0:
            lines.append(f"illegal governor: {p3} on --cpu-freq")
            failed = True
        else:
            gov = g
    if gov and (gov & governors) & ~_RANGE == 0:
        lines.append(f"governor of {arg} is not allowed in slurm.conf")
        failed = True
    if failed:
        return [*lines, "Invalid --cpu-freq argument"]
    return None


def _is_value(text: str) -> bool:
    """`_isvalue`: a decimal or hexadecimal field follows."""
    if text[:1].isdigit():
        return True
    i = 0
    while i < len(text) and text[i] in "0123456789abcdefABCDEF":
        i += 1
    return i == len(text) or text[i] == ","


def _expand_mult_errors(items: str, kind: str) -> list[str] | None:
    for tok in (t for t in items.split(",") if t):
        if kind.startswith("mask") and tok.startswith("0x"):
            tok = tok[2:]
        star = tok.find("*")
        if star < 0:
            continue
        rest = tok[star:]
        for ch in rest[1:]:
            if not ch.isdigit():
                return [f"Failed to validate number: {rest}, the offending character is {ch}"]
        count, end = strtol(rest, 1)
        if count <= 0 or end != len(rest) or count >= 2**63 - 1:
            return [f"Invalid {kind} multiplier: {rest[1:]}"]
    return None


def mem_bind_errors(arg: str) -> list[str] | None:
    """`slurm_verify_mem_bind`: None when valid (`help` prints and fails, as in Slurm)."""
    chars = list(arg)
    for i, ch in enumerate(chars):
        if ch == "," and not _is_value(arg[i + 1 :]):
            chars[i] = ";"
    for tok in "".join(chars).split(";"):
        low = tok.lower()
        if low == "help":
            return []
        if low in ("p", "prefer", "nosort", "sort", "q", "quiet", "v", "verbose"):
            continue
        if low in ("no", "none", "rank", "local"):
            continue
        for prefix, kind in (
            ("map_mem", "map_mem"),
            ("mapmem", "map_mem"),
            ("mask_mem", "mask_mem"),
            ("maskmem", "mask_mem"),
        ):
            if low.startswith(prefix):
                parts = _split_any(tok, ":=")
                items = parts[1] if len(parts) > 1 else ""
                if not items:
                    return [f'missing list for "--mem-bind={kind}:<list>"']
                return _expand_mult_errors(items, kind) or None
        return [f'unrecognized --mem-bind argument "{tok}"']
    return None


def _split_any(text: str, seps: str) -> list[str]:
    out = [""]
    for ch in text:
        if ch in seps:
            out.append("")
        else:
            out[-1] += ch
    return out


def _get_int(text: str) -> int:
    value, end = strtol(text)
    return -1 if end == 0 else value


def acctg_freq_errors(arg: str) -> list[str] | None:
    """`validate_acctg_freq`: every item must name a known frequency."""
    lines = []
    for tok in (t for t in arg.split(",") if t):
        low = tok.lower()
        found = _get_int(tok) != -1
        for key in ("energy=", "task=", "filesystem=", "network="):
            at = low.find(key)
            if at >= 0 and _get_int(tok[at + len(key) :]) != -1:
                found = True
        if not found:
            lines.append(f"Invalid --acctg-freq specification: {tok}")
    return lines or None


def profile_is_valid(arg: str) -> bool:
    """`acct_gather_profile_from_string` found something (it looks for substrings)."""
    low = arg.lower()
    return any(word in low for word in ("none", "all", "energy", "task", "lustre", "network"))
