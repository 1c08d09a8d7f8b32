"""JobTable's indexes always agree with a scan of its jobs, whatever the write sequence."""

from __future__ import annotations

from dataclasses import replace

from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.control.jobtable import JobTable
from gateway.model.job import Hold, Job
from gateway.model.state import JobState
from tests.support.builders import make_job

_STATES = [
    JobState.PENDING,
    JobState.RUNNING,
    JobState.COMPLETED,
    JobState.CANCELLED,
    JobState.SUSPENDED,
    JobState.FAILED,
]


def _job(
    job_id: int, state: JobState, held: bool, backend: bool, array: int | None, uid: int, name: str
) -> Job:
    job = make_job(job_id).name(name).user(uid).build()
    return replace(
        job,
        state=state,
        hold=Hold.USER if held else None,
        backend_id="7" if backend else "",
        array_job_id=array,
        array_task_id=0 if array else None,
    )


writes = st.lists(
    st.tuples(
        st.sampled_from(["set", "pop"]),
        st.integers(1, 12),
        st.sampled_from(_STATES),
        st.booleans(),
        st.booleans(),
        st.sampled_from([None, 1, 5]),
        st.integers(0, 2),
        st.sampled_from(["a", "b"]),
    ),
    max_size=60,
)


@settings(max_examples=300, deadline=None)
@given(writes)
def test_indexes_match_a_full_scan(ops: list[tuple]) -> None:  # type: ignore[type-arg]
    table = JobTable()
    for op, jid, state, held, backend, array, uid, name in ops:
        if op == "pop":
            table.pop(jid)
        else:
            table[jid] = _job(jid, state, held, backend, array, uid, name)
    jobs = list(table.values())
    assert set(table.pending) == {
        j.job_id
        for j in jobs
        if j.state is JobState.PENDING and j.hold is None and not j.backend_id
    }
    assert set(table.active) == {j.job_id for j in jobs if j.state.is_active}
    for uid in range(3):
        for name in ("a", "b"):
            assert table.same_user_name(uid, name) == tuple(
                sorted(
                    j.job_id
                    for j in jobs
                    if j.uid == uid and j.spec.name == name and not j.state.is_finished
                )
            )
    for target in range(1, 13):
        expected = sorted(j.job_id for j in jobs if j.array_job_id == target)
        if not expected and target in table:
            expected = [target]
        assert [j.job_id for j in table.job_or_array(target)] == expected
    assert all(table.pending[i] is table[i] for i in table.pending)
