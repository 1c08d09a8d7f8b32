"""The submitter's resource limits reach the job, as Slurm's default
PropagateResourceLimits=ALL carries them (checked on the real test cluster: `ulimit -n 777`
before sbatch gives 777 in the job, and no SLURM_RLIMIT_* is left in its environment).
The gateway itself runs with its open-files limit raised: a job must not inherit that."""

from __future__ import annotations

import resource

from tests.support.gateway_env import Gateway


def test_the_submitters_soft_limits_reach_the_job_and_leave_its_environment(gateway: Gateway):
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    assert hard > 777  # the daemon raises its soft limit to this; the job must get 777
    out = gateway.workdir / "limits.out"
    job = int(
        gateway.ok(
            "ulimit -S -n 777; ulimit -S -s 4096; ulimit -S -c 0; "
            f"sbatch --parsable -o {out} "
            "--wrap 'echo nofile=$(ulimit -n) stack=$(ulimit -s) core=$(ulimit -c); "
            'env | grep -c ^SLURM_RLIMIT_ || true; srun sh -c "echo task=$(ulimit -n)"\'',
            user="tester",
        ).strip()
    )
    record = gateway.wait(job)
    assert record["state"] == "COMPLETED", record
    lines = out.read_text().splitlines()
    assert lines[0] == "nofile=777 stack=4096 core=0"
    assert lines[1] == "0"  # applied, then removed from the environment
    assert "task=777" in lines


def test_a_job_submitted_with_other_limits_gets_those(gateway: Gateway):
    out = gateway.workdir / "limits2.out"
    job = int(
        gateway.ok(
            f"ulimit -S -n 900; sbatch --parsable -o {out} --wrap 'ulimit -n'", user="tester"
        ).strip()
    )
    gateway.wait(job)
    assert out.read_text().strip() == "900"
