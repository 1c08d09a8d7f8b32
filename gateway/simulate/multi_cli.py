"""The multi-cluster mode of `caldera simulate` (`--clusters 0.75,0.25`): the trace's machine
split into a home cluster and burst clusters, replayed once per scheduler policy and routing.

Output: one summary line per (policy, routing), starting with `policy/routing` and the
same key=value figures as the single-cluster lines (`bsld=`, `util=`), then one indented
line per cluster with the jobs it ran and its own wait, bounded slowdown and utilisation.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from gateway.simulate.engine import Policy
from gateway.simulate.multi import ROUTINGS, MultiOutcome, Routing, Site, simulate_multi
from gateway.simulate.swf import Trace

__all__ = ["describe", "parse_routings", "run_multi", "split_sites"]


def split_sites(size: int, shares: str, latency_s: float) -> list[Site]:
    """`shares` ("0.75,0.25") of a `size`-processor machine: home first, then `burst`
    (`burst1`, `burst2`, ... when there are several), each burst cluster `latency_s` away."""
    try:
        parts = [float(s) for s in shares.split(",") if s.strip()]
    except ValueError:
        raise ValueError(f"--clusters: not a list of fractions: {shares!r}") from None
    if len(parts) < 2 or any(not 0 < p <= 1 for p in parts) or sum(parts) > 1 + 1e-9:
        raise ValueError(
            f"--clusters: give two or more fractions in (0, 1] summing to at most 1, not {shares!r}"
        )
    nodes = [max(1, round(size * p)) for p in parts]
    names = ["burst"] if len(parts) == 2 else [f"burst{i}" for i in range(1, len(parts))]
    return [Site("home", nodes[0])] + [
        Site(n, k, latency_s) for n, k in zip(names, nodes[1:], strict=True)
    ]


def parse_routings(text: str) -> list[str]:
    names = [r.strip() for r in text.split(",") if r.strip()]
    unknown = [n for n in names if n not in ROUTINGS]
    if unknown or not names:
        raise ValueError(
            f"unknown routing {', '.join(unknown) or '(none)'}; known: {', '.join(ROUTINGS)}"
        )
    return names


def describe(o: MultiOutcome, policy: str) -> list[str]:
    """The summary line and the per-cluster lines of one replay."""
    lines = [f"{policy}/{o.summary()}"]
    lines += [
        f"  {c.name} nodes={c.nodes} jobs={c.jobs} mean_wait={c.mean_wait:.1f}s "
        f"bsld={c.mean_bsld:.2f} util={c.utilisation:.3f}"
        for c in o.clusters
    ]
    return lines


def run_multi(
    trace: Trace,
    sites: Sequence[Site],
    policies: Sequence[Policy],
    routings: Sequence[Routing],
    echo: Callable[[str], None],
) -> list[MultiOutcome]:
    """Replay every (policy, routing) pair, printing each as it finishes."""
    echo(
        "clusters: "
        + ", ".join(f"{s.name}={s.nodes} nodes (latency {s.latency_s:.0f}s)" for s in sites)
    )
    out: list[MultiOutcome] = []
    for policy in policies:
        for routing in routings:
            o = simulate_multi(trace, sites, policy, routing)
            out.append(o)
            if o.too_big:
                echo(f"# {policy.name}/{routing.name}: {o.too_big} jobs too wide, not replayed")
            for line in describe(o, policy.name):
                echo(line)
    return out
