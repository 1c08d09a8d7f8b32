"""`caldera simulate TRACE.swf [--policy fcfs,easy,...] [--nodes N] [--plot out.png]`.

The edge of the simulator: reads the trace (all of it, before anything runs, so a bad
line costs nothing), replays it once per policy, prints one summary line per policy that
starts with the policy's name (`bsld=` and `util=` for scripts), and draws the plot when
asked. The progress bar is drawn on stderr only when stderr is a terminal.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

import click

from gateway.cli.progress import bar_line
from gateway.simulate.engine import POLICIES, Outcome, simulate
from gateway.simulate.multi import Routing
from gateway.simulate.multi_cli import parse_routings, run_multi, split_sites
from gateway.simulate.swf import SwfError, read_trace

__all__ = ["simulate_command"]


def _progress_bar(name: str) -> Callable[[int, int], None] | None:
    if not sys.stderr.isatty():
        return None

    def show(done: int, total: int) -> None:
        sys.stderr.write(f"\r{bar_line(f'{name:<13}', done, total)} {done}/{total}")
        if done >= total:
            sys.stderr.write("\n")
        sys.stderr.flush()

    return show


@click.command("simulate")
@click.argument("trace", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option(
    "--policy",
    default="fcfs,easy",
    show_default=True,
    help=f"Comma-separated policies: {', '.join(POLICIES)}.",
)
@click.option("--nodes", type=click.IntRange(min=1), help="Machine size (default: MaxProcs).")
@click.option("--plot", type=click.Path(dir_okay=False, path_type=Path), help="Write a PNG.")
@click.option(
    "--clusters",
    metavar="SHARES",
    help="Multi-cluster mode: split the machine, e.g. 0.75,0.25 (home first, then burst).",
)
@click.option(
    "--routing",
    default="home,first,wait,caldera",
    show_default=True,
    help="Multi-cluster routings: home, first (to admit), wait (burst after --burst-wait), "
    "caldera (predicted start).",
)
@click.option("--burst-latency", type=click.FloatRange(min=0), default=120.0, show_default=True)
@click.option("--burst-wait", type=click.FloatRange(min=0), default=600.0, show_default=True)
@click.option("--margin", type=click.FloatRange(min=0), default=300.0, show_default=True)
@click.option("--reroute", type=click.FloatRange(min=0), default=60.0, show_default=True)
def simulate_command(
    trace: Path,
    policy: str,
    nodes: int | None,
    plot: Path | None,
    clusters: str | None,
    routing: str,
    burst_latency: float,
    burst_wait: float,
    margin: float,
    reroute: float,
) -> None:
    """Replay an SWF trace (plain or gzipped) through Caldera's scheduler on a virtual
    clock and print mean wait, mean bounded slowdown (10 s), utilisation and makespan.
    With --clusters, over several clusters under each --routing (seconds for the knobs;
    --reroute 0: route once, at submission)."""
    names = [p.strip() for p in policy.split(",") if p.strip()]
    unknown = [n for n in names if n not in POLICIES]
    if unknown or not names:
        raise click.BadParameter(
            f"unknown policy {', '.join(unknown) or '(none)'}; known: {', '.join(POLICIES)}",
            param_hint="--policy",
        )
    try:
        parsed = read_trace(trace)
    except SwfError as exc:
        raise click.ClickException(str(exc)) from exc
    size = nodes or parsed.max_procs
    if size is None:
        raise click.ClickException(f"{trace}: no MaxProcs/MaxNodes header: give --nodes")
    if clusters is not None:
        try:
            sites = split_sites(size, clusters, burst_latency)
            routings = [
                Routing(r, burst_wait, margin, reroute_s=reroute or None)
                for r in parse_routings(routing)
            ]
        except ValueError as exc:
            raise click.UsageError(str(exc)) from exc
        click.echo(f"trace {trace.name}: {len(parsed.jobs)} jobs, {size} processors split")
        run_multi(parsed, sites, [POLICIES[n] for n in names], routings, click.echo)
        return
    click.echo(
        f"trace {trace.name}: {len(parsed.jobs)} jobs replayed "
        f"({parsed.skipped} skipped: never ran or asked for no processors), {size} nodes"
    )
    outcomes: list[Outcome] = []
    for name in names:
        outcome = simulate(parsed, size, POLICIES[name], _progress_bar(name))
        outcomes.append(outcome)
        if outcome.too_big:
            click.echo(f"# {name}: {outcome.too_big} jobs wider than {size} nodes not replayed")
        click.echo(outcome.summary())
    if plot is not None:
        from gateway.simulate.plot import write_plot

        write_plot(outcomes, plot)
        click.echo(f"plot: {plot}")
