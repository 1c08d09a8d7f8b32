"""Which refused submissions use a job id, and what is left of them, on Caldera's local
site (described by the test cluster's slurm.conf) and on the real Slurm 22.05 cluster.

What the cluster does: slurmctld numbers a job late in `_job_create`, so most refusals
(an unknown licence, node, partition or gres) use no id; an unknown feature uses one
(checked after numbering) and leaves nothing; a request no node configuration can hold
(`_select_nodes_parts`, after the record is made) uses one and leaves the job FAILED,
Reason=BadConstraints, ExitCode 0:1 in scontrol and 1:0 in sacct, "None assigned";
--test-only uses one too. Caldera used an id for every refusal and kept nothing.
"""

from __future__ import annotations

import re
import subprocess
import time
from collections.abc import Callable

import pytest

from tests.support.gateway_env import running_gateway
from tests.support.real_slurm import run_real
from tests.support.slurm_stack import SlurmStack, cancel, job_id_from_sbatch

pytestmark = pytest.mark.slurm

Run = Callable[[list[str]], subprocess.CompletedProcess[str]]

_REFUSED = (
    ("-L", "nosuch"),
    ("-w", "nosuch"),
    ("-C", "nosuch"),
    ("--gres=nosuch:1",),
    ("-p", "nosuch"),
    ("-p", "real", "--mem=5000"),
    ("-p", "real", "-c3"),
    ("-p", "real", "-c3", "-H"),  # held: accepted, whatever its size
    ("--test-only", "-p", "real"),
)
_ACCT = "JobName,Partition,State,ExitCode,NodeList,AllocCPUS,Elapsed"
_SHOWN = ("JobState", "Reason", "ExitCode", "RunTime", "NodeList", "Partition", "NumCPUs")


def _held(run: Run) -> int:
    return int(job_id_from_sbatch(run(["sbatch", "--parsable", "-H", "--wrap", "true"]).stdout))


def _scenario(run: Run) -> list[str]:
    seen: list[str] = []
    ids = [_held(run)]
    for args in _REFUSED:
        done = run(["sbatch", *args, "--wrap", "true"])
        said = re.sub(r"\d+", "N", done.stdout + done.stderr)
        ids.append(_held(run))
        gap = ids[-1] - ids[-2] - 1
        seen.append(f"{' '.join(args)}: rc={done.returncode} ids used={gap} {said!r}")
        if gap and "-H" not in args and "--test-only" not in args:
            failed = str(ids[-1] - 1)
            acct = ["sacct", "-X", "-n", "-P", "-j", failed, "-o", _ACCT]
            # slurmdbd first holds a bare record (JobName "allocation", no partition) and
            # completes it some seconds later; a feature's refusal leaves none
            deadline = time.monotonic() + (5 if "-C" in args else 30)
            while time.monotonic() < deadline and run(acct).stdout.strip()[:11] in (
                "",
                "allocation|",
            ):
                time.sleep(0.5)
            seen.append(run(acct).stdout.strip())
            text = run(["scontrol", "-o", "show", "job", failed]).stdout
            got = dict(re.findall(r"(\w+)=(\S*)", text))
            seen.append(" ".join(f"{k}={got.get(k, '?')}" for k in _SHOWN))
    for job in range(ids[0], ids[-1] + 1):
        cancel(str(job)) if run is run_real else run(["scancel", str(job)])
    return seen


def test_refusals_use_ids_and_leave_records_as_on_slurm(cluster: SlurmStack) -> None:
    theirs = _scenario(run_real)
    # what the cluster did, so that agreeing means something
    assert any("--mem=5000: rc=1 ids used=1" in line for line in theirs), theirs
    assert "wrap|real|FAILED|1:0|None assigned|3|00:00:00" in theirs
    config = f'[local]\nslurm_conf = "{cluster.slurm_conf}"\n'
    with running_gateway(config) as gw:
        ours = _scenario(lambda argv: gw.run(argv))
    assert ours == theirs
