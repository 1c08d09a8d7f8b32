"""priority/basic's numbers on the real test cluster and on Caldera's local backend: the
same submissions, releases, requeue and nice changes, the same priorities (as offsets from
the first job's: slurmctld's count starts where its earlier jobs left it).

What the cluster (Slurm 22.05) printed, from B's priority down: B (an array) ...040, held
C nothing, D ...039, release C ...038, E ...037, hold+release A ...036, F ...035, release of
task G_1 of a held array ...034 (the rest of G stays 0), H ...033, a refused sbatch
nothing, I ...032, a job run then requeued keeps ...031, J ...030; `scontrol update Nice=10`
of D ...029 (039-10); `--nice=7` K ...022 (base ...029); L ...028; a `--test-only` sbatch
and a salloc take a number each (X ...027, test-only, Y ...025, salloc, Z ...023).
The count is the cluster's: nothing else may submit to it meanwhile (one run beside other
differential tests was one number off from J on).
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.support.gateway_env import running_gateway
from tests.support.slurm_priority_count import fresh_priority_count
from tests.support.slurm_stack import SlurmStack, slurm_env

pytestmark = pytest.mark.slurm

SITE = """
[[nodes]]
name = "node01"
cpus = 2
memory_mb = 2000
[[partitions]]
name = "debug"
nodes = ["node01"]
default = true
"""

Run = Callable[[list[str]], subprocess.CompletedProcess[str]]
LATER = "--begin=now+1hour"


def _session(run: Run) -> dict[str, str]:
    """The sequence; each named job's squeue priority (%Q) as an offset from B's."""
    ids: dict[str, str] = {}

    def sbatch(name: str, *options: str) -> None:
        done = run(["sbatch", "--parsable", "-o", "/dev/null", *options, "--wrap", "true"])
        if name:
            assert done.returncode == 0, done.stderr
            ids[name] = done.stdout.strip().split(";")[0]

    def ok(*argv: str) -> None:
        done = run(list(argv))
        assert done.returncode == 0, (argv, done.stderr)

    sbatch("A", LATER)
    sbatch("B", LATER, "--array=0-3")
    sbatch("C", "-H")
    sbatch("D", LATER)
    ok("scontrol", "release", ids["C"])
    sbatch("E", LATER)
    ok("scontrol", "hold", ids["A"])
    ok("scontrol", "release", ids["A"])
    sbatch("F", LATER)
    sbatch("G", "-H", "--array=0-3")
    ok("scontrol", "release", f"{ids['G']}_1")
    sbatch("H", LATER)
    assert run(["sbatch", "-p", "nosuch", "--wrap", "true"]).returncode == 1
    sbatch("I", LATER)
    done = run(["sbatch", "--parsable", "-o", "/dev/null", "--wrap", "sleep 60"])
    ids["R"] = done.stdout.strip()
    deadline = time.monotonic() + 30
    while "RUNNING" not in run(["squeue", "-h", "-j", ids["R"], "-o", "%T"]).stdout:
        assert time.monotonic() < deadline, "R never started"
        time.sleep(0.3)
    ok("scontrol", "requeue", ids["R"])
    sbatch("J", LATER)
    ok("scontrol", "update", f"jobid={ids['D']}", "nice=10")
    sbatch("K", LATER, "--nice=7")
    sbatch("L", LATER)
    assert run(["sbatch", "--test-only", "--wrap", "true"]).returncode == 0
    sbatch("Y", LATER)
    assert run(["salloc", "-N1", "true"]).returncode == 0
    sbatch("Z", LATER)
    listed = run(["squeue", "-h", "-t", "all", "-o", "%i %Q", "-j", ",".join(ids.values())])
    prio = dict(line.split() for line in listed.stdout.splitlines())
    run(["scancel", *ids.values()])
    base = int(prio[f"{ids['B']}_[0-3]"])
    out: dict[str, str] = {}
    for shown, value in prio.items():
        name = next(n for n, i in ids.items() if shown.split("_")[0] == i)
        out[name + shown.removeprefix(ids[name])] = str(int(value) - base if int(value) else 0)
    return out


def test_priority_basic_counts_as_slurmctld(cluster: SlurmStack) -> None:
    fresh_priority_count(cluster)
    real_dir = Path(tempfile.mkdtemp(prefix="prio-real-", dir="/tmp"))
    real_dir.chmod(0o1777)
    user = ["runuser", "-u", "tester", "--"]
    try:
        theirs = _session(
            lambda a: subprocess.run(
                [*user, "env", f"SLURM_CONF={slurm_env()['SLURM_CONF']}", *a],
                cwd=real_dir,
                capture_output=True,
                text=True,
                timeout=120,
            )
        )
    finally:
        shutil.rmtree(real_dir, ignore_errors=True)
    with running_gateway(SITE, "caldera-prio-") as gw:
        ours = _session(lambda a: gw.run(a, user="tester"))
    assert theirs["D"] == "-11"  # B, then D one lower, re-niced by 10: the cluster as meant
    assert ours == theirs
