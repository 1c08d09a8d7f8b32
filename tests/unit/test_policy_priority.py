"""Multifactor priority against Slurm 22.05's priority_multifactor.shtml and the code it
describes (`set_priority_factors`, `_get_priority_internal` in priority_multifactor.c)."""

from __future__ import annotations

import pytest

from gateway.policy.priority import (
    BasicCounter,
    JobInputs,
    PriorityConfig,
    SystemInputs,
    age_factor,
    factors,
    job_size_factor,
    multifactor_priority,
    reniced,
)

DAY = 86400
# priority_multifactor.shtml, "Configuration Example" (the first, with decay)
DOC_CONFIG = PriorityConfig(
    type="priority/multifactor",
    decay_half_life_s=14 * DAY,
    max_age_s=14 * DAY,
    weight_age=1000,
    weight_fairshare=10000,
    weight_jobsize=1000,
    weight_partition=1000,
    weight_qos=0,
)
SYSTEM = SystemInputs(node_count=10, cluster_cpus=160, max_partition_priority=10)


def _job(**kw: object) -> JobInputs:
    base: dict[str, object] = {
        "job_id": 1,
        "accrue_time": 0.0,
        "min_nodes": 1,
        "cpus": 16,
        "time_limit_min": 60,
        "partition_max_time_min": 1440,
        "fs_factor": 0.5,
        "partition_priority": 10,
    }
    base.update(kw)
    return JobInputs(**base)  # type: ignore[arg-type]


def test_documented_configuration_example_sums_the_weighted_factors() -> None:
    """Job_priority = site + Wage*age + Wfs*fs + Wjs*js + Wpart*part + Wqos*qos - nice with
    the doc's example weights: 7 of 14 days waited (age 0.5 -> 500), fair share 0.5
    (-> 5000), the whole machine (job size 1.0 -> 1000), the top partition (-> 1000)."""
    job = _job(min_nodes=10, cpus=160)
    f = factors(job, now=7 * DAY, sys=SYSTEM, cfg=DOC_CONFIG)
    assert (f.age, f.fairshare, f.jobsize, f.partition, f.qos) == (500, 5000, 1000, 1000, 0)
    assert f.priority == 7500


def test_small_weights_lose_the_difference_between_factors() -> None:
    """priority_multifactor.shtml: "one job could have a fair-share factor of .59534 and
    another ... .50002. If the fair-share weight is only set to 10, both jobs would have
    the same fair-share priority"."""
    cfg = PriorityConfig(type="priority/multifactor", weight_fairshare=10)
    a = multifactor_priority(_job(fs_factor=0.59534), 0, SYSTEM, cfg)
    b = multifactor_priority(_job(fs_factor=0.50002), 0, SYSTEM, cfg)
    assert a == b == 5
    cfg = PriorityConfig(type="priority/multifactor", weight_fairshare=1000)
    assert multifactor_priority(_job(fs_factor=0.59534), 0, SYSTEM, cfg) == 595
    assert multifactor_priority(_job(fs_factor=0.50002), 0, SYSTEM, cfg) == 500


def test_age_factor_maxes_out_at_priority_max_age() -> None:
    """ "At some configurable length of time (PriorityMaxAge), the age factor will max out
    to 1.0"; before accruing starts it is 0."""
    assert age_factor(now=3600, accrue_time=0, max_age_s=7200) == 0.5
    assert age_factor(now=99999, accrue_time=0, max_age_s=7200) == 1.0
    assert age_factor(now=10, accrue_time=None, max_age_s=7200) == 0.0
    assert age_factor(now=10, accrue_time=20, max_age_s=7200) == 0.0


def test_job_size_favours_large_jobs_by_default() -> None:
    """ "A job that requests all the nodes on the machine will get a job size factor of 1.0";
    the code averages the node and CPU fractions."""
    cfg = PriorityConfig(type="priority/multifactor", weight_jobsize=1)
    assert job_size_factor(_job(min_nodes=10, cpus=160), SYSTEM, cfg) == 1.0
    assert job_size_factor(_job(min_nodes=1, cpus=16), SYSTEM, cfg) == pytest.approx(0.1)


def test_job_size_favour_small_as_the_code_computes_it() -> None:
    """PriorityFavorSmall=YES: ((N - nodes)/N + (C - cpus)/C) / 2 (the doc's "the single
    node job will receive the 1.0" holds as N grows; the code gives (N-1)/N for 0 CPUs)."""
    cfg = PriorityConfig(type="priority/multifactor", weight_jobsize=1, favor_small=True)
    assert job_size_factor(_job(min_nodes=1, cpus=16), SYSTEM, cfg) == pytest.approx(0.9)
    assert job_size_factor(_job(min_nodes=1, cpus=0), SYSTEM, cfg) == pytest.approx(0.9)
    assert job_size_factor(_job(min_nodes=10, cpus=160), SYSTEM, cfg) == 0.0


def test_small_relative_to_time() -> None:
    """SMALL_RELATIVE_TO_TIME: "a full-system job with a time limit of one will receive a job
    size factor of 1.0, while a tiny job with a large time limit ... close to 0.0"."""
    cfg = PriorityConfig(type="priority/multifactor", weight_jobsize=1, small_relative_to_time=True)
    assert job_size_factor(_job(min_nodes=10, cpus=160, time_limit_min=1), SYSTEM, cfg) == 1.0
    tiny = job_size_factor(_job(min_nodes=1, cpus=1, time_limit_min=10000), SYSTEM, cfg)
    assert tiny == pytest.approx(16 / 10000 / 160)  # one node counts as its 16 CPUs


def test_nice_lowers_and_the_sum_is_floored_at_one() -> None:
    """ "- nice_factor"; "Priority 0 is reserved for held jobs" (the sum is at least 1);
    the priority is cut at 2^32-1."""
    cfg = PriorityConfig(type="priority/multifactor", weight_fairshare=1000)
    assert multifactor_priority(_job(fs_factor=1.0, nice=100), 0, SYSTEM, cfg) == 900
    assert multifactor_priority(_job(fs_factor=1.0, nice=5000), 0, SYSTEM, cfg) == 1
    assert multifactor_priority(_job(fs_factor=1.0, nice=-100), 0, SYSTEM, cfg) == 1100
    big = PriorityConfig(type="priority/multifactor", weight_fairshare=0xFFFFFFFF)
    assert multifactor_priority(_job(fs_factor=1.0, site=10), 0, SYSTEM, big) == 0xFFFFFFFF


def test_qos_and_partition_are_normalised_to_the_highest() -> None:
    """ "This priority value is then normalized to the highest priority of all the QOS's";
    NO_NORMAL_QOS uses the raw value."""
    sys = SystemInputs(node_count=10, cluster_cpus=160, max_qos_priority=200)
    cfg = PriorityConfig(type="priority/multifactor", weight_qos=1000)
    assert factors(_job(qos_priority=50), 0, sys, cfg).qos == 250
    raw = PriorityConfig(type="priority/multifactor", weight_qos=2, no_normal_qos=True)
    assert factors(_job(qos_priority=50), 0, sys, raw).qos == 100


def test_tres_factors_are_weighted() -> None:
    """SUM(TRES_weight_<type> * TRES_factor_<type>): the factor is the job's count over the
    partition's."""
    cfg = PriorityConfig(type="priority/multifactor", weight_tres={"cpu": 1000.0})
    f = factors(_job(tres={"cpu": 0.25, "mem": 0.5}), 0, SYSTEM, cfg)
    assert dict(f.tres) == {"cpu": 250.0}
    assert f.priority == 250


def test_basic_count_numbers_jobs_as_slurmctld_did_on_the_test_cluster() -> None:
    """The test cluster's run (BasicCounter's docstring), from B's number: B, D, release C,
    E, release A, F, release G_1, H, I, R, J one apart; D re-niced to 10 sits 10 lower;
    `--nice=7` takes the next base less 7 and the job after it the base below."""
    count = BasicCounter(4294893041)
    taken = [count.take(None) for _ in range(11)]
    assert taken == list(range(4294893040, 4294893029, -1))
    assert reniced(taken[1], None, 10) == 4294893029
    assert count.take(7) == 4294893022
    assert count.take(None) == 4294893028


def test_basic_count_starts_below_top_priority_and_floors_at_one() -> None:
    count = BasicCounter()
    assert count.take(None) == 0xFFFF0000 - 1
    assert count.take(10) == 0xFFFF0000 - 12
    assert count.take(None) == 0xFFFF0000 - 3
    assert BasicCounter(3).take(0x7FFFFFFF) == 2  # a nice this large is not applied
    assert BasicCounter(1).take(None) == 1
    assert reniced(5, 0, 100) == 2


def test_basic_count_resumes_below_the_jobs_it_recovers() -> None:
    """As slurmctld restarts: held (0) and floor (1) priorities do not count."""
    assert BasicCounter.recovered([0, 1, 4294901700, 4294901650]).take(None) == 4294901649
    assert BasicCounter.recovered([0]).take(None) == 0xFFFF0000 - 1
