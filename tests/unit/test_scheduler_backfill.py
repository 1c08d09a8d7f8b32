"""Walltime backfill as scenario tables: running jobs, pending jobs, knobs -> who starts now,
who waits and why, and each blocked job's expected start and nodes."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

import pytest

from gateway.control.config import ConfigError, load_config
from gateway.model.job import Job, RankPlacement
from gateway.model.state import JobState, Reason
from gateway.scheduler.bf_params import BackfillParams, parse_scheduler_parameters
from gateway.scheduler.builtin import DEFAULT_PLUGINS, FACTORIES
from gateway.scheduler.cycle import CycleResult, run_cycle
from gateway.scheduler.plugins import Registry
from gateway.scheduler.snapshot import NodeFree, Snapshot
from tests.support.builders import make_cluster, make_job

NOW = 1_800_000_000.0  # a multiple of bf_resolution (60 s): planned starts stay exact
MIN = 60.0


@dataclass(frozen=True)
class Run:
    """A running job: nodes, cpus per node, minutes left of its time limit."""

    job_id: int
    nodes: tuple[str, ...]
    minutes_left: int
    cpus: int = 1
    exclusive: bool = False


@dataclass(frozen=True)
class Pend:
    """A pending job (queue order is list order): nodes, cpus per node, time limit."""

    job_id: int
    nodes: int
    minutes: int
    cpus: int = 1


@dataclass(frozen=True)
class Case:
    """One scenario and what must come out of one cycle."""

    name: str
    running: Sequence[Run]
    pending: Sequence[Pend]
    starts: dict[int, tuple[str, ...]]  # job id -> nodes it starts on now
    reasons: dict[int, Reason]
    planned: dict[int, tuple[float, tuple[str, ...]]]  # job id -> (minutes from now, nodes)
    params: BackfillParams = field(default_factory=BackfillParams)
    nodes: int = 4
    cpus: int = 1


def _running(r: Run) -> Job:
    b = make_job(r.job_id).nodes(len(r.nodes)).cpus(r.cpus).time(r.minutes_left + 5)
    if r.exclusive:
        b = b.exclusive()
    placement = tuple(RankPlacement(n, 1, r.cpus, 0) for n in r.nodes)
    return b.state(
        JobState.RUNNING,
        start_time=NOW - 5 * MIN,
        nodes=r.nodes,
        num_cpus=r.cpus * len(r.nodes),
        placement=placement,
    ).build()


def _pending(p: Pend) -> Job:
    return make_job(p.job_id).nodes(p.nodes).cpus(p.cpus).time(p.minutes).build()


def _snapshot(case: Case) -> Snapshot:
    cluster = make_cluster(nodes=case.nodes, cpus=case.cpus)
    free = {n.name: NodeFree(n, n.cpus, n.memory_mb, frozenset()) for n in cluster.nodes}
    running = tuple(_running(r) for r in case.running)
    for job in running:
        for p in job.placement:
            f = free[p.node]
            free[p.node] = replace(f, cpus=f.cpus - p.cpus, jobs=f.jobs + 1)
    return Snapshot(
        now=NOW,
        pending=tuple(_pending(p) for p in case.pending),
        running=running,
        clusters={"local": cluster},
        free=free,
    )


def _cycle(case: Case) -> CycleResult:
    reg = Registry.build(DEFAULT_PLUGINS, FACTORIES)
    reg.backfill = case.params
    return run_cycle(_snapshot(case), reg)


N = ("n01", "n02", "n03", "n04")
CONSERVATIVE = BackfillParams(mode="conservative", depth=10)

CASES = [
    Case(
        "EASY: a short job starts in the top job's shadow; a long one does not delay it",
        running=[Run(1, N[:2], 60)],
        pending=[Pend(2, 4, 30), Pend(3, 2, 30), Pend(4, 2, 120)],
        starts={3: N[2:]},
        reasons={2: Reason.RESOURCES, 4: Reason.PRIORITY},
        planned={2: (60, N), 4: (90, N[:2])},
    ),
    Case(
        "EASY: a long job starts on a node the top job's reservation leaves free",
        running=[Run(1, N[:2], 60)],
        pending=[Pend(2, 3, 30), Pend(3, 1, 500)],
        starts={3: ("n04",)},
        reasons={2: Reason.RESOURCES},
        planned={2: (60, N[:3])},
    ),
    Case(
        "a gang is never partial: 3 nodes asked, 2 free, nothing of it is allocated",
        running=[Run(1, N[:2], 60)],
        pending=[Pend(2, 3, 30), Pend(3, 3, 10)],
        starts={},
        reasons={2: Reason.RESOURCES, 3: Reason.PRIORITY},
        planned={2: (60, N[:3]), 3: (90, N[:3])},
    ),
    Case(
        "a gang that fits now only partly outside the reservation waits whole",
        running=[Run(1, N[:3], 60)],
        pending=[Pend(2, 3, 30), Pend(3, 2, 500)],
        starts={},
        reasons={2: Reason.RESOURCES, 3: Reason.PRIORITY},
        planned={2: (60, N[:3]), 3: (90, N[:2])},
    ),
    Case(
        "EASY protects the top job only: a long job may delay the second blocked job",
        running=[Run(1, N[:2], 10), Run(5, N[2:3], 100)],
        pending=[Pend(2, 2, 100), Pend(3, 4, 10), Pend(4, 1, 200)],
        starts={4: ("n04",)},
        reasons={2: Reason.RESOURCES, 3: Reason.PRIORITY},
        planned={2: (10, N[:2]), 3: (110, N)},
    ),
    Case(
        "conservative: the same long job now waits, every tested job keeps its reservation",
        running=[Run(1, N[:2], 10), Run(5, N[2:3], 100)],
        pending=[Pend(2, 2, 100), Pend(3, 4, 10), Pend(4, 1, 200)],
        starts={},
        reasons={2: Reason.RESOURCES, 3: Reason.PRIORITY, 4: Reason.PRIORITY},
        planned={2: (10, N[:2]), 3: (110, N), 4: (120, ("n01",))},
        params=CONSERVATIVE,
    ),
    Case(
        "FCFS: nothing passes the blocked top job, even a job that would not delay it",
        running=[Run(1, N[:2], 60)],
        pending=[Pend(2, 4, 30), Pend(3, 1, 5)],
        starts={},
        reasons={2: Reason.RESOURCES, 3: Reason.PRIORITY},
        planned={2: (60, N)},
        params=BackfillParams(mode="fcfs"),
    ),
    Case(
        "bf_max_job_test: jobs past the limit are not examined (no start, no estimate)",
        running=[Run(1, N[:2], 60)],
        pending=[Pend(2, 4, 30), Pend(3, 1, 500), Pend(4, 1, 5)],
        starts={},
        reasons={2: Reason.RESOURCES, 3: Reason.PRIORITY, 4: Reason.PRIORITY},
        planned={2: (60, N), 3: (90, ("n01",))},
        params=BackfillParams(max_job_test=1),
    ),
    Case(
        "shared nodes: a job fits next to the reservation when the running job has ended",
        running=[Run(1, ("n01",), 60, cpus=2)],
        pending=[Pend(2, 1, 30, cpus=4), Pend(3, 1, 500, cpus=2)],
        starts={},
        reasons={2: Reason.RESOURCES, 3: Reason.PRIORITY},
        planned={2: (60, ("n01",)), 3: (90, ("n01",))},
        nodes=1,
        cpus=4,
    ),
    Case(
        "shared nodes: cpus the reservation leaves over host a long job now",
        running=[Run(1, ("n01",), 60, cpus=2)],
        pending=[Pend(2, 1, 30, cpus=3), Pend(3, 1, 500, cpus=1)],
        starts={3: ("n01",)},
        reasons={2: Reason.RESOURCES},
        planned={2: (60, ("n01",))},
        nodes=1,
        cpus=4,
    ),
    Case(
        "bf_window: a reservation further ahead than the window is not made",
        running=[Run(1, N, 3000)],
        pending=[Pend(2, 1, 30)],
        starts={},
        reasons={2: Reason.RESOURCES},
        planned={},
    ),
]


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_backfill_scenario(case: Case) -> None:
    result = _cycle(case)
    assert {d.job.job_id: tuple(p.node for p in d.placement) for d in result.starts} == (
        case.starts
    )
    assert result.reasons == case.reasons
    got = {k: ((v.start - NOW) / MIN, v.nodes) for k, v in result.planned.items()}
    assert got == case.planned


def test_a_backfilled_job_never_delays_the_reservation_it_was_checked_against() -> None:
    """Replay the EASY case one cycle later (the short job running): the top job's
    expected start and nodes are unchanged."""
    case = CASES[0]
    first = _cycle(case)
    assert set(d.job.job_id for d in first.starts) == {3}
    later = replace(case, running=[*case.running, Run(3, N[2:], 30)], pending=case.pending[::2])
    second = _cycle(later)
    assert second.planned[2] == first.planned[2]


def test_planned_starts_are_rounded_up_to_bf_resolution() -> None:
    case = replace(CASES[0], params=BackfillParams(resolution_s=7 * 60))
    result = _cycle(case)
    # 60 min left; slots are multiples of 7 minutes since the epoch, as Slurm's are
    assert (result.planned[2].start - NOW) / MIN == 61


def test_scheduler_parameters_read_slurms_names_and_units() -> None:
    params = parse_scheduler_parameters(
        "bf_continue,bf_window=120,bf_resolution=30,bf_max_job_test=50,bf_mode=conservative,"
        "bf_depth=8"
    )
    assert params == BackfillParams("conservative", 8, 7200, 30, 50)
    assert params.binding == 8
    assert BackfillParams().binding == 1
    assert BackfillParams(mode="fcfs").binding == 0


@pytest.mark.parametrize(
    ("text", "named"),
    [
        ("bf_window=0", "'bf_window=0'"),
        ("bf_resolution=abc", "'bf_resolution=abc'"),
        ("bf_max_job_test", "'bf_max_job_test'"),
        ("bf_mode=sjf", "'bf_mode=sjf'"),
    ],
)
def test_a_bad_knob_is_refused_naming_it(text: str, named: str) -> None:
    with pytest.raises(ValueError, match=named):
        parse_scheduler_parameters(text)


def test_caldera_toml_scheduler_parameters_are_checked_at_load(tmp_path: Path) -> None:
    (tmp_path / "caldera.toml").write_text('scheduler_parameters = "bf_window=60,bf_mode=easy"\n')
    assert load_config(tmp_path).scheduler_parameters == "bf_window=60,bf_mode=easy"
    (tmp_path / "caldera.toml").write_text('scheduler_parameters = "bf_resolution=-1"\n')
    with pytest.raises(ConfigError, match="'bf_resolution=-1'"):
        load_config(tmp_path)
