"""The gateway's kept squeue lines and `--json` texts print exactly what rendering afresh
prints: across calls, as the clock moves, when records are replaced, for every format."""

from __future__ import annotations

from dataclasses import replace

import pytest

from gateway.compat.squeue_fmt import SQUEUE_FIELDS, SqueueOptions, render_squeue
from gateway.compat.squeue_fmt_cache import LineCache
from gateway.compat.squeue_fmt_json import JobTexts, squeue_json
from gateway.model.state import JobState, Reason
from gateway.model.values import INFINITE
from tests.unit.test_fmt_records import SITE, T0, cancelled, running_jobs, utc

__all__ = ["utc"]

NOW = float(T0 + 3)
EVERY_FIELD = ",".join(f.names[0] for f in SQUEUE_FIELDS)
VIEWS = [
    SqueueOptions(site=SITE),
    SqueueOptions(site=SITE, long=True),
    SqueueOptions(site=SITE, all_states=True, array=True, max_array_size=100),
    SqueueOptions(site=SITE, format="%.18i %9P %j %u %t %M %L %e %V %S %D %R", sort="-i"),
    SqueueOptions(site=SITE, format_long=EVERY_FIELD, all_states=True),
    SqueueOptions(site=SITE, format_long="jobid,timeleft,timeused,name", noheader=True),
    SqueueOptions(site=SITE, start=True),
    SqueueOptions(site=SITE, format="%i %e"),
    SqueueOptions(site=SITE, format_long="jobid,pendingtime"),
]


@pytest.mark.usefixtures("utc")
@pytest.mark.parametrize("opts", VIEWS, ids=range(len(VIEWS)))
def test_kept_lines_match_fresh_rendering_as_the_clock_moves(opts: SqueueOptions) -> None:
    jobs = running_jobs()
    jobs[0] = cancelled(jobs[0])
    unlimited = next(j for j in jobs if j.state is JobState.RUNNING and j.array_task_id is None)
    # no limit, an end time ahead: END_TIME is NONE until the clock passes it
    jobs.append(replace(unlimited, job_id=600, time_limit=INFINITE, end_time=NOW + 60))
    held = next(j for j in jobs if j.state is JobState.PENDING and j.array_task_id is None)
    jobs.append(replace(held, job_id=601, time_limit=INFINITE, end_time=NOW + 60))
    cache = LineCache()
    for now in (NOW, NOW, NOW + 61, NOW + 3600, NOW + 3600):
        assert render_squeue(jobs, opts, now=now, cache=cache) == render_squeue(jobs, opts, now=now)


@pytest.mark.usefixtures("utc")
def test_a_replaced_record_is_rendered_again() -> None:
    jobs = running_jobs()
    opts = SqueueOptions(site=SITE, format="%i %j %r", all_states=True)
    cache = LineCache()
    first = render_squeue(jobs, opts, now=NOW, cache=cache)
    pending = next(i for i, j in enumerate(jobs) if j.state is JobState.PENDING)
    jobs[pending] = replace(jobs[pending], reason=Reason.PRIORITY)
    again = render_squeue(jobs, opts, now=NOW, cache=cache)
    assert again != first
    assert again == render_squeue(jobs, opts, now=NOW)
    other_site = replace(SITE, default_partition="other")
    assert render_squeue(jobs, replace(opts, site=other_site), now=NOW, cache=cache) == (
        render_squeue(jobs, replace(opts, site=other_site), now=NOW)
    )


def test_kept_json_texts_match_fresh_encoding() -> None:
    jobs = running_jobs()
    texts = JobTexts()
    assert squeue_json(jobs, site=SITE, cache=texts) == squeue_json(jobs, site=SITE)
    jobs[1] = cancelled(jobs[1])
    assert squeue_json(jobs, site=SITE, cache=texts) == squeue_json(jobs, site=SITE)
    assert squeue_json([], site=SITE, cache=texts) == squeue_json([], site=SITE)
