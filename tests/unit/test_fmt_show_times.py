"""scontrol show job's EndTime of a running job (start + time limit, as slurmctld sets it
at start) and EligibleTime of a job waiting for --begin; squeue -s's step lines."""

from __future__ import annotations

from gateway.compat.fmt_common import make_time_str
from gateway.compat.show_fmt import show_job
from gateway.compat.squeue_fmt import format_errors
from gateway.compat.squeue_steps import STEP_LETTERS, render_steps
from gateway.model.job import Step
from gateway.model.state import JobState, Reason
from tests.support.builders import make_job

T0 = 1_790_000_000.0


def _line(text: str, key: str) -> str:
    return next(w for line in text.splitlines() for w in line.split() if w.startswith(key))


def test_a_running_job_ends_when_its_time_limit_runs_out() -> None:
    job = make_job(5).time(90).state(JobState.RUNNING, start_time=T0).build()
    text = show_job(job, now=T0 + 10)
    assert _line(text, "EndTime=") == f"EndTime={make_time_str(T0 + 90 * 60)}"
    assert _line(text, "StartTime=") == f"StartTime={make_time_str(T0)}"


def test_a_pending_job_has_no_end_time_yet() -> None:
    job = make_job(5).time(90).build()
    assert _line(show_job(job, now=T0), "EndTime=") == "EndTime=Unknown"


def test_a_job_waiting_for_its_begin_time_is_eligible_then() -> None:
    begin = int(T0 + 3600)
    job = make_job(6).spec(begin=begin).state(JobState.PENDING, reason=Reason.BEGIN_TIME).build()
    assert _line(show_job(job, now=T0), "EligibleTime=") == f"EligibleTime={make_time_str(begin)}"
    assert _line(show_job(job, now=T0), "StartTime=") == f"StartTime={make_time_str(begin)}"
    assert _line(show_job(job, now=T0), "EndTime=") == "EndTime=Unknown"
    held = make_job(7).spec(begin=begin).held().build()  # held or not, as slurmctld shows it
    assert _line(show_job(held, now=T0), "EligibleTime=") == f"EligibleTime={make_time_str(begin)}"
    plain = make_job(8).build()
    assert _line(show_job(plain, now=T0), "EligibleTime=") == "EligibleTime=Unknown"


def test_squeue_steps_default_format_and_o() -> None:
    job = make_job(12).state(JobState.RUNNING, start_time=T0, nodes=("vm",)).build()
    done = make_job(13).state(JobState.COMPLETED, start_time=T0, end_time=T0 + 1).build()
    steps = [
        Step(
            job_id=12,
            step_id="batch",
            name="batch",
            state=JobState.RUNNING,
            start_time=T0,
            nodes=("vm",),
        ),
        Step(
            job_id=12,
            step_id="0",
            name="a_rather_long_name",
            state=JobState.RUNNING,
            start_time=T0 + 60,
            nodes=("n1", "n2"),
        ),
        Step(
            job_id=12,
            step_id="1",
            name="ended",
            state=JobState.COMPLETED,
            start_time=T0,
            end_time=T0 + 5,
        ),
        Step(job_id=13, step_id="batch", name="batch", state=JobState.COMPLETED, start_time=T0),
    ]
    text = render_steps(steps, {12: job, 13: done}, now=T0 + 125)
    assert text.splitlines() == [
        "         STEPID     NAME PARTITION     USER      TIME NODELIST",
        "           12.0 a_rather     debug        u      1:05 n[1-2]",
        "       12.batch    batch     debug        u      2:05 vm",
    ]
    assert render_steps(steps, {12: job}, now=T0 + 1, fmt="%i %j", noheader=True) == (
        "12.0 a_rather_long_name\n12.batch batch\n"
    )


def test_squeue_step_formats_as_the_test_cluster_printed_them() -> None:
    """(2026-11-27, squeue -s in a job on the test cluster): %b is TRES_PER_JOB, the step's
    --gres as `gres:gpu:1` or (null); an unknown letter prints itself and squeue says so;
    %all is every known letter, b-z then A-Z, `|` after each but the last letter."""
    job = make_job(12).state(JobState.RUNNING, start_time=T0).build()
    gpu = Step(job_id=12, step_id="0", name="sleep", state=JobState.RUNNING, start_time=T0,
               nodes=("node03",), extra={"tres_per_node": "gres:gpu:1"})  # fmt: skip
    plain = Step(job_id=12, step_id="1", name="sleep", state=JobState.RUNNING, start_time=T0,
                 nodes=("node04",))  # fmt: skip
    text = render_steps([gpu, plain], {12: job}, now=T0 + 2, fmt="%i|%b|%A")
    assert text.splitlines() == ["STEPID|TRES_PER_JOB|TASKS", "12.0|gres:gpu:1|1", "12.1|(null)|1"]
    odd = render_steps([gpu], {12: job}, now=T0 + 2, fmt="%5i%q%%%i")
    assert odd.splitlines() == ["STEPI%qSTEPID", "12.0 %q12.0"]
    assert format_errors("%i %j %T %N", STEP_LETTERS, "job step") == [
        "squeue: error: Invalid job step format specification: T"
    ]
    assert format_errors("%all", STEP_LETTERS, "job step") == []
    assert format_errors("%i %~ %q") == ["squeue: error: Invalid job format specification: ~"]
    every = render_steps([gpu], {12: job}, now=T0 + 2, fmt="%all").splitlines()
    assert every[0] == (
        "TRES_PER_JOB|STEPID|NAME|TIME_LIMIT|USER|TASKS|TIME|NODELIST|PARTITION|START_TIME|UID|"
    )
    assert every[1].startswith("gres:gpu:1|12.0|sleep|")


def test_show_config_prints_the_keys_caldera_has_in_scontrols_layout() -> None:
    from gateway.compat.show_config import SiteConfig, show_config

    conf = SiteConfig(
        cluster="caldera",
        def_mem_per_cpu_mb=100,
        job_requeue=True,
        max_array_size=100001,
        gres_types=("gpu", "craynetwork", "qpu"),
        host="vm",
    )
    lines = show_config(conf, now=T0).splitlines()
    assert lines[0] == f"Configuration data as of {make_time_str(T0)}"
    assert lines[1:] == [
        "ClusterName             = caldera",
        "DefMemPerCPU            = 100",
        "GresTypes               = gpu,craynetwork,qpu",
        "JobRequeue              = 1",
        "MaxArraySize            = 100001",
        "SLURM_VERSION           = 22.05.8",
        "",
        "Slurmctld(primary) at vm is UP",
    ]
    bare = SiteConfig(cluster="c", def_mem_per_cpu_mb=None, job_requeue=False, max_array_size=5)
    assert "DefMemPerNode           = UNLIMITED" in show_config(bare, now=T0).splitlines()


def test_show_step_prints_the_batch_and_an_srun_step_as_scontrol() -> None:
    from gateway.compat.show_step import show_step

    job = make_job(6005).state(JobState.RUNNING, start_time=T0, nodes=("node02",)).build()
    batch = Step(
        job_id=6005,
        step_id="batch",
        name="batch",
        state=JobState.RUNNING,
        start_time=T0,
        nodes=("node02",),
    )
    assert show_step(batch, job) == (
        f"StepId=6005.batch UserId={job.uid} StartTime={make_time_str(T0)} TimeLimit=UNLIMITED\n"
        "   State=RUNNING Partition=debug NodeList=node02\n"
        "   Nodes=1 CPUs=0 Tasks=1 Name=batch Network=(null)\n"
        "   TRES=(null)\n"
        "   ResvPorts=(null)\n"
        "   CPUFreqReq=Default\n"
        "   SrunHost:Pid=(null):0\n\n"
    )
    srun = Step(
        job_id=6005,
        step_id="0",
        name="sleep",
        state=JobState.RUNNING,
        start_time=T0,
        nodes=("node02",),
        ntasks=2,
        cpus=2,
        extra={"tres_alloc": "cpu=2,mem=200M,node=1", "srun_pid": "31981"},
    )
    assert show_step(srun, job, one_liner=True) == (
        f"StepId=6005.0 UserId={job.uid} StartTime={make_time_str(T0)} TimeLimit=UNLIMITED "
        "State=RUNNING Partition=debug NodeList=node02 Nodes=1 CPUs=2 Tasks=2 Name=sleep "
        "Network=(null) TRES=cpu=2,mem=200M,node=1 ResvPorts=(null) CPUFreqReq=Default "
        "Dist=Block SrunHost:Pid=node02:31981\n"
    )


def test_show_step_of_a_local_srun_record_shows_its_memory_and_trusts_no_text() -> None:
    """A local step's record is written by its user: only digits and Slurm's words show."""
    from gateway.compat.show_step import show_step

    job = make_job(6006).state(JobState.RUNNING, start_time=T0, nodes=("node01",)).build()

    def shown(extra: dict[str, str]) -> str:
        step = Step(
            job_id=6006,
            step_id="0",
            name="sleep",
            state=JobState.RUNNING,
            start_time=T0,
            nodes=("node01",),
            cpus=2,
            extra=extra,
        )
        return show_step(step, job, one_liner=True)

    mine = shown({"mem_mb": "2048", "dist": "Cyclic", "srun_pid": "77"})
    assert "TRES=cpu=2,mem=2G,node=1 " in mine
    assert "Dist=Cyclic SrunHost:Pid=node01:77\n" in mine
    forged = shown({"mem_mb": "1\nStepId=9", "dist": "X\nY", "srun_pid": "1 State=x"})
    assert "TRES=cpu=2,node=1 " in forged
    assert "Dist=Block SrunHost:Pid=node01:0\n" in forged
    assert forged.count("\n") == 1
    # the step's own GPUs, as the test cluster showed `srun --gres=gpu:2` (untyped node)
    assert "TRES=cpu=2,gres/gpu=2,mem=100M,node=1 " in shown({"mem_mb": "100", "gpus": "2"})
    for bad in ("2,1", "x", "1\n", "9" * 9, "", "-1"):
        assert "TRES=cpu=2,mem=100M,node=1 " in shown({"mem_mb": "100", "gpus": bad}), bad
