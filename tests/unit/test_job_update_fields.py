"""`scontrol update` fields as slurmctld's update_job decides them (job_update.py): who may
raise or lower a time limit, what is never a limit, node lists, features, Requeue.
tests/differential/test_job_update_vs_slurm.py compares the same against the test
cluster."""

from __future__ import annotations

from dataclasses import replace

from gateway.compat.slurm_errors import SlurmErrno
from gateway.control.job_update import UpdateSite, update_field
from gateway.model.job import Job
from gateway.model.state import JobState
from gateway.model.values import INFINITE
from tests.support.builders import make_job


def _job(limit: int, state: JobState = JobState.PENDING) -> Job:
    job = make_job(5).build()
    return replace(job, state=state, time_limit=limit, spec=replace(job.spec, time_limit=limit))


def _limit(out: Job | SlurmErrno) -> int | SlurmErrno:
    return out if isinstance(out, SlurmErrno) else out.time_limit


def test_a_user_raises_a_pending_jobs_limit_up_to_the_partitions_max_time() -> None:
    assert _limit(update_field(_job(5), "TimeLimit", "10", False)) == 10
    assert _limit(update_field(_job(5), "TimeLimit", "UNLIMITED", False)) == INFINITE
    assert _limit(update_field(_job(5), "TimeLimit", "10", False, UpdateSite(max_time=10))) == 10
    refused = update_field(_job(5), "TimeLimit", "11", False, UpdateSite(max_time=10))
    assert refused is SlurmErrno.ACCESS_DENIED


def test_a_running_jobs_limit_is_only_lowered_by_its_user() -> None:
    running = _job(60, JobState.RUNNING)
    assert _limit(update_field(running, "TimeLimit", "30", False)) == 30
    assert update_field(running, "TimeLimit", "61", False) is SlurmErrno.ACCESS_DENIED
    assert _limit(update_field(running, "TimeLimit", "61", True)) == 61  # an operator
    assert update_field(running, "TimeLimit", "60", False) is running  # unchanged: no error
    unlimited = _job(INFINITE, JobState.RUNNING)
    assert _limit(update_field(unlimited, "TimeLimit", "30", False)) == 30


def test_zero_is_a_limit_already_over_that_a_user_may_set() -> None:
    """The test cluster: a user's TimeLimit=0 on a running or pending `-t 5` job is taken
    (TimeLimit=00:00:00) and the job ends TIMEOUT at the next check; 0 is no `none`."""
    for state in (JobState.RUNNING, JobState.PENDING):
        assert _limit(update_field(_job(5, state), "TimeLimit", "0", False)) == 0
    zero = _job(0, JobState.PENDING)
    assert _limit(update_field(zero, "TimeLimit", "1", False, UpdateSite(max_time=0))) is (
        SlurmErrno.ACCESS_DENIED
    )


def test_what_is_no_time_limit_is_refused_as_invalid() -> None:
    for text in ("-3", "x", "", "1:2:3:4"):
        out = update_field(_job(5), "TimeLimit", text, True)
        assert out is SlurmErrno.INVALID_TIME_VALUE, text


_SITE = UpdateSite(nodes=frozenset({"node01", "node02"}), features=(("real",), ("real", "gpu")))


def test_node_lists_of_a_pending_job_name_only_nodes_of_the_site() -> None:
    out = update_field(_job(5), "ReqNodeList", "node[01-02]", False, _SITE)
    assert not isinstance(out, SlurmErrno)
    assert out.spec.nodelist == "node[01-02]"
    cleared = update_field(out, "reqnodelist", "", False, _SITE)
    assert not isinstance(cleared, SlurmErrno)
    assert cleared.spec.nodelist is None
    for bad in ("node03", "node[", "node01,x"):
        out = update_field(_job(5), "ExcNodeList", bad, False, _SITE)
        assert out is SlurmErrno.INVALID_NODE_NAME, bad
    running = _job(5, JobState.RUNNING)
    assert update_field(running, "ExcNodeList", "node01", False, _SITE) is (
        SlurmErrno.JOB_NOT_PENDING
    )


def test_features_must_exist_somewhere_and_requeue_takes_only_0_or_1() -> None:
    assert update_field(_job(5), "Features", "nosuch", False, _SITE) is SlurmErrno.INVALID_FEATURE
    out = update_field(_job(5), "Features", "gpu", False, _SITE)
    assert not isinstance(out, SlurmErrno)
    assert out.spec.constraint == "gpu"
    job = _job(5, JobState.RUNNING)
    off = update_field(job, "Requeue", "0", False, _SITE)
    assert not isinstance(off, SlurmErrno)
    assert off.spec.requeue is False
    assert update_field(job, "Requeue", "2", False, _SITE) is job


def test_files_and_memory_change_only_while_pending() -> None:
    out = update_field(_job(5), "MinMemoryNode", "300", False, _SITE)
    assert not isinstance(out, SlurmErrno)
    assert (out.spec.mem_per_node_mb, out.spec.mem_per_cpu_mb) == (300, None)
    out = update_field(out, "MinMemoryCPU", "150", False, _SITE)
    assert not isinstance(out, SlurmErrno)
    assert (out.spec.mem_per_node_mb, out.spec.mem_per_cpu_mb) == (None, 150)
    out = update_field(out, "WorkDir", "relative", False, _SITE)
    assert not isinstance(out, SlurmErrno)
    assert out.spec.workdir == "relative"
    running = _job(5, JobState.RUNNING)
    for key in ("WorkDir", "StdOut", "MinMemoryNode"):
        assert update_field(running, key, "1", False, _SITE) is SlurmErrno.JOB_NOT_PENDING


def test_mail_type_names_the_jobs_user_and_licences_are_checked() -> None:
    out = update_field(_job(5, JobState.RUNNING), "MailType", "END", False, _SITE)
    assert not isinstance(out, SlurmErrno)
    assert (out.spec.mail_type, out.spec.mail_user) == (frozenset({"END"}), out.user)
    assert update_field(_job(5), "Licenses", "nosuch", False, _SITE) is (
        SlurmErrno.INVALID_LICENSES
    )
    running = _job(5, JobState.RUNNING)
    assert update_field(running, "Licenses", "x", False, _SITE) is SlurmErrno.ACCESS_DENIED
