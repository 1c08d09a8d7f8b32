"""What slurmctld accepts, refuses and leaves pending at submission, next to Caldera.

The same `sbatch` runs as `tester` against the real test cluster's `real` partition
(node[01-04]: 2 CPUs, 2000 MB each, node03 2 GPUs, node04 4; EnforcePartLimits=NO) and
against a Caldera gateway whose local site has the same nodes and partition. Compared:
exit status and stderr byte for byte, the pending reason, `TimeLimit` of a negative
`--time`, and what becomes of a dependency on a job that does not exist.
"""

from __future__ import annotations

import re
import subprocess
import tempfile
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest

from tests.support.gateway_env import Gateway, discard_gateway, start_gateway
from tests.support.slurm_stack import SlurmStack, cancel

pytestmark = pytest.mark.slurm

_NODES = "".join(
    f'[[nodes]]\nname = "node0{i}"\ncpus = 2\nmemory_mb = 2000\ngpus = {g}\nfeatures = [{feat}]\n'
    for i, g, feat in (
        (1, 0, '"real"'),
        (2, 0, '"real"'),
        (3, 2, '"real"'),
        (4, 4, '"real", "a100"'),
    )
)
CONFIG = (
    "def_mem_per_cpu_mb = 100\n"
    + _NODES
    + '[[partitions]]\nname = "real"\ndefault = true\n'
    + 'nodes = ["node01", "node02", "node03", "node04"]\n'
)


class Pair:
    """Runs one command as `tester` on real Slurm and on Caldera."""

    def __init__(self, cluster: SlurmStack, gw: Gateway, workdir: Path) -> None:
        self.cluster, self.gw, self.workdir = cluster, gw, workdir
        self.real_ids: list[str] = []

    def real(self, argv: Sequence[str]) -> subprocess.CompletedProcess[str]:
        env = [f"{k}={v}" for k, v in self.cluster.env.items()]
        return subprocess.run(
            ["runuser", "-u", "tester", "--", "env", *env, *argv],
            cwd=self.workdir,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )

    def ours(self, argv: Sequence[str]) -> subprocess.CompletedProcess[str]:
        return self.gw.run(list(argv), user="tester", cwd=self.workdir)

    def sbatch(
        self, *args: str, ours: Sequence[str] | None = None
    ) -> tuple[tuple[int, str, str], ...]:
        """(exit, stdout job id or '', stderr) from real Slurm, then from Caldera (given
        `ours`, Caldera's options instead of `args`)."""
        out = []
        for run, opts in ((self.real, args), (self.ours, args if ours is None else ours)):
            argv = ["sbatch", "--parsable", "-p", "real", "-o", "/dev/null", *opts, "--wrap=true"]
            r = run(argv)
            job = r.stdout.strip().split(";")[0] if r.returncode == 0 else ""
            if run == self.real and job:
                self.real_ids.append(job)
            out.append((r.returncode, job, r.stderr))
        return tuple(out)

    def squeue(self, run: str, job: str, fmt: str) -> str:
        r = (self.real if run == "real" else self.ours)(["squeue", "-h", "-j", job, "-o", fmt])
        return r.stdout.strip()

    def field(self, run: str, job: str, name: str) -> str:
        r = (self.real if run == "real" else self.ours)(["scontrol", "show", "job", job])
        found = re.search(rf"\b{re.escape(name)}=(\S*)", r.stdout)
        assert found, f"{run}: no {name} in {r.stdout!r} {r.stderr!r}"
        return found.group(1)

    def reason(self, run: str, job: str, want: str) -> str:
        """The pending reason, waiting (a few seconds) for a scheduling pass to set it."""
        deadline = time.monotonic() + 8
        while True:
            got = self.squeue(run, job, "%r")
            if got == want or time.monotonic() > deadline:
                return got
            time.sleep(0.2)

    def state(self, run: str, job: str, want: str) -> str:
        deadline = time.monotonic() + 30
        while True:
            r = (self.real if run == "real" else self.ours)(
                ["sacct", "-n", "-X", "-P", "-j", job, "-o", "State"]
            )
            got = r.stdout.strip()
            if got == want or time.monotonic() > deadline:
                return got
            time.sleep(0.3)


@pytest.fixture(scope="module")
def pair(cluster: SlurmStack) -> Iterator[Pair]:
    base = Path(tempfile.mkdtemp(prefix="h9-caldera-limits-", dir="/tmp"))
    gw = start_gateway(base, CONFIG)
    workdir = base / "work"
    p = Pair(cluster, gw, workdir)
    try:
        yield p
    finally:
        cancel(*p.real_ids, env=cluster.env)
        gw.run(["scancel", "-u", "tester"])
        discard_gateway(gw, base)


# (options, the reason the accepted job waits with) - both Slurm and Caldera accept these
ACCEPTED = (
    (("--hold", "--mem=100T"), "JobHeldUser"),
    (("--hold", "-c", "3"), "JobHeldUser"),
    (("--hold", "--gres=gpu:5"), "JobHeldUser"),
    (("--hold", "-N", "5"), "JobHeldUser"),
    (("-N", "5"), "PartitionNodeLimit"),
    (("-N", "5", "--mem=5000"), "PartitionNodeLimit"),
    (("-n", "9"), "PartitionConfig"),
    (("-n", "9", "-c", "3"), "PartitionConfig"),
)

REFUSED = (
    ("--mem=3000",),
    ("-c", "3"),
    ("--gres=gpu:5",),
    ("-N", "2", "--ntasks-per-node=3"),
    ("-n", "3", "-N", "1"),
    ("--mem-per-cpu=1500", "-c", "2"),
    ("-N", "3", "--gres=gpu:1"),
    ("--hold", "--constraint=nosuch"),
    ("--hold", "-w", "nosuch01"),
)


@pytest.mark.parametrize(("args", "reason"), ACCEPTED, ids=[" ".join(a) for a, _ in ACCEPTED])
def test_accepted_beyond_the_partition_or_held_waits_with_slurms_reason(
    pair: Pair, args: tuple[str, ...], reason: str
) -> None:
    (rc_r, job_r, err_r), (rc_o, job_o, err_o) = pair.sbatch(*args)
    assert (rc_r, err_r) == (0, ""), "real Slurm is expected to accept"
    assert (rc_o, err_o) == (0, "")
    assert pair.reason("real", job_r, reason) == reason
    assert pair.reason("ours", job_o, reason) == reason


@pytest.mark.parametrize("args", REFUSED, ids=[" ".join(a) for a in REFUSED])
def test_refused_when_no_node_could_ever_hold_it_with_slurms_words(
    pair: Pair, args: tuple[str, ...]
) -> None:
    (rc_r, _, err_r), (rc_o, _, err_o) = pair.sbatch(*args)
    assert rc_r != 0, "real Slurm is expected to refuse"
    assert (rc_o, err_o) == (rc_r, err_r)


def test_a_released_job_that_can_never_run_waits_with_bad_constraints(pair: Pair) -> None:
    (_, job_r, _), (_, job_o, _) = pair.sbatch("--hold", "--mem=3000")
    for run, job in (("real", job_r), ("ours", job_o)):
        assert (pair.real if run == "real" else pair.ours)(
            ["scontrol", "release", job]
        ).returncode == 0
        assert pair.reason(run, job, "BadConstraints") == "BadConstraints"


def test_a_negative_time_is_stored_as_slurms_huge_limit_and_the_job_runs(pair: Pair) -> None:
    (_, held_r, _), (_, held_o, _) = pair.sbatch("--hold", "--time=-5")
    assert pair.field("ours", held_o, "TimeLimit") == pair.field("real", held_r, "TimeLimit")
    assert pair.field("real", held_r, "TimeLimit") == "2982611-04:17:00"
    assert pair.squeue("ours", held_o, "%l") == pair.squeue("real", held_r, "%l") == "INVALID"
    (_, job_r, _), (_, job_o, _) = pair.sbatch("--time=-5")
    assert pair.state("real", job_r, "COMPLETED") == "COMPLETED"
    assert pair.state("ours", job_o, "COMPLETED") == "COMPLETED"


def test_a_dependency_on_a_job_that_does_not_exist_is_dropped(pair: Pair) -> None:
    (_, held_r, _), (_, held_o, _) = pair.sbatch("--hold")
    (_, gone_r, _), (_, gone_o, _) = pair.sbatch("--dependency=afterok:99999")
    (_, and_r, _), (_, and_o, _) = pair.sbatch(
        f"--dependency=afterok:99999,afterany:{held_r}",
        ours=[f"--dependency=afterok:99999,afterany:{held_o}"],
    )
    (_, or_r, _), (_, or_o, _) = pair.sbatch(
        f"--dependency=afterok:99999?afterany:{held_r}",
        ours=[f"--dependency=afterok:99999?afterany:{held_o}"],
    )
    (_, kept_r, _), (_, kept_o, _) = pair.sbatch("--hold", "--dependency=afterok:99999")
    assert pair.state("real", gone_r, "COMPLETED") == "COMPLETED"
    assert pair.state("ours", gone_o, "COMPLETED") == "COMPLETED"
    assert pair.field("real", gone_r, "Dependency") == pair.field("ours", gone_o, "Dependency")
    assert pair.field("ours", gone_o, "Dependency") == "(null)"
    assert pair.field("real", and_r, "Dependency") == f"afterany:{held_r}(unfulfilled)"
    assert pair.field("ours", and_o, "Dependency") == f"afterany:{held_o}(unfulfilled)"
    assert pair.reason("ours", and_o, "Dependency") == pair.squeue("real", and_r, "%r")
    assert pair.state("real", or_r, "COMPLETED") == "COMPLETED"  # `?`: the missing job satisfies
    assert pair.state("ours", or_o, "COMPLETED") == "COMPLETED"
    assert pair.field("ours", or_o, "Dependency") == pair.field("real", or_r, "Dependency")
    # a held job keeps the missing job: real Slurm showed this in every run by hand and in
    # all but one full CI-equivalent run, where it showed `(null)` (cause not found yet:
    # perhaps a slurmctld restart by an earlier fault test re-validating dependencies), so
    # the oracle's value is read, not assumed; Caldera keeps the item, as Slurm usually does
    assert pair.field("real", kept_r, "Dependency") in ("afterok:99999(unfulfilled)", "(null)")
    assert pair.field("ours", kept_o, "Dependency") == "afterok:99999(unfulfilled)"
