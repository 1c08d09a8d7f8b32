"""scontrol ping, node drain/resume, squeue -s, and the times scontrol shows while a job
waits and runs, through the installed commands against a real gateway."""

from __future__ import annotations

import os
import socket
import subprocess
import time
from datetime import datetime

from tests.support.gateway_env import CALDERA, Gateway


def _node(gateway: Gateway) -> str:
    return gateway.ok(["sinfo", "-h", "-N", "-o", "%N"]).split()[0]


def _field(text: str, key: str) -> str:
    return next(w for w in text.split() if w.startswith(key + "=")).split("=", 1)[1]


def _until(gateway: Gateway, argv: list[str], want: str, timeout: float = 30) -> str:
    deadline = time.monotonic() + timeout
    while True:
        out = gateway.ok(argv)
        if out.strip() == want or time.monotonic() > deadline:
            return out.strip()
        time.sleep(0.2)


def _restart(gateway: Gateway) -> None:
    env = {**os.environ, "CALDERA_HOME": str(gateway.home), "CALDERA_SOCKET": str(gateway.socket)}
    for verb in ("down", "up"):
        r = subprocess.run([*CALDERA, verb], env=env, capture_output=True, text=True, timeout=60)
        assert r.returncode == 0, r.stderr


def test_scontrol_ping_reports_the_controller_up(gateway: Gateway) -> None:
    r = gateway.run(["scontrol", "ping"], user="tester")
    host = socket.gethostname().split(".")[0]
    assert (r.returncode, r.stdout, r.stderr) == (0, f"Slurmctld(primary) at {host} is UP\n", "")


def test_only_operators_drain_and_unknown_nodes_are_refused(gateway: Gateway) -> None:
    node = _node(gateway)
    r = gateway.run(
        ["scontrol", "update", f"NodeName={node}", "State=DRAIN", "Reason=x"], user="tester"
    )
    assert (r.returncode, r.stderr) == (1, "slurm_update error: Invalid user id\n")
    r = gateway.run(["scontrol", "update", "NodeName=nosuch9", "State=DRAIN", "Reason=x"])
    assert (r.returncode, r.stderr) == (1, "slurm_update error: Invalid node name specified\n")
    r = gateway.run(["scontrol", "update", f"NodeName={node}", "State=DRAIN"])
    assert r.returncode == 1
    assert r.stderr.startswith("You must specify a reason when DOWNING or DRAINING a node.")
    r = gateway.run(["scontrol", "update", f"NodeName={node}", "State=RESUME"])
    assert (r.returncode, r.stderr) == (1, "slurm_update error: Invalid node state specified\n")
    assert gateway.ok(["sinfo", "-h", "-N", "-o", "%T"]).strip() == "idle"


def test_a_drained_node_takes_no_job_until_it_is_resumed(gateway: Gateway) -> None:
    node = _node(gateway)
    running = gateway.sbatch("-t", "10", "--wrap", "sleep 3")
    _until(gateway, ["squeue", "-h", "-j", str(running), "-o", "%T"], "RUNNING")
    gateway.ok(["scontrol", "update", f"NodeName={node}", "State=DRAIN", "Reason=disk swap"])
    assert gateway.ok(["sinfo", "-h", "-N", "-o", "%T|%t|%E"]).strip() == "draining|drng|disk swap"
    shown = gateway.ok(["scontrol", "show", "node", node])
    assert "+DRAIN " in shown, shown
    assert "\n   Reason=disk swap [root@" in shown, shown
    waiting = gateway.sbatch("--wrap", "true", user="tester")
    assert _until(gateway, ["squeue", "-h", "-j", str(waiting), "-o", "%T %r"], "x", 3) == (
        f"PENDING ReqNodeNotAvail, UnavailableNodes:{node}"
    )
    gateway.wait(running)
    assert _until(gateway, ["sinfo", "-h", "-N", "-o", "%T"], "drained") == "drained"
    reasons = gateway.ok(["sinfo", "-R"]).splitlines()
    assert reasons[0] == "REASON               USER      TIMESTAMP           NODELIST"
    assert reasons[1].startswith("disk swap            root      20")
    assert reasons[1].endswith(node)
    assert gateway.job(waiting)["state"] == "PENDING"
    _restart(gateway)  # the drain is durable, as slurmctld's node state file keeps it
    assert gateway.ok(["sinfo", "-h", "-N", "-o", "%T|%E"]).strip() == "drained|disk swap"
    time.sleep(1)
    assert gateway.job(waiting)["state"] == "PENDING"
    gateway.ok(["scontrol", "update", f"NodeName={node}", "State=RESUME"])
    assert gateway.wait(waiting)["state"] == "COMPLETED"
    assert gateway.ok(["sinfo", "-h", "-N", "-o", "%T"]).strip() in ("idle", "mixed")


def test_squeue_steps_and_the_times_of_a_running_and_a_begin_job(gateway: Gateway) -> None:
    job = gateway.sbatch("-t", "30", "-J", "stepper", "--wrap", "sleep 4")
    _until(gateway, ["squeue", "-h", "-j", str(job), "-o", "%T"], "RUNNING")
    steps = ["squeue", "-s", "-h", "-o", "%i %j"]
    assert _until(gateway, steps, f"{job}.batch batch") == f"{job}.batch batch"
    alloc, idle, other, total = gateway.ok(["sinfo", "-h", "-N", "-o", "%C"]).strip().split("/")
    assert (int(alloc), int(other)) == (1, 0)
    assert int(idle) == int(total) - 1
    lines = gateway.ok(["squeue", "-s"]).splitlines()
    assert lines[0] == "         STEPID     NAME PARTITION     USER      TIME NODELIST"
    assert lines[1].split()[:4] == [f"{job}.batch", "batch", "debug", "root"]
    step = gateway.ok(["scontrol", "show", "step", f"{job}.batch"])
    assert step.startswith(f"StepId={job}.batch UserId=0 StartTime=20"), step
    assert "\n   Nodes=1 CPUs=0 Tasks=1 Name=batch Network=(null)\n" in step
    missing = gateway.run(["scontrol", "show", "step", f"{job}.7"])
    assert (missing.returncode, missing.stderr) == (1, f"Job step {job}.7 not found\n")
    shown = gateway.ok(["scontrol", "show", "job", str(job)])
    start = datetime.fromisoformat(_field(shown, "StartTime"))
    end = datetime.fromisoformat(_field(shown, "EndTime"))
    assert (end - start).total_seconds() == 30 * 60
    begin = gateway.sbatch("--begin=2030-01-02T03:04:05", "--wrap", "true")
    shown = gateway.ok(["scontrol", "show", "job", str(begin)])
    assert _field(shown, "EligibleTime") == "2030-01-02T03:04:05"
    assert _field(shown, "EndTime") == "Unknown"
    gateway.ok(["scancel", str(begin), str(job)])
    gateway.wait(job)
    assert gateway.ok(["scontrol", "show", "step"]) == "No job steps in the system\n"


def test_scontrol_ping_without_a_gateway_reports_it_down(gateway: Gateway) -> None:
    host = socket.gethostname().split(".")[0]
    env = {"CALDERA_SOCKET": str(gateway.home / "absent.sock")}
    r = gateway.run(["scontrol", "ping"], user="tester", env=gateway.env(env))
    assert (r.returncode, r.stdout) == (1, f"Slurmctld(primary) at {host} is DOWN\n")
    r = gateway.run(["scontrol", "ping"], env=gateway.env(env))
    assert r.returncode == 1
    assert r.stdout.splitlines()[1:] == [
        "*" * 41,
        "** RESTORE SLURMCTLD DAEMON TO SERVICE **",
        "*" * 41,
    ]
