"""A priority set by hand, on the real test cluster and on Caldera's local backend: the
same commands as root (an operator) and as a user, the same answers and priorities.

What the cluster (Slurm 22.05, priority/basic) did: root's `sbatch --priority=100` pends at
Priority=100 and keeps it (`--priority=0` is never sent: counted); root's `scontrol update
Priority=50` sets 50 silently (rc 0) and a later `Nice=10` leaves it at 50; hold and release
give it a new number of the count. A user's `sbatch --priority=100` is accepted and ignored
(the count's number); the user may lower their job's priority (rc 1, "Changes to job
priority are not persistent, change nice instead for job N", and the priority is lowered),
not raise it ("Access/permission denied for job N"); `Priority=abc` is scontrol's own
"Invalid Priority value: abc". `Priority=0` holds the job (rc 0): JobHeldUser by its user,
JobHeldAdmin by root; again on the held job is a silent no-op; a release gives a new number.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import tempfile
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.differential.test_priority_vs_slurm import SITE  # one node, one partition
from tests.support.gateway_env import running_gateway
from tests.support.slurm_priority_count import COUNTED, fresh_priority_count
from tests.support.slurm_stack import SlurmStack, slurm_env

pytestmark = pytest.mark.slurm

Run = Callable[[list[str], str | None], subprocess.CompletedProcess[str]]
LATER = "--begin=now+1hour"


def _session(run: Run) -> list[str]:
    """Each command's rc and messages (job ids as names), each job's priority after it: the
    set number, or `counted` for one of priority/basic's count."""
    ids: dict[str, str] = {}
    seen: list[str] = []

    def sbatch(name: str, user: str | None, *options: str) -> None:
        argv = ["sbatch", "--parsable", "-o", "/dev/null", LATER, *options, "--wrap", "true"]
        done = run(argv, user)
        assert done.returncode == 0, done.stderr
        ids[name] = done.stdout.strip().split(";")[0]

    def priorities() -> str:
        listed = run(["squeue", "-h", "-o", "%i %Q", "-j", ",".join(ids.values())], None)
        prio = dict(line.split() for line in listed.stdout.splitlines())
        named = {n: prio.get(i, "gone") for n, i in sorted(ids.items())}
        return " ".join(f"{n}={p if int(p) < COUNTED else 'counted'}" for n, p in named.items())

    def step(user: str | None, *argv: str) -> None:
        done = run([a.format(**ids) for a in argv], user)
        text = done.stdout + done.stderr
        for name, job in ids.items():
            text = re.sub(rf"\b{job}\b", name, text)
        seen.append(f"{user or 'root'}: {' '.join(argv)} -> rc={done.returncode} {text!r}")
        seen.append(priorities())

    sbatch("P", None, "--priority=100")
    sbatch("Q", None)
    sbatch("T", "tester", "--priority=100")
    sbatch("Z", None, "--priority=0")  # sbatch sends no 0: counted
    seen.append(priorities())
    step(None, "scontrol", "update", "jobid={Q}", "priority=50")
    step(None, "scontrol", "update", "jobid={Q}", "nice=10")
    step(None, "scontrol", "hold", "{P}")
    step(None, "scontrol", "release", "{P}")
    step("tester", "scontrol", "update", "jobid={T}", "priority=5")
    step("tester", "scontrol", "update", "jobid={T}", "priority=1000")
    step("tester", "scontrol", "update", "jobid={T}", "priority=abc")
    step("tester", "scontrol", "update", "jobid={T}", "priority=0")
    step("tester", "scontrol", "update", "jobid={T}", "priority=0")
    step("tester", "scontrol", "release", "{T}")
    step(None, "scontrol", "update", "jobid={Z}", "priority=0")
    step("tester", "scontrol", "update", "jobid={Z}", "priority=7")
    step(None, "scontrol", "release", "{Z}")
    # T's user-lowered 5 is not a set priority: a slurmctld (re)started while T is in its
    # state (MinJobAge) would count every later job down from 4 (job_mgr.c's lowest_prio),
    # for this cluster's every later test. Set by root (to another value: the same one is
    # a no-op) it is ignored there.
    run(["scontrol", "update", f"jobid={ids['T']}", "priority=1000"], None)
    run(["scancel", *ids.values()], None)
    return seen


def test_a_priority_set_by_an_operator_or_a_user_as_slurmctld(cluster: SlurmStack) -> None:
    fresh_priority_count(cluster)
    real_dir = Path(tempfile.mkdtemp(prefix="prio-set-real-", dir="/tmp"))
    real_dir.chmod(0o1777)

    def real(argv: list[str], user: str | None) -> subprocess.CompletedProcess[str]:
        conf = f"SLURM_CONF={slurm_env()['SLURM_CONF']}"
        as_user = ["runuser", "-u", user, "--", "env", conf] if user else []
        return subprocess.run(
            [*as_user, *argv],
            cwd=real_dir,
            env=slurm_env(),
            capture_output=True,
            text=True,
            timeout=120,
        )

    try:
        theirs = _session(real)
    finally:
        shutil.rmtree(real_dir, ignore_errors=True)
    with running_gateway(SITE, "caldera-prio-set-") as gw:
        ours = _session(lambda a, user: gw.run(a, user=user))
    assert theirs[0] == "P=100 Q=counted T=counted Z=counted"  # the cluster as meant
    assert ours == theirs
