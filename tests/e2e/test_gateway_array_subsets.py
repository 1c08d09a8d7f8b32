"""Array task subsets through the installed commands: holding, releasing and showing some
pending tasks of an array acts on those tasks only, as slurmctld does (it splits them off the
array's pending record), and ArrayTaskThrottle can be changed after submission.
"""

from __future__ import annotations

from tests.support.gateway_env import Gateway


def _reasons(gateway: Gateway, job: int) -> dict[str, str]:
    out = gateway.ok(["squeue", "-h", "-r", "-j", str(job), "-o", "%i %r"])
    return dict(line.split(" ", 1) for line in out.splitlines())


def test_hold_release_and_show_act_on_the_named_pending_tasks(gateway: Gateway) -> None:
    job = gateway.sbatch("--array=0-99", "--begin=now+1hour", "--wrap", "true")
    gateway.ok(["scontrol", "hold", f"{job}_[80-89]"])
    reasons = _reasons(gateway, job)
    held = {f"{job}_{i}" for i in range(80, 90)}
    assert {k for k, v in reasons.items() if v == "JobHeldAdmin"} == held
    assert set(reasons) == {f"{job}_{i}" for i in range(100)}
    assert {v for k, v in reasons.items() if k not in held} == {"BeginTime"}

    gateway.ok(["scontrol", "release", f"{job}_[80-84]"])
    reasons = _reasons(gateway, job)
    assert {k for k, v in reasons.items() if v == "JobHeldAdmin"} == {
        f"{job}_{i}" for i in range(85, 90)
    }

    shown = gateway.ok(["scontrol", "show", "job", "-o", f"{job}_50"])
    assert shown.count("\n") == 1
    assert f"ArrayJobId={job} ArrayTaskId=50 " in shown
    missing = gateway.run(["scontrol", "show", "job", f"{job}_500"])
    # real scontrol 22.05, for a task that an existing array does not have (checked on the
    # test cluster): stdout, exit 1
    assert (missing.returncode, missing.stdout, missing.stderr) == (
        1,
        f"Job {job}_500 not found\n",
        "",
    )
    gateway.ok(["scancel", str(job)])


def test_array_task_throttle_is_updated_on_every_record(gateway: Gateway) -> None:
    job = gateway.sbatch("--array=0-9%2", "--begin=now+1hour", "--wrap", "true")
    gateway.ok(["scontrol", "hold", f"{job}_3"])  # a record of its own
    gateway.ok(["scontrol", "update", f"JobId={job}", "ArrayTaskThrottle=5"])
    shown = gateway.ok(["scontrol", "show", "job", "-o", str(job)])
    assert f"ArrayJobId={job} ArrayTaskId=0-2,4-9%5 ArrayTaskThrottle=5 " in shown, shown
    assert f"ArrayJobId={job} ArrayTaskId=3 ArrayTaskThrottle=5 " in shown, shown
    gateway.ok(["scontrol", "update", f"JobId={job}", "ArrayTaskThrottle=0"])
    shown = gateway.ok(["scontrol", "show", "job", "-o", str(job)])
    assert f"ArrayJobId={job} ArrayTaskId=0-2,4-9 JobName" in shown, shown
    assert f"ArrayJobId={job} ArrayTaskId=3 JobName" in shown, shown
    gateway.ok(["scancel", str(job)])
