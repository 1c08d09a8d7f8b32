"""`scontrol ping`, `scontrol show config` and `squeue -s` of Caldera next to the real
Slurm 22.05 test cluster: the same bytes where the values are the same (ping), the same
layout where they cannot be (configuration keys, step lines)."""

from __future__ import annotations

import re
import subprocess
import time
from datetime import datetime

import pytest

from gateway.compat.show_config import SiteConfig, show_config
from tests.support.gateway_env import Gateway
from tests.support.slurm_stack import SlurmStack, cancel, job_id_from_sbatch, slurm_env

pytestmark = pytest.mark.slurm


def _real(argv: list[str], user: str | None = None) -> subprocess.CompletedProcess[str]:
    full = argv if user is None else ["runuser", "-u", user, "--", *argv]
    return subprocess.run(full, env=slurm_env(), capture_output=True, text=True, timeout=60)


def test_scontrol_ping_prints_what_slurm_prints(cluster: SlurmStack, gateway: Gateway) -> None:
    real = _real(["scontrol", "ping"], user="tester")
    ours = gateway.run(["scontrol", "ping"], user="tester")
    assert re.fullmatch(r"Slurmctld\(primary\) at \S+ is UP\n", real.stdout), real.stdout
    assert (ours.returncode, ours.stdout, ours.stderr) == (real.returncode, real.stdout, "")


def test_show_config_keys_have_slurms_layout_and_order(cluster: SlurmStack) -> None:
    real = _real(["scontrol", "show", "config"]).stdout.splitlines()
    values = dict(
        (k.strip(), v) for k, _, v in (line.partition(" = ") for line in real) if _ == " = "
    )
    when = datetime.fromisoformat(real[0].removeprefix("Configuration data as of "))
    host = real[-1].split(" at ")[1].split(" ")[0]
    conf = SiteConfig(
        cluster=values["ClusterName"],
        def_mem_per_cpu_mb=int(values["DefMemPerCPU"]),
        job_requeue=values["JobRequeue"] == "1",
        max_array_size=int(values["MaxArraySize"]),
        gres_types=values["GresTypes"].split(","),
        host=host,
    )
    ours = show_config(conf, now=when.timestamp()).splitlines()
    positions = [real.index(line) for line in ours if line]  # ValueError: a line Slurm lacks
    assert positions == sorted(positions)
    assert ours[0] == real[0]
    assert ours[-2:] == real[-2:]


def _until_steps(argv: list[str], run: object, want: int = 1, timeout: float = 30) -> str:
    deadline = time.monotonic() + timeout
    while True:
        out = run(argv)  # type: ignore[operator]
        if len(out.strip().splitlines()) >= want or time.monotonic() > deadline:
            return str(out)
        time.sleep(0.3)


def test_squeue_steps_lines_have_slurms_layout(cluster: SlurmStack, gateway: Gateway) -> None:
    argv = ["sbatch", "--parsable", "-N1", "-t", "5", "-J", "stepper", "-o", "/dev/null"]
    sub = _real([*argv, "--wrap", "sleep 20"])  # (no slurm-N.out in the test's directory)
    assert sub.returncode == 0, sub.stderr
    real_id = job_id_from_sbatch(sub.stdout)
    ours_id = gateway.sbatch("-N1", "-t", "5", "-J", "stepper", "--wrap", "sleep 20")
    try:
        fmt = ["-h", "-o", "%i|%j|%u"]
        real_rows = _until_steps(
            ["squeue", "-s", "-j", real_id, *fmt], lambda a: _real(a).stdout
        ).splitlines()
        ours_rows = _until_steps(["squeue", "-s", "-j", str(ours_id), *fmt], gateway.ok)
        real_steps = [r.replace(real_id, "ID") for r in real_rows]
        ours_steps = [r.replace(str(ours_id), "ID") for r in ours_rows.splitlines()]
        assert "ID.batch|batch|root" in real_steps
        assert ours_steps == [s for s in real_steps if not s.startswith("ID.extern")]
        real_text = _real(["squeue", "-s", "-j", real_id]).stdout.splitlines()
        ours_text = gateway.ok(["squeue", "-s", "-j", str(ours_id)]).splitlines()
        assert ours_text[0] == real_text[0]
        width = len("         STEPID     NAME PARTITION     USER      TIME ")
        batch = next(line for line in real_text if ".batch" in line)
        mine = next(line for line in ours_text if ".batch" in line)
        assert len(mine[:width]) == len(batch[:width])
        assert mine[16:25] == batch[16:25]  # NAME column
    finally:
        cancel(real_id, env=slurm_env())
        gateway.run(["scancel", str(ours_id)])


@pytest.mark.parametrize(
    ("user", "words"),
    [
        ("tester", ["State=DRAIN", "Reason=x"]),  # not an operator
        (None, ["State=DRAIN"]),  # no reason
        (None, ["State=RESUME"]),  # not drained
        (None, ["State=DRAIN", "Reason=x", "Bogus=1"]),
    ],
)
def test_refused_node_updates_fail_as_slurms(
    cluster: SlurmStack, gateway: Gateway, user: str | None, words: list[str]
) -> None:
    """Refusals only: nothing is drained on the shared cluster."""
    real_node = _real(["sinfo", "-h", "-N", "-t", "idle", "-o", "%N", "-p", "real"]).stdout.split()
    ours_node = gateway.ok(["sinfo", "-h", "-N", "-o", "%N"]).split()[0]
    assert real_node, "no idle node on the test cluster"
    real = _real(["scontrol", "update", f"NodeName={real_node[0]}", *words], user=user)
    ours = gateway.run(["scontrol", "update", f"NodeName={ours_node}", *words], user=user)
    assert (ours.returncode, ours.stdout, ours.stderr) == (
        real.returncode,
        real.stdout,
        real.stderr,
    )


def test_an_unknown_node_is_refused_as_slurm_refuses_it(
    cluster: SlurmStack, gateway: Gateway
) -> None:
    argv = ["scontrol", "update", "NodeName=nosuch9", "State=DRAIN", "Reason=x"]
    real, ours = _real(argv), gateway.run(argv)
    assert (ours.returncode, ours.stderr) == (real.returncode, real.stderr)


def _exit_lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if "ExitCode=" in line]


def test_show_job_details_add_the_derived_exit_code(cluster: SlurmStack, gateway: Gateway) -> None:
    """`scontrol -d show job` of a finished job whose step failed (3) while its script
    ended 0: `ExitCode=0:0` then `DerivedExitCode=3:0`, as the cluster prints them; the
    same without -d has no DerivedExitCode line (-d's `JOB_GRES=`/`Nodes=... CPU_IDs=`
    lines are not compared: docs/compatibility.md)."""
    wrap = "srun sh -c 'exit 3'; true"
    sub = _real(["sbatch", "--parsable", "-N1", "-t", "5", "-o", "/dev/null", "--wrap", wrap])
    assert sub.returncode == 0, sub.stderr
    real_id = job_id_from_sbatch(sub.stdout)
    ours_id = gateway.sbatch("-N1", "-t", "5", "-o", "/dev/null", "--wrap", wrap)
    gateway.wait(ours_id, timeout=60)
    deadline = time.monotonic() + 60
    while "JobState=COMPLETED" not in _real(["scontrol", "show", "job", real_id]).stdout:
        assert time.monotonic() < deadline, "the real job did not complete"
        time.sleep(0.5)
    for argv in (["-d", "show", "job"], ["show", "job", "-d"], ["show", "job"]):
        real = _exit_lines(_real(["scontrol", *argv, real_id]).stdout)
        ours = _exit_lines(gateway.ok(["scontrol", *argv, str(ours_id)]))
        assert ours == real, argv
    assert real[-1].endswith("ExitCode=0:0")  # the cluster as meant, without -d
    assert "   DerivedExitCode=3:0" in _exit_lines(
        _real(["scontrol", "-d", "show", "job", real_id]).stdout
    )
