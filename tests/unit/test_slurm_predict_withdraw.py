"""Predicted start and withdrawal of the Slurm adapter, without a cluster: parsing Slurm's
planner, the cache, the withdrawal mark, and the order of a withdrawal's steps against a
scripted slurmctld (tests/integration/test_slurm_predict_withdraw.py runs the real one)."""

from __future__ import annotations

import calendar
import time
from collections.abc import Collection, Mapping, Sequence
from dataclasses import replace

import pytest

from gateway.backend.capabilities import capabilities_of
from gateway.model.backend import BackendError
from gateway.model.job import Job
from gateway.model.state import JobState
from slurm_plugin.backend import SlurmBackend
from slurm_plugin.client import Identity, JobStatus, RowFilter, SubmitRequest
from slurm_plugin.config import OfferedPartition, SlurmClusterConfig
from slurm_plugin.errors import SlurmRejected, SlurmUnreachable
from slurm_plugin.from_slurm_json import SlurmAccounting, SlurmCluster
from slurm_plugin.mapping import (
    SlurmRef,
    make_tag,
    marked_for_withdrawal,
    parse_tag,
    user_comment,
    withdrawal_comment,
)
from slurm_plugin.predict import StartCache, parse_test_only, request_shape
from slurm_plugin.submit_args import build_request
from slurm_plugin.watch import withdrawn_row
from tests.support.slurm_jobs import make_launch, wrap

# what sbatch --test-only printed on the test cluster (TZ=UTC), and a refusal
PLANNED = (
    "sbatch: Job 26545 to start at 2026-11-25T23:59:37 using 1 processors on nodes node04 "
    "in partition h4probe\n"
)
REFUSED = "allocation failure: Requested node configuration is not available\n"


def test_the_planners_time_is_read_as_utc() -> None:
    when = parse_test_only(PLANNED)
    assert when == calendar.timegm((2026, 11, 25, 23, 59, 37, 0, 0, 0))
    assert parse_test_only("sbatch: warning: something\n" + PLANNED) == when
    assert parse_test_only(REFUSED) is None
    assert parse_test_only("") is None


def config(**kw: object) -> SlurmClusterConfig:
    base: dict[str, object] = {
        "name": "hpc",
        "instance": "gw",
        "commands": False,
        "partitions": (OfferedPartition("batch", "b"), OfferedPartition("gpu", "g")),
    }
    base.update(kw)
    return SlurmClusterConfig(**base)  # type: ignore[arg-type]


def request(job_id: int, **fields: object) -> SubmitRequest:
    launch = make_launch(job_id, wrap("true"), partitions=("b",), **fields)  # type: ignore[arg-type]
    return build_request(launch, config(), Identity("root", 0, 0))


def test_the_shape_leaves_out_names_paths_and_comments_only() -> None:
    a = request(1, time_limit=5, comment="x", stdout="/tmp/a-%j.out")
    b = request(2, time_limit=5, name="other", comment="y", stdout="/tmp/b.out")
    assert request_shape(a) == request_shape(b)
    assert request_shape(a) != request_shape(request(3, time_limit=6))
    assert request_shape(a) != request_shape(request(4, time_limit=5, nodes_min=2))


def test_the_cache_keeps_answers_and_unknowns_for_its_ttl() -> None:
    now = [100.0]
    cache = StartCache(5.0, clock=lambda: now[0], limit=4)
    cache.put("a", 123.0)
    cache.put("dead", None)
    assert cache.get("a") == (True, 123.0)
    assert cache.get("dead") == (True, None)
    assert cache.get("b") == (False, None)
    now[0] += 5.1
    assert cache.get("a") == (False, None)
    for k in range(10):  # bounded: the oldest go
        now[0] += 1
        cache.put(k, float(k))
    assert cache.get(9) == (True, 9.0)
    assert cache.get(0) == (False, None)


def test_the_withdrawal_mark_keeps_the_tag_and_the_users_comment() -> None:
    marked = withdrawal_comment("gw", 12, "keep me", 2)
    assert parse_tag(marked, "gw") == (12, 2)
    assert marked_for_withdrawal(marked)
    assert user_comment(marked) == "keep me"
    assert not marked_for_withdrawal(make_tag("gw", 12, 2) + " keep me")
    assert not marked_for_withdrawal("caldera-withdraw")  # a user's comment, untagged
    bare = withdrawal_comment("gw", 12, None)
    assert marked_for_withdrawal(bare)
    assert user_comment(bare) is None


def row(state: JobState, nodes: tuple[str, ...] = (), comment: str = "") -> JobStatus:
    return JobStatus(ref=SlurmRef(77), state=state, nodes=nodes, comment=comment)


def test_only_a_marked_job_cancelled_before_it_started_is_a_withdrawn_run() -> None:
    marked = withdrawal_comment("gw", 5, None)
    assert withdrawn_row(row(JobState.CANCELLED, (), marked))
    assert not withdrawn_row(row(JobState.CANCELLED, ("node01",), marked))  # it ran
    assert not withdrawn_row(row(JobState.COMPLETED, (), marked))
    assert not withdrawn_row(row(JobState.CANCELLED, (), make_tag("gw", 5)))  # the user's


class ScriptedSlurm:
    """slurmctld as a script: what `status` answers, in turn; every call recorded."""

    name = "hpc"

    def __init__(
        self, answers: Sequence[JobStatus | None], reachable: bool = True, refuse: str = ""
    ) -> None:
        self.answers = list(answers)
        self.reachable = reachable
        self.refuse = refuse  # an action slurmctld refuses
        self.calls: list[str] = []

    def ping(self) -> None:
        if not self.reachable:
            raise SlurmUnreachable("Slurmctld(primary) at vm is DOWN")

    def status(self, refs: Sequence[SlurmRef]) -> list[JobStatus]:
        self.calls.append("show")
        answer = self.answers.pop(0)
        return [answer] if answer is not None else []

    def control(self, ref: SlurmRef, action: str, identity: Identity | None = None) -> None:
        self.calls.append(action)
        if action == self.refuse:
            raise SlurmRejected("Access/permission denied", errno=2002)

    def update(
        self, ref: SlurmRef, fields: Mapping[str, str], identity: Identity | None = None
    ) -> None:
        comment = fields["Comment"]
        self.calls.append("mark" if marked_for_withdrawal(comment) else "unmark")

    def signal(
        self,
        ref: SlurmRef,
        signal: int | None,
        *,
        batch_only: bool = False,
        identity: Identity | None = None,
    ) -> None:
        self.calls.append("scancel")

    def statuses(
        self, users: Collection[str] | None = None, keep: RowFilter | None = None
    ) -> list[JobStatus]:
        return []

    def version(self) -> str:
        return "22.05.8"

    def submit(self, request: SubmitRequest) -> SlurmRef:
        raise NotImplementedError

    def accounting(self, refs: Sequence[SlurmRef]) -> SlurmAccounting:
        return SlurmAccounting(())

    def submit_lines(self, user: str, since: float) -> dict[int, str]:
        return {}

    def cluster(self) -> SlurmCluster:
        raise NotImplementedError


def pending_job() -> Job:
    job = make_launch(5, wrap("true"), partitions=("b",), cluster="hpc").job
    return replace(job, state=JobState.PENDING, backend_id="77")


def test_a_pending_job_is_marked_held_checked_then_cancelled() -> None:
    slurm = ScriptedSlurm([row(JobState.PENDING), row(JobState.CANCELLED)])
    backend = SlurmBackend(config(), client=slurm, watcher=False)
    assert backend.withdraw(pending_job())
    assert slurm.calls == ["mark", "hold", "show", "scancel", "show"]


def test_a_job_that_started_before_the_hold_is_never_cancelled() -> None:
    slurm = ScriptedSlurm([row(JobState.RUNNING, ("node01",))])
    backend = SlurmBackend(config(), client=slurm, watcher=False)
    assert not backend.withdraw(pending_job())
    assert "scancel" not in slurm.calls
    assert slurm.calls == ["mark", "hold", "show", "release", "unmark"]


def test_a_pending_job_that_could_not_be_held_is_never_cancelled() -> None:
    slurm = ScriptedSlurm([row(JobState.PENDING)], refuse="hold")
    backend = SlurmBackend(config(), client=slurm, watcher=False)
    with pytest.raises(BackendError) as err:
        backend.withdraw(pending_job())
    assert "permission" in str(err.value)
    assert "scancel" not in slurm.calls
    assert slurm.calls == ["mark", "hold", "show", "unmark"]


def test_a_job_that_already_ran_and_ended_is_not_withdrawn() -> None:
    slurm = ScriptedSlurm([row(JobState.COMPLETED, ("node01",))])
    backend = SlurmBackend(config(), client=slurm, watcher=False)
    assert not backend.withdraw(pending_job())
    assert "scancel" not in slurm.calls


def test_an_unreachable_controller_is_a_retryable_error_and_nothing_is_sent() -> None:
    slurm = ScriptedSlurm([], reachable=False)
    backend = SlurmBackend(config(), client=slurm, watcher=False)
    with pytest.raises(BackendError) as err:
        backend.withdraw(pending_job())
    assert err.value.retryable
    assert slurm.calls == []
    started = time.monotonic()
    assert backend.predict_start(pending_job(), "b") is None  # no commands: no planner
    assert time.monotonic() - started < 1


def test_the_slurm_backend_has_both_capabilities() -> None:
    caps = capabilities_of(SlurmBackend(config(), client=ScriptedSlurm([]), watcher=False))
    assert caps.predicts_start is not None
    assert caps.withdraws is not None
