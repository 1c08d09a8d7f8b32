"""salloc's and srun's allocations are recorded as slurmctld records them (seen on the test
cluster, Slurm 22.05; tests/differential/test_srun_steps_vs_slurm.py compares them live):
BatchFlag=0, Command=(null) for salloc and srun's program as given, no StdErr/StdIn/StdOut
in `scontrol show job`, squeue's %o `(null)`. Caldera's holder script is not the job's."""

from __future__ import annotations

import time

from gateway.compat.show_fmt import show_job
from gateway.compat.squeue_fmt import SqueueOptions, render_squeue
from gateway.control.submit import Caller, SbatchCall, build_job, parse_call
from gateway.model.codec import job_from_dict, job_to_dict
from gateway.model.job import Job
from tests.support.builders import make_cluster

CALLER = Caller(uid=0, gid=0, user="root", group="root", operator=True)


def _submit(allocation: str | None) -> Job:
    call = SbatchCall(
        argv=["sbatch", "-J", "interactive", "-o", "/dev/null", "--wrap", "sleep 1"],
        env={},
        cwd="/home/u",
        script=None,
        allocation=allocation,
    )
    now = time.time()
    request = parse_call(call, CALLER, now, 1001)
    return build_job(7, request, call, CALLER, now, {"local": make_cluster()}, 0)


def test_salloc_job_is_no_batch_job_and_shows_no_output_paths() -> None:
    job = _submit("(null)")
    assert not job.batch
    text = show_job(job, now=job.submit_time)
    assert "BatchFlag=0 " in text
    assert "   Command=(null)\n" in text
    assert "   WorkDir=/home/u\n" in text
    for key in ("StdOut=", "StdErr=", "StdIn="):
        assert key not in text


def test_srun_outside_a_job_records_its_program_as_the_command() -> None:
    job = _submit("/bin/echo")
    assert "   Command=/bin/echo\n" in show_job(job, now=job.submit_time)


def test_sbatch_jobs_stay_batch_jobs() -> None:
    job = _submit(None)
    assert job.batch
    text = show_job(job, now=job.submit_time)
    assert "BatchFlag=1 " in text
    assert "   StdOut=/dev/null\n" in text


def test_the_kind_survives_the_store_and_older_records_are_batch_jobs() -> None:
    job = _submit("(null)")
    assert not job_from_dict(job_to_dict(job)).batch
    old = job_to_dict(job)
    del old["batch"]
    assert job_from_dict(old).batch


def test_squeue_prints_a_salloc_jobs_command_as_null() -> None:
    job = _submit("(null)")
    opts = SqueueOptions(format="%j|%o", noheader=True)
    out = render_squeue([job], opts, now=job.submit_time)
    assert out == "interactive|(null)\n"
