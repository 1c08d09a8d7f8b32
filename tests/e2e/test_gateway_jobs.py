"""End to end on the embedded default: the installed commands, a real gateway, real jobs.

Time limits run 60x faster in these gateways (`-t 1` is one second; see the fixture).
"""

from __future__ import annotations

import time
from pathlib import Path

from tests.support.gateway_env import Gateway


def test_a_script_runs_as_a_batch_job_and_shows_in_squeue_and_sacct(gateway: Gateway):
    script = gateway.workdir / "hello.sh"
    script.write_text(
        "#!/bin/bash\n#SBATCH -J hello -n 2 -o out-%j.txt\n"
        'echo "id=$SLURM_JOB_ID name=$SLURM_JOB_NAME ntasks=$SLURM_NTASKS"\n'
        "srun bash -c 'echo task $SLURM_PROCID'\n"
    )
    out = gateway.ok(["sbatch", str(script)])
    assert out.startswith("Submitted batch job ")
    job_id = int(out.split()[-1])
    queue = gateway.ok(["squeue", "-h", "-o", "%i %j %u"])
    assert f"{job_id} hello root" in queue or gateway.job(job_id)["state"] != "PENDING"
    gateway.wait(job_id)
    text = (gateway.workdir / f"out-{job_id}.txt").read_text()
    assert f"id={job_id} name=hello ntasks=2" in text
    assert "task 0" in text
    assert "task 1" in text
    acct = gateway.ok(["sacct", "-j", str(job_id), "-P", "-o", "JobID,JobName,State,ExitCode"])
    assert f"{job_id}|hello|COMPLETED|0:0" in acct.splitlines()
    assert f"{job_id}.batch|batch|COMPLETED|0:0" in acct.splitlines()


def test_exit_codes_and_signals_are_recorded_as_slurm_records_them(gateway: Gateway):
    failed = gateway.sbatch("--wrap", "exit 3")
    killed = gateway.sbatch("--wrap", "kill -9 $$")
    gateway.wait(failed)
    gateway.wait(killed)
    acct = gateway.ok(
        ["sacct", "-X", "-n", "-P", "-j", f"{failed},{killed}", "-o", "JobID,State,ExitCode"]
    ).splitlines()
    assert f"{failed}|FAILED|3:0" in acct
    assert f"{killed}|FAILED|0:9" in acct


def test_array_tasks_respect_the_throttle_and_name_their_output(gateway: Gateway):
    job = gateway.sbatch(
        "--array=0-5%2", "-o", "arr-%A_%a.out", "--wrap", "echo $SLURM_ARRAY_TASK_ID; sleep 0.6"
    )
    most = 0
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        jobs = gateway.api(f"/v1/jobs/{job}")["jobs"]  # type: ignore[index]
        running = sum(1 for j in jobs if j["state"] == "RUNNING")
        most = max(most, running)
        if all(j["state"] == "COMPLETED" for j in jobs) and len(jobs) == 6:
            break
        time.sleep(0.05)
    assert most == 2
    for task in range(6):
        assert (gateway.workdir / f"arr-{job}_{task}.out").read_text().strip() == str(task)


def test_dependency_chains_afterok_afternotok_afterany_and_singleton(gateway: Gateway):
    first = gateway.sbatch("--wrap", "sleep 0.5")
    ok = gateway.sbatch(f"--dependency=afterok:{first}", "--wrap", "true")
    notok = gateway.sbatch(f"--dependency=afternotok:{first}", "--wrap", "true")
    anyj = gateway.sbatch(f"--dependency=afterany:{first}", "--wrap", "true")
    assert gateway.job(ok)["reason"] in ("Dependency", "None")
    gateway.wait(ok)
    gateway.wait(anyj)
    assert gateway.job(ok)["state"] == "COMPLETED"
    assert gateway.job(ok)["start_time"] >= gateway.job(first)["end_time"]
    deadline = time.monotonic() + 10
    while gateway.job(notok)["reason"] != "DependencyNeverSatisfied":
        assert time.monotonic() < deadline
        time.sleep(0.1)
    line = gateway.ok(["squeue", "-h", "-j", str(notok), "-o", "%i %t %r"]).strip()
    assert line == f"{notok} PD DependencyNeverSatisfied"
    a = gateway.sbatch("-J", "solo", "--dependency=singleton", "--wrap", "sleep 0.5")
    b = gateway.sbatch("-J", "solo", "--dependency=singleton", "--wrap", "true")
    gateway.wait(b)
    assert gateway.job(b)["start_time"] >= gateway.job(a)["end_time"]
    gateway.ok(["scancel", str(notok)])


def test_parsable_output_feeds_a_dependency_pipeline(gateway: Gateway):
    out = gateway.ok(
        'jid=$(sbatch --parsable --wrap "echo one > one.txt"); '
        'sbatch --parsable --dependency=afterok:$jid --wrap "cat one.txt > two.txt"'
    )
    second = int(out.strip())
    gateway.wait(second)
    assert (gateway.workdir / "two.txt").read_text() == "one\n"


def test_cancel_pending_and_running_jobs(gateway: Gateway):
    running = gateway.sbatch("--wrap", "sleep 30")
    gateway.wait(running, states=("RUNNING",))
    held = gateway.sbatch("-H", "--wrap", "true")
    gateway.ok(["scancel", str(running), str(held)])
    gateway.wait(running)
    gateway.wait(held)
    acct = gateway.ok(
        ["sacct", "-X", "-n", "-P", "-j", f"{running},{held}", "-o", "JobID,State"]
    ).splitlines()
    assert f"{running}|CANCELLED by 0" in acct
    assert f"{held}|CANCELLED by 0" in acct


def test_hold_and_release(gateway: Gateway):
    job = gateway.sbatch("-H", "--wrap", "true")
    time.sleep(0.5)
    assert gateway.ok(["squeue", "-h", "-j", str(job), "-o", "%t %r"]).strip() == "PD JobHeldUser"
    gateway.ok(["scontrol", "release", str(job)])
    gateway.wait(job)
    assert gateway.job(job)["state"] == "COMPLETED"
    other = gateway.sbatch("--begin=now+1hour", "--wrap", "true")
    gateway.ok(["scontrol", "hold", str(other)])
    assert gateway.job(other)["reason"] == "JobHeldAdmin"


def test_the_time_limit_sends_term_then_kill_and_records_timeout(gateway: Gateway):
    job = gateway.sbatch(
        "-t",
        "1",
        "-o",
        "tl.out",
        "--wrap",
        "trap 'echo got TERM' TERM; while true; do sleep 0.1; done",
    )
    final = gateway.wait(job, timeout=30)
    assert final["state"] == "TIMEOUT"
    assert "got TERM" in (gateway.workdir / "tl.out").read_text()
    state = gateway.ok(["sacct", "-X", "-n", "-P", "-j", str(job), "-o", "State"]).strip()
    assert state == "TIMEOUT"


def test_signal_is_delivered_before_the_time_limit(gateway: Gateway):
    script = gateway.workdir / "sig.sh"
    script.write_text(
        "#!/bin/bash\n#SBATCH -t 1 --signal=B:USR1@30 -o sig.out\n"
        "trap 'echo got USR1; exit 0' USR1\n"
        "while true; do sleep 0.05; done\n"
    )
    job = gateway.sbatch(str(script))
    final = gateway.wait(job, timeout=30)
    assert "got USR1" in (gateway.workdir / "sig.out").read_text()
    assert final["state"] == "COMPLETED"


def test_requeue_runs_the_job_again_with_its_restart_count(gateway: Gateway):
    job = gateway.sbatch(
        "-o", "rq.out", "--open-mode=append", "--wrap", "echo run $SLURM_RESTART_COUNT; sleep 2"
    )
    gateway.wait(job, states=("RUNNING",))
    time.sleep(0.3)
    gateway.ok(["scontrol", "requeue", str(job)])
    final = gateway.wait(job, timeout=60)
    assert final["state"] == "COMPLETED"
    assert final["restart_count"] == 1
    assert "run 1" in (gateway.workdir / "rq.out").read_text()


def test_output_file_names_follow_slurms_patterns(gateway: Gateway):
    job = gateway.sbatch(
        "-J", "named", "-o", "%x-%j-%u.out", "-e", "%x-%j.err", "--wrap", "echo out; echo err >&2"
    )
    gateway.wait(job)
    assert (gateway.workdir / f"named-{job}-root.out").read_text() == "out\n"
    assert (gateway.workdir / f"named-{job}.err").read_text() == "err\n"
    default = gateway.sbatch("--wrap", "echo default")
    gateway.wait(default)
    assert (gateway.workdir / f"slurm-{default}.out").read_text() == "default\n"


def test_scontrol_update_changes_a_pending_jobs_limits(gateway: Gateway):
    job = gateway.sbatch("-H", "-t", "10", "--wrap", "true")
    gateway.ok(["scontrol", "update", f"JobId={job}", "TimeLimit=5", "Nice=10"])
    show = gateway.ok(["scontrol", "show", "job", str(job)])
    assert "TimeLimit=00:05:00" in show
    assert "Nice=10" in show
    bad = gateway.run(["scontrol", "update", f"JobId={job}", "TimeLimit=abc"])
    assert bad.returncode == 1
    assert bad.stderr == "scontrol: error: Invalid TimeLimit value\n"
    gateway.ok(["scancel", str(job)])


def test_scontrol_update_time_limit_reaches_a_running_job(gateway: Gateway):
    # time_scale: a minute lasts a second here; -t 1 would end `sleep 3` with TIMEOUT
    job = gateway.sbatch("-t", "1", "--wrap", "sleep 3; echo finished")
    deadline = time.monotonic() + 30
    while gateway.job(job)["state"] != "RUNNING":
        assert time.monotonic() < deadline, "the job never started"
        time.sleep(0.05)
    gateway.ok(["scontrol", "update", f"JobId={job}", "TimeLimit=10"])  # root may raise it
    final = gateway.wait(job)
    assert final["state"] == "COMPLETED"
    assert (gateway.workdir / f"slurm-{job}.out").read_text() == "finished\n"


def test_users_act_only_on_their_own_jobs(gateway: Gateway):
    job = gateway.sbatch("--wrap", "sleep 30", user="tester", cwd=Path("/tmp"))
    assert gateway.job(job)["uid"] == 1001
    other = gateway.run(["scancel", str(job)], user="tester2")
    assert other.returncode == 210
    assert other.stderr == (
        f"scancel: error: Kill job error on job id {job}: Access/permission denied\n"
    )
    hold = gateway.run(["scontrol", "hold", str(job)], user="tester2")
    assert hold.returncode == 1
    # every user sees every job, as in Slurm
    assert str(job) in gateway.ok(["squeue", "-h", "-o", "%i"], user="tester2")
    gateway.ok(["scancel", str(job)], user="tester")
    assert gateway.wait(job)["state"] == "CANCELLED"


def test_sbatch_errors_are_slurms(gateway: Gateway):
    bad = gateway.workdir / "nobang.sh"
    bad.write_text("echo no interpreter line\n")
    r = gateway.run(["sbatch", str(bad)])
    assert r.returncode == 1
    assert r.stderr == (
        "sbatch: error: This does not look like a batch script.  The first\n"
        "sbatch: error: line must start with #! followed by the path to an interpreter.\n"
        "sbatch: error: For instance: #!/bin/sh\n"
    )
    r = gateway.run(["sbatch", "-t", "xyz", "--wrap", "true"])
    assert (r.returncode, r.stderr) == (255, "sbatch: error: Invalid --time specification\n")
    r = gateway.run(["sbatch", "-p", "nosuch", "--wrap", "true"])
    assert r.returncode == 1
    assert r.stderr == (
        "sbatch: error: invalid partition specified: nosuch\n"
        "sbatch: error: Batch job submission failed: Invalid partition name specified\n"
    )
    r = gateway.run(["sbatch", "-c", "4096", "--wrap", "true"])
    assert r.stderr == (
        "sbatch: error: CPU count per node can not be satisfied\n"
        "sbatch: error: Batch job submission failed: Requested node configuration is not "
        "available\n"
    )
    # beyond the partition's size: accepted to wait, as with Slurm's EnforcePartLimits=NO
    job = gateway.sbatch("-N", "5", "--wrap", "true")
    assert gateway.ok(["squeue", "-h", "-j", str(job), "-o", "%r"]).strip() == "PartitionNodeLimit"
    gateway.ok(["scancel", str(job)])


def test_malformed_api_requests_get_clear_errors(gateway: Gateway):
    import json
    import subprocess

    def post(path: str, body: str) -> tuple[int, object]:
        out = subprocess.run(
            [
                "curl",
                "-s",
                "-w",
                "\\n%{http_code}",
                "--unix-socket",
                str(gateway.socket),
                "-H",
                "Content-Type: application/json",
                "-d",
                body,
                f"http://x{path}",
            ],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        text, _, code = out.rpartition("\n")
        return int(code), json.loads(text)

    code, body = post("/v1/sbatch", "{not json")
    assert code == 422
    code, body = post("/v1/sbatch", json.dumps({"argv": [], "cwd": "/"}))
    assert code == 422
    assert "argv" in json.dumps(body)
    code, body = post("/v1/jobs/signal", json.dumps({"ids": ["12x"]}))
    assert code == 400
    assert body == {"detail": {"code": 2017, "message": "Invalid job id specified: 12x"}}
    code, body = post(
        "/v1/sbatch",
        json.dumps({"argv": ["sbatch", "x.sh"], "cwd": "/tmp", "script": "#!/bin/sh\r\necho\r\n"}),
    )
    assert code == 200
    assert body["exit_code"] == 1  # type: ignore[index]
    assert "DOS line breaks" in body["stderr"]  # type: ignore[index]
