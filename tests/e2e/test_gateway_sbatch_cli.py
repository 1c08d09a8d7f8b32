"""The sbatch command's script handling: the one-trip guess (gateway/cli/sbatch_cmd.py) is
checked by the gateway, and a wrong guess ends as if the command had asked first."""

from __future__ import annotations

import re

from tests.support.gateway_env import Gateway


def _show(gw: Gateway, job_id: int) -> dict[str, str]:
    text = gw.ok(["scontrol", "show", "job", str(job_id)])
    return dict(re.findall(r"(\w+)=(\S*)", text))


def test_the_script_is_the_operand_sbatch_would_pick(gateway: Gateway) -> None:
    w = gateway.workdir
    (w / "job.sh").write_text("#!/bin/sh\n#SBATCH -J fromfile\necho hi\n")
    (w / "decoy.sh").write_text("#!/bin/sh\necho decoy\n")  # a `#!` file, but an option's value
    kw = {"cwd": w}
    plain = gateway.sbatch("-H", "job.sh", "a1", **kw)
    decoy = gateway.sbatch("-H", "-o", "decoy.sh", "job.sh", **kw)
    named = gateway.sbatch("-H", "-J", "--wrap", "job.sh", **kw)
    wrapped = gateway.sbatch("-H", "--wrap", "echo wrapped", **kw)
    stdin = int(
        gateway.ok(["sbatch", "--parsable", "-H"], stdin=(w / "job.sh").read_text(), cwd=w).strip()
    )
    assert _show(gateway, plain)["Command"] == f"{w}/job.sh"
    assert _show(gateway, plain)["JobName"] == "fromfile"
    assert _show(gateway, decoy)["StdOut"] == f"{w}/decoy.sh"
    assert _show(gateway, decoy)["Command"] == f"{w}/job.sh"
    assert _show(gateway, named)["JobName"] == "--wrap"
    assert _show(gateway, named)["Command"] == f"{w}/job.sh"
    assert _show(gateway, wrapped)["JobName"] == "wrap"
    assert _show(gateway, stdin)["JobName"] == "fromfile"


def test_errors_and_early_exits_match_sbatch(gateway: Gateway) -> None:
    w = gateway.workdir
    (w / "job.sh").write_text("#!/bin/sh\ntrue\n")
    r = gateway.run(["sbatch", "--time=abc", "job.sh"], cwd=w)
    assert (r.returncode, r.stdout, r.stderr) == (
        255,
        "",
        "sbatch: error: Invalid --time specification\n",
    )
    r = gateway.run(["sbatch", "missing.sh"], cwd=w)
    assert (r.returncode, r.stderr) == (1, "sbatch: error: Unable to open file missing.sh\n")
    r = gateway.run(["sbatch", "--version"], cwd=w)
    assert r.returncode == 0
    assert r.stdout == "slurm-wlm 22.05.8\n"  # Debian's build, as the test cluster says it
    r = gateway.run(["sbatch", "--help", "job.sh"], cwd=w)
    assert r.returncode == 0
    assert r.stdout.startswith("Usage: sbatch")


def test_wait_returns_the_jobs_exit_code(gateway: Gateway) -> None:
    r = gateway.run(["sbatch", "--wait", "--wrap", "exit 3"], cwd=gateway.workdir)
    assert r.returncode == 3
    assert r.stdout.startswith("Submitted batch job ")
    job_id = int(r.stdout.split()[-1])
    assert gateway.job(job_id)["state"] == "FAILED"
    # a job its signal ended: 1, not the signal (the test cluster's sbatch: 1 for `kill -9`)
    r = gateway.run(["sbatch", "--wait", "--wrap", "kill -9 $$"], cwd=gateway.workdir)
    assert r.returncode == 1, r.stderr
