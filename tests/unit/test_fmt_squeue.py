"""squeue's views of fixed records; every expected text is what real squeue 22.05 printed
for the same jobs (see test_fmt_records)."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

import pytest

from gateway.compat.squeue_fmt import (
    SQUEUE_FIELDS,
    SqueueOptions,
    field_by_letter,
    field_by_name,
    parse_format,
    parse_long_format,
    render_squeue,
)
from gateway.compat.squeue_fmt_json import squeue_json
from gateway.compat.squeue_fmt_sort import SortError
from gateway.model.state import JobState
from tests.unit.test_fmt_records import SITE, SQUEUE_EXTRAS, T0, cancelled, running_jobs, utc

__all__ = ["utc"]

NOW = float(T0 + 3)


def squeue(**kw: Any) -> str:
    return render_squeue(
        running_jobs(),
        SqueueOptions(site=SITE, **kw),
        now=NOW,
        extras=SQUEUE_EXTRAS,
    )


def test_default_view() -> None:
    assert squeue() == (
        "             JOBID PARTITION     NAME     USER ST       TIME  NODES NODELIST(REASON)\n"
        "               594     debug     held     root PD       0:00      1 (JobHeldUser)\n"
        "       593_[3-9%2]      real      arr     root PD       0:00      1 (JobArrayTaskLimit)\n"
        "               591      real  sleeper     root  R       0:03      1 node01\n"
        "               592      real    multi     root  R       0:03      2 node[01-02]\n"
        "             593_1      real      arr     root  R       0:03      1 node02\n"
        "             593_2      real      arr     root  R       0:03      1 node03\n"
    )


def test_long_view_has_the_date_line_and_state_and_limit() -> None:
    assert squeue(long=True) == (
        "Sun Nov 22 07:09:59 2026\n"
        "             JOBID PARTITION     NAME     USER    STATE       TIME TIME_LIMI  NODES"
        " NODELIST(REASON)\n"
        "               594     debug     held     root  PENDING       0:00 UNLIMITED      1"
        " (JobHeldUser)\n"
        "       593_[3-9%2]      real      arr     root  PENDING       0:00      5:00      1"
        " (JobArrayTaskLimit)\n"
        "               591      real  sleeper     root  RUNNING       0:03     30:00      1"
        " node01\n"
        "               592      real    multi     root  RUNNING       0:03   1:00:00      2"
        " node[01-02]\n"
        "             593_1      real      arr     root  RUNNING       0:03      5:00      1"
        " node02\n"
        "             593_2      real      arr     root  RUNNING       0:03      5:00      1"
        " node03\n"
    )


def test_all_states_sort_by_partition_then_compact_state() -> None:
    jobs = running_jobs()
    jobs[0] = cancelled(jobs[0])
    text = render_squeue(
        jobs, SqueueOptions(all_states=True, site=SITE), now=NOW + 1, extras=SQUEUE_EXTRAS
    )
    assert text == (
        "             JOBID PARTITION     NAME     USER ST       TIME  NODES NODELIST(REASON)\n"
        "               594     debug     held     root PD       0:00      1 (JobHeldUser)\n"
        "               591      real  sleeper     root CA       0:03      1 node01\n"
        "               596      real       ok     root CD       0:00      1 node04\n"
        "               595      real     fail     root  F       0:00      1 (NonZeroExitCode)\n"
        "       593_[3-9%2]      real      arr     root PD       0:00      1 (JobArrayTaskLimit)\n"
        "               592      real    multi     root  R       0:04      2 node[01-02]\n"
        "             593_1      real      arr     root  R       0:04      1 node02\n"
        "             593_2      real      arr     root  R       0:04      1 node03\n"
    )


def test_one_row_per_array_task() -> None:
    text = render_squeue(
        running_jobs(),
        SqueueOptions(all_states=True, array=True, format="%i|%A|%F|%K|%j", site=SITE),
        now=NOW,
        extras=SQUEUE_EXTRAS,
    )
    assert text.splitlines() == [
        "JOBID|JOBID|ARRAY_JOB_ID|ARRAY_TASK_ID|NAME",
        "594|594|594|N/A|held",
        "596|596|596|N/A|ok",
        "595|595|595|N/A|fail",
        "593_3|593|593|3|arr",
        "593_4|593|593|4|arr",
        "593_5|593|593|5|arr",
        "593_6|593|593|6|arr",
        "593_7|593|593|7|arr",
        "593_8|593|593|8|arr",
        "593_9|593|593|9|arr",
        "591|591|591|N/A|sleeper",
        "592|592|592|N/A|multi",
        "593_1|597|593|1|arr",
        "593_2|598|593|2|arr",
    ]


def test_start_view_lists_pending_jobs() -> None:
    assert squeue(start=True) == (
        "             JOBID PARTITION     NAME     USER ST          START_TIME  NODES"
        " SCHEDNODES           NODELIST(REASON)\n"
        "               594     debug     held     root PD                 N/A      1"
        " (null)               (JobHeldUser)\n"
        "       593_[3-9%2]      real      arr     root PD                 N/A      1"
        " (null)               (JobArrayTaskLimit)\n"
    )


def test_noheader() -> None:
    assert squeue(noheader=True).splitlines()[0] == (
        "               594     debug     held     root PD       0:00      1 (JobHeldUser)"
    )


def test_format_letters_with_squeue_quirks() -> None:
    # %% prints nothing, an unknown letter prints itself, text before the first % stays
    assert squeue(job_ids=("594", "593"), format="x%%y %i%%").splitlines() == [
        "xNICE JOBID",
        "x0 594",
        "x0 593_[3-9%2]",
        "x0 593_1",
        "x0 593_2",
    ]
    assert squeue(job_ids=("594",), format="%-9P|%.3i|%5j|%.0i|").splitlines() == [
        "%-9P|JOB|NAME |JOBID|",
        "%-9P|594|held |594|",
    ]
    assert squeue(job_ids=("594",), format="abc").splitlines() == ["abc", "abc"]


def test_many_letters() -> None:
    fmt = (
        "%.18i %9P %j %u %t %M %l %D %R %C %m %b %S %e %V %Q %p %r %N %F %K %L %o %Z %E %f "
        "%h %q %a %A %c %d %g %G %H %I %J %k %n %O %U %v %w %W %x %X %y %z %T"
    )
    lines = squeue(job_ids=("594", "592"), format=fmt).splitlines()
    assert lines[1] == (
        "               594 debug     held root PD 0:00 UNLIMITED 1 (JobHeldUser) 1 500M N/A"
        " N/A N/A 2026-11-22T07:09:56 0 0.00000000000000 JobHeldUser  594 N/A UNLIMITED (null)"
        " /tmp/fmtx (null) (null) OK normal root 594 1 0 root 0 * * * (null)  0 0 (null) (null)"
        " (null)  N/A 0 *:*:* PENDING"
    )
    assert lines[2] == (
        "               592 real      multi root R 0:03 1:00:00 2 node[01-02] 2 100M N/A"
        " 2026-11-22T07:09:56 2026-11-22T08:09:56 2026-11-22T07:09:56 4294901538"
        " 0.99998468975536 None node[01-02] 592 N/A 59:57 (null) /tmp/fmtx (null) (null) OK"
        " normal root 592 1 0 root 0 * * * (null)  0 0 (null) (null) (null)  N/A 0 *:*:* RUNNING"
    )


def test_long_format_fields_widths_and_suffixes() -> None:
    text = squeue(
        job_ids=("594",), format_long="JobID:-5,Name:.,Partition:3x,UserName:.5|,bogus,ArrayJobID"
    )
    assert text.splitlines() == [
        "JOBID NAMEPARx USER|ARRAY_JOB_ID        ",
        "594 helddebx root|594                 ",
    ]


def test_long_format_defaults_to_20_left() -> None:
    text = squeue(job_ids=("593",), format_long="JobID:10,Name:.20,ArrayTaskID:8,StateCompact")
    assert text.splitlines() == [
        "JOBID                     NAMEARRAY_TAST                  ",
        "593                        arr3-9%2   PD                  ",
        "597                        arr1       R                   ",
        "598                        arr2       R                   ",
    ]


def test_sort_options() -> None:
    text = squeue(sort="-i", format="%i")
    assert text.splitlines()[1:] == ["594", "593_[3-9%2]", "593_2", "593_1", "592", "591"]
    with pytest.raises(SortError, match="Invalid sort specification: x"):
        squeue(sort="x")


def test_state_filter() -> None:
    only = squeue(states=(JobState.RUNNING,), format="%i %t").splitlines()
    assert only == ["JOBID ST", "591 R", "592 R", "593_1 R", "593_2 R"]


def test_pending_tasks_recorded_separately_fold_into_the_array_row() -> None:
    jobs = running_jobs()
    held_task = replace(
        jobs[2],
        job_id=640,
        array_task_id=12,
        state=JobState.PENDING,
        nodes=(),
        start_time=None,
        reason=jobs[-1].reason,
    )
    text = render_squeue(
        [*jobs, held_task], SqueueOptions(format="%i %r", site=SITE), now=NOW, extras=SQUEUE_EXTRAS
    )
    assert "593_[3-9,12] JobArrayTaskLimit" in text.splitlines()


def test_table_declares_letters_and_names_once() -> None:
    letters = [f.letter for f in SQUEUE_FIELDS if f.letter]
    names = [n for f in SQUEUE_FIELDS for n in f.names]
    assert len(letters) == len(set(letters))
    assert len(names) == len(set(names))
    assert field_by_letter("i") is field_by_name("JobArrayID")
    assert field_by_name("jobid") is field_by_letter("A")
    assert field_by_name("NumTasksX") is field_by_name("numtasks")
    assert parse_format("%.18i")[0].right
    assert parse_long_format("JobID")[0].width == 20


def test_json_has_slurms_layout() -> None:
    text = squeue_json(running_jobs(), extras=SQUEUE_EXTRAS, site=SITE)
    assert text.startswith(
        '{\n  "meta": {\n    "plugin": {\n      "type": "openapi\\/v0.0.38",\n'
        '      "name": "Slurm OpenAPI v0.0.38"\n    },\n    "Slurm": {\n      "version": {\n'
        '        "major": 22,\n        "micro": 8,\n        "minor": 5\n      },\n'
        '      "release": "22.05.8"\n    }\n  },\n  "errors": [\n  ],\n  "jobs": [\n'
    )
    assert not text.endswith("\n")
    doc = json.loads(text)
    held = next(j for j in doc["jobs"] if j["job_id"] == 594)
    assert list(held)[:8] == [
        "account",
        "accrue_time",
        "admin_comment",
        "array_job_id",
        "array_task_id",
        "array_max_tasks",
        "array_task_string",
        "association_id",
    ]
    assert held["job_state"] == "PENDING"
    assert held["state_reason"] == "JobHeldUser"
    assert held["memory_per_node"] == 500
    assert held["memory_per_cpu"] is None
    assert held["time_limit"] is None
    assert held["cpus_per_task"] is None  # 22.05 never prints it
    meta = next(j for j in doc["jobs"] if j["job_id"] == 593)
    assert (meta["array_task_string"], meta["array_max_tasks"]) == ("3-9%2", 2)
    task = next(j for j in doc["jobs"] if j["job_id"] == 597)
    assert (task["array_job_id"], task["array_task_id"], task["nodes"]) == (593, 1, "node02")
    assert task["job_resources"]["allocated_hosts"] == 1
    assert [j["job_id"] for j in doc["jobs"]] == [591, 592, 597, 594, 595, 596, 598, 593]
