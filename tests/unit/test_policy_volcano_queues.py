"""Volcano's queue semantics on Slurm's nouns (gateway/policy/queues.py), with the
scenarios of Volcano's own documentation as scenario tables:

- "Queue Resource Management" (volcano.sh/en/docs/queue_resource_management): 4 CPUs,
  queue default (weight 1 / deserved 1 CPU) runs job1 (1 CPU) and job2 (3 CPUs); queue
  test (weight 3 / deserved 3 CPUs) submits job3 (3 CPUs): job2 is evicted, job1 runs on.
- "How to use the capacity plugin" (docs/user-guide/how_to_use_capacity_plugin.md): two
  nodes of 4 CPUs, queue1 deserves 2 CPUs, queue2 6; queue1 runs eight 1-CPU pods, then
  queue2 submits eight: 6 of queue2 and 2 of queue1 run.
- The proportion plugin's overview (volcano.sh/en/docs/plugins, "Proportion"): teams A, B,
  C share a cluster 40/30/30; a queue asking for less than its share leaves the rest to
  the others (the "Important Note" of Queue Resource Management).
- DRF (volcano.sh/en/docs/drf; the worked example of Ghodsi et al., NSDI 2011, which the
  drf plugin implements): 9 CPUs, 18 GB; tasks of <1 CPU, 4 GB> and <3 CPUs, 1 GB>.
"""

from __future__ import annotations

import shlex

import pytest

from gateway.policy.queues import (
    Queue,
    Running,
    dominant_share,
    drf_fill,
    proportion,
    queues_from_accounts,
    reclaim,
)
from tests.support.policy_env import run, seeded


def _cpu(n: float) -> dict[str, float]:
    return {"cpu": float(n)}


# --- Queue Resource Management: both plugins give default 1 CPU, test 3 CPUs ----------


@pytest.mark.parametrize("plugin", ["capacity", "proportion"])
def test_queue_resource_management_evicts_job2_and_keeps_job1(plugin: str) -> None:
    total = _cpu(4)
    if plugin == "capacity":
        deserved = {"default": _cpu(1), "test": _cpu(3)}
    else:
        queues = [Queue("default", weight=1), Queue("test", weight=3)]
        requests = {"default": _cpu(4), "test": _cpu(3)}  # job1 + job2; job3
        deserved = proportion(total, queues, requests)
        assert deserved == {"default": _cpu(1), "test": _cpu(3)}
    # equal priorities: Volcano takes the job created last first, job2 here
    running = [Running(1, "default", _cpu(1), rank=-1), Running(2, "default", _cpu(3), rank=-2)]
    assert reclaim("test", _cpu(3), _cpu(0), deserved, running) == (2,)


def test_before_the_test_queue_exists_default_borrows_everything() -> None:
    deserved = proportion(_cpu(4), [Queue("default")], {"default": _cpu(4)})
    assert deserved == {"default": _cpu(4)}
    assert reclaim("default", _cpu(3), _cpu(3), deserved, [Running(1, "default", _cpu(1))]) == ()


# --- the capacity plugin's user guide ---------------------------------------------------


def test_capacity_guide_ends_with_two_pods_of_queue1_and_six_of_queue2() -> None:
    deserved = {"queue1": {"cpu": 2.0, "mem": 8.0}, "queue2": {"cpu": 6.0, "mem": 24.0}}
    pod = {"cpu": 1.0, "mem": 4.0}
    running = [Running(i, "queue1", pod, rank=-i) for i in range(1, 9)]  # all 8 CPUs
    free = {"cpu": 0.0, "mem": 0.0}
    evicted: list[int] = []
    for n in range(101, 109):  # queue2's eight pods, one by one
        got = reclaim("queue2", pod, free, deserved, running)
        if got is None:
            continue  # Pending: queue2 would be above its deserved 6 CPUs
        evicted += got
        running = [r for r in running if r.job_id not in got] + [Running(n, "queue2", pod)]
    by_queue = {q: sum(1 for r in running if r.queue == q) for q in ("queue1", "queue2")}
    assert by_queue == {"queue1": 2, "queue2": 6}
    assert len(evicted) == 6


def test_a_queue_within_its_deserved_share_is_never_reclaimed() -> None:
    deserved = {"a": _cpu(2), "b": _cpu(2)}
    running = [Running(1, "a", _cpu(2)), Running(2, "b", _cpu(1))]
    # b asks for 2 more: a holds exactly its share, nothing is reclaimable
    assert reclaim("b", _cpu(1), _cpu(0), deserved, running) is None
    # not reclaimable by its own wish
    over = {"a": _cpu(1), "b": _cpu(3)}
    assert reclaim("b", _cpu(1), _cpu(0), over, running, {"a": False}) is None
    assert reclaim("b", _cpu(1), _cpu(0), over, running) == (1,)


# --- the proportion plugin --------------------------------------------------------------


def test_proportion_splits_by_weight_and_hands_on_what_a_queue_does_not_ask_for() -> None:
    teams = [Queue("A", weight=4), Queue("B", weight=3), Queue("C", weight=3)]
    busy = {t.name: _cpu(100) for t in teams}
    assert proportion(_cpu(10), teams, busy) == {"A": _cpu(4), "B": _cpu(3), "C": _cpu(3)}
    # A asks for 2: the 2 it leaves go to B and C by their weights
    light = {**busy, "A": _cpu(2)}
    assert proportion(_cpu(10), teams, light) == {"A": _cpu(2), "B": _cpu(4), "C": _cpu(4)}


def test_capability_caps_and_guarantee_floors_the_deserved_share() -> None:
    queues = [
        Queue("A", weight=1, capability=_cpu(2)),
        Queue("B", weight=1),
        Queue("C", weight=1, guarantee=_cpu(3)),
    ]
    asks = {"A": _cpu(10), "B": _cpu(10), "C": _cpu(1)}
    got = proportion(_cpu(12), queues, asks)
    assert got["A"] == _cpu(2)  # capability
    assert got["C"] == _cpu(3)  # asks for 1, guaranteed 3
    assert got["B"] == _cpu(9)  # what A and C leave (12 - 2 - 1)


def test_accounts_are_queues_with_shares_as_weights_and_grptres_as_capability() -> None:
    state = seeded()
    for cmd in (
        "-i add account teama fairshare=4 grptres=cpu=40",
        "-i add account teamb fairshare=3",
    ):
        state, text, rc = run(state, shlex.split(cmd))
        assert rc == 0, text
    queues = {q.name: q for q in queues_from_accounts(state)}
    assert (queues["teama"].weight, dict(queues["teama"].capability)) == (4, {"cpu": 40.0})
    assert (queues["teamb"].weight, dict(queues["teamb"].capability)) == (3, {})


# --- DRF among one queue's jobs ---------------------------------------------------------


def test_drf_gives_each_job_the_same_dominant_share() -> None:
    total = {"cpu": 9.0, "mem": 18.0}
    demands = {"A": {"cpu": 1.0, "mem": 4.0}, "B": {"cpu": 3.0, "mem": 1.0}}
    given = drf_fill(total, demands, {"A": 100, "B": 100})
    assert given == {"A": 3, "B": 2}  # the paper's allocation
    share_a = dominant_share({"cpu": 3.0, "mem": 12.0}, total)
    share_b = dominant_share({"cpu": 6.0, "mem": 2.0}, total)
    assert share_a == pytest.approx(2 / 3)
    assert share_b == pytest.approx(2 / 3)


def test_drf_never_starves_the_small_job_behind_a_fat_one() -> None:
    total = {"cpu": 8.0, "mem": 8.0}
    demands = {"fat": {"cpu": 4.0, "mem": 1.0}, "small": {"cpu": 1.0, "mem": 1.0}}
    given = drf_fill(total, demands, {"fat": 2, "small": 10})
    assert given["small"] >= 3
    assert given["fat"] >= 1
