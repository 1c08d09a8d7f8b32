"""The corpus's `#SBATCH` header shrunk to the test cluster's shape (issue 14, item 1).

Only sizes change: partitions become the cluster's `real` partition (node01..node04, two
CPUs and 2000 MB each; node03 `gpu:2`, node04 `gpu:a100:4`), counts of nodes, tasks, CPUs,
memory and GPUs are capped to what those nodes hold, time limits to one minute (a --signal
lead gets a minute more than itself: `_signal_lead_min`), arrays to
their first two indices, and GRES types, features and reservations that only the cluster's
slurmd-less `big*` nodes have are dropped (a job asking for them would pend for ever on both
sides). Everything else (accounts, QOS, output patterns, signals, the script's commands)
stays as written: what fails, fails the same way on both sides.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterator
from dataclasses import dataclass

__all__ = ["TEST_CLUSTER", "Shape", "adapt_script"]


@dataclass(frozen=True)
class Shape:
    """What the cluster's real nodes hold."""

    partition: str
    nodes: int
    cpus: int
    mem_mb: int
    gpus: int  # per node, on the nodes that have any
    gpu_types: frozenset[str]
    features: frozenset[str]
    gres: frozenset[str]  # GRES names a real node has
    time_min: int


TEST_CLUSTER = Shape(
    partition="real",
    nodes=2,  # of 4: two multi-node jobs run side by side
    cpus=2,
    mem_mb=2000,
    gpus=2,  # node03 has two (untyped), node04 four a100
    gpu_types=frozenset({"a100"}),
    features=frozenset({"real", "a100"}),
    gres=frozenset({"gpu"}),
    time_min=1,
)

# option spellings -> canonical name (only those whose value may change)
_NAMES = {
    "-p": "partition",
    "--partition": "partition",
    "-N": "nodes",
    "--nodes": "nodes",
    "-n": "ntasks",
    "--ntasks": "ntasks",
    "-c": "cpus-per-task",
    "--cpus-per-task": "cpus-per-task",
    "--ntasks-per-node": "ntasks-per-node",
    "--tasks-per-node": "ntasks-per-node",
    "--ntasks-per-socket": "ntasks-per-socket",
    "--mem": "mem",
    "--mem-per-cpu": "mem-per-cpu",
    "--mem-per-gpu": "mem-per-gpu",
    "--gres": "gres",
    "--gpus-per-node": "gpus-per-node",
    "--gpus-per-task": "gpus-per-task",
    "-G": "gpus",
    "--gpus": "gpus",
    "-t": "time",
    "--time": "time",
    "--time-min": "time-min",
    "-a": "array",
    "--array": "array",
    "--reservation": "reservation",
    "-C": "constraint",
    "--constraint": "constraint",
}
# options without a value (all others take one)
_SIZES = frozenset(_NAMES.values())
_FLAGS = frozenset(
    {"--exclusive", "--requeue", "--no-requeue", "--hold", "-H", "--parsable", "-O",
     "--overcommit", "--contiguous", "--spread-job", "--use-min-nodes", "-Q", "--quiet",
     "-v", "--verbose", "-W", "--wait", "-k", "--no-kill", "-s", "--oversubscribe"}
)  # fmt: skip
_SHORT_WITH_VALUE = frozenset("pNnctaCAqJoedmLDwxiGSF")
_MEM = re.compile(r"^(\d+)([KMGT]?)B?$", re.IGNORECASE)
_UNIT_MB = {"K": 1 / 1024, "": 1, "M": 1, "G": 1024, "T": 1024 * 1024}


@dataclass
class _Opt:
    line: int
    name: str  # canonical, or the spelling for options not in _NAMES
    spelling: str
    value: str | None


def _header_lines(lines: list[str]) -> Iterator[int]:
    """Indices of the `#SBATCH` lines sbatch reads: those before the first command."""
    for i, line in enumerate(lines):
        stripped = line.strip()
        if i == 0 and stripped.startswith("#!"):
            continue
        if stripped and not stripped.startswith("#"):
            return
        if stripped.startswith("#SBATCH"):
            yield i


def _split(line: str) -> tuple[list[str], str]:
    """The options of one `#SBATCH` line and its trailing comment."""
    body = line.strip()[len("#SBATCH") :]
    comment = ""
    if (m := re.search(r"\s+#", body)) is not None:
        body, comment = body[: m.start()], body[m.start() :]
    try:
        return shlex.split(body), comment
    except ValueError:
        return body.split(), comment


def _options(tokens: list[str], line: int) -> Iterator[_Opt]:
    i = 0
    while i < len(tokens):
        tok = tokens[i]
        spelling, value = tok, None
        if tok.startswith("--"):
            if "=" in tok:
                spelling, value = tok.split("=", 1)
            elif tok not in _FLAGS and i + 1 < len(tokens):
                i += 1
                value = tokens[i]
        elif tok.startswith("-") and len(tok) >= 2 and tok[1] in _SHORT_WITH_VALUE:
            spelling = tok[:2]
            if len(tok) > 2:
                value = tok[2:]
            elif i + 1 < len(tokens):
                i += 1
                value = tokens[i]
        yield _Opt(line, _NAMES.get(spelling, spelling), spelling, value)
        i += 1


def _int(value: str | None, default: int) -> int:
    try:
        return int(value) if value is not None else default
    except ValueError:
        return default


def _cap_count(value: str, cap: int) -> str:
    """`4` or `2-8` (node counts), each bound capped."""
    parts = value.split("-")
    if not all(p.isdigit() for p in parts):
        return value
    return "-".join(str(min(int(p), cap)) for p in parts)


def _cap_mem(value: str, cap_mb: int) -> str:
    m = _MEM.match(value)
    if m is None:
        return value
    mb = int(m[1]) * _UNIT_MB[m[2].upper()]
    return value if mb <= cap_mb else f"{cap_mb}M"


def _cap_gpus(value: str, shape: Shape, cap: int, gres: bool) -> str | None:
    """`--gres` items (`gpu:v100:4`, `craynetwork:2`) or `--gpus*` values (`4`, `a100:4`),
    counts capped, types and names the real nodes lack dropped; None when nothing is left."""
    out = []
    for item in value.split(","):
        parts = item.split(":")
        name, rest = (parts[0], parts[1:]) if gres else ("gpu", parts)
        if name not in shape.gres:
            continue
        count = [min(int(rest[-1]), cap)] if rest and rest[-1].isdigit() else []
        types = [t for t in rest[: len(rest) - len(count)] if t in shape.gpu_types]
        out.append(":".join([*([name] if gres else []), *types, *map(str, count)]))
    return ",".join(out) or None


def _cap_time(value: str, cap_min: int) -> str:
    from gateway.compat.duration import time_str_to_mins

    mins = time_str_to_mins(value)
    return value if 0 < mins <= cap_min else str(cap_min)


def _signal_lead_min(value: str | None) -> int:
    """--signal's lead in whole minutes (0 without one). A lead at or beyond the capped limit
    makes the warning due at once, sent at slurmctld's next periodic time-limit check, whose
    phase against the job's start is chance on both sides: a limit one minute longer than the
    lead puts that check at least 30 s after the start, past the corpus's short jobs."""
    if value is None:
        return 0
    _, _, lead = value.partition("@")
    return -(-_int(lead or "60", 60) // 60)


def _cap_array(value: str) -> str:
    """The first two indices of the first item, keeping its step and throttle."""
    spec, _, throttle = value.partition("%")
    first = spec.split(",")[0]
    m = re.fullmatch(r"(\d+)(?:-(\d+)(?::(\d+))?)?", first)
    if m is None:
        return value
    lo, hi, step = int(m[1]), int(m[2] or m[1]), int(m[3] or 1)
    hi = min(hi, lo + step)
    text = str(lo) if hi == lo else f"{lo}-{hi}" + (f":{step}" if step != 1 else "")
    return text + (f"%{throttle}" if throttle else "")


def _features_ok(value: str, shape: Shape) -> bool:
    return all(f in shape.features for f in re.split(r"[&|,*\[\]()]+", value) if f)


def _values(opts: list[_Opt]) -> dict[str, str]:
    """The last value of each option (sbatch's later directive wins)."""
    return {o.name: o.value for o in opts if o.value is not None}


def _new_value(opt: _Opt, given: dict[str, str], shape: Shape) -> str | None:
    """The shrunk value (None: the option is dropped)."""
    value = opt.value or ""
    cpt = min(_int(given.get("cpus-per-task"), 1), shape.cpus)
    per_node = max(1, shape.cpus // cpt)
    if opt.name == "partition":
        return shape.partition
    if opt.name == "nodes":
        return _cap_count(value, shape.nodes)
    if opt.name == "cpus-per-task":
        return str(min(_int(value, 1), shape.cpus))
    if opt.name == "ntasks-per-node":
        return str(min(_int(value, 1), per_node))
    if opt.name == "ntasks-per-socket":
        return "1"
    if opt.name == "ntasks":
        nodes = 4  # the partition's nodes
        if "nodes" in given:
            nodes = _int(_cap_count(given["nodes"], shape.nodes).split("-")[-1], nodes)
        tpn = min(_int(given.get("ntasks-per-node"), per_node), per_node)
        return str(min(_int(value, 1), nodes * tpn))
    if opt.name == "mem":
        return _cap_mem(value, shape.mem_mb // 2)
    if opt.name in ("mem-per-cpu", "mem-per-gpu"):
        return _cap_mem(value, shape.mem_mb // 5)
    if opt.name in ("gres", "gpus-per-node", "gpus"):
        return _cap_gpus(value, shape, shape.gpus, opt.name == "gres")
    if opt.name == "gpus-per-task":
        return _cap_gpus(value, shape, 1, gres=False)
    if opt.name in ("time", "time-min"):
        return _cap_time(value, max(shape.time_min, _signal_lead_min(given.get("--signal")) + 1))
    if opt.name == "array":
        return _cap_array(value)
    if opt.name == "reservation":
        return None  # the cluster's reservations hold only its slurmd-less big* nodes
    if opt.name == "constraint":
        return value if _features_ok(value, shape) else None
    return opt.value


def _render(opt: _Opt, value: str | None) -> str:
    if value is None:
        return opt.spelling
    if opt.spelling.startswith("--"):
        return f"{opt.spelling}={shlex.quote(value)}"
    return f"{opt.spelling} {shlex.quote(value)}"


def adapt_script(text: str, shape: Shape = TEST_CLUSTER) -> str:
    """The script with its `#SBATCH` sizes shrunk to `shape`; the rest untouched."""
    lines = text.splitlines(keepends=True)
    parsed: dict[int, tuple[list[_Opt], str]] = {}
    for i in _header_lines(lines):
        tokens, comment = _split(lines[i])
        parsed[i] = (list(_options(tokens, i)), comment)
    given = _values([o for opts, _ in parsed.values() for o in opts])
    for i, (opts, comment) in parsed.items():
        words, changed = [], False
        for opt in opts:
            new = _new_value(opt, given, shape) if opt.name in _SIZES else opt.value
            changed |= new != opt.value
            if new is not None or opt.name not in _SIZES:
                words.append(_render(opt, new))
        if not changed:
            continue
        end = "\n" if lines[i].endswith("\n") else ""
        if words:
            lines[i] = "#SBATCH " + " ".join(words) + comment + end
        else:  # every option of the line dropped: a plain comment keeps the line numbers
            lines[i] = "# (adapted) " + lines[i].strip()[1:] + end
    return "".join(lines)
