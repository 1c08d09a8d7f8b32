"""A gateway configured with `[[cluster]]` tables: a `kind = "slurm"` cluster serves its
partitions like the old `[slurm]` table, and a wrong table stops `caldera up` with its place
before any daemon starts."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.gateway_env import CALDERA, Gateway, discard_gateway, start_gateway
from tests.support.slurm_stack import SlurmStack


@pytest.fixture
def cluster_gateway(slurm_cluster: SlurmStack) -> Iterator[Gateway]:
    base = Path(tempfile.mkdtemp(prefix="caldera-cluster-", dir="/tmp"))
    config = (
        '[[partitions]]\nname = "local"\ndefault = true\n'
        '[[cluster]]\nname = "hpc"\nkind = "slurm"\ntransport = "cli"\n'
        f'slurm_conf = "{slurm_cluster.slurm_conf}"\n'
        f'instance = "e2e-{base.name}"\n'
        '[[cluster.partition]]\nslurm = "real"\nname = "hpc-real"\n'
    )
    gw = start_gateway(base, config)
    try:
        yield gw
    finally:
        gw.run(["scancel", "-u", "root"])
        discard_gateway(gw, base)


@pytest.mark.slurm
def test_a_slurm_cluster_table_routes_its_partition_to_slurm(cluster_gateway: Gateway):
    gw = cluster_gateway
    assert "hpc-real" in gw.ok(["sinfo", "-h", "-o", "%P"]).split()
    job = gw.sbatch("-p", "hpc-real", "-o", "/dev/null", "--wrap", "echo $SLURM_CLUSTER_NAME")
    final = gw.wait(job, timeout=240)
    assert final["state"] == "COMPLETED"
    assert final["cluster"] == "hpc"
    assert str(final["nodes"][0]).startswith("node0")  # type: ignore[index]


@pytest.mark.parametrize(
    ("toml", "message"),
    [
        (
            '[[cluster]]\nname = "a"\nkind = "local"\n[[cluster]]\nname = "b"\nkind = "slurmm"\n',
            "caldera.toml: [[cluster]] #2 (b): unknown kind 'slurmm' "
            "(one of local, slurm, kubernetes)",
        ),
        (  # a kind's own key, read by the adapter's parser, is still checked by `caldera up`
            '[[cluster]]\nname = "hpc"\nkind = "slurm"\ntransprt = "rest"\n',
            "caldera.toml: [[cluster]] #1 (hpc): unknown setting(s) 'transprt'",
        ),
    ],
)
def test_caldera_up_names_a_wrong_cluster_table_and_starts_nothing(toml: str, message: str):
    base = Path(tempfile.mkdtemp(prefix="caldera-badcluster-", dir="/tmp"))
    try:
        home = base / "home"
        home.mkdir()
        (home / "caldera.toml").write_text(toml)
        env = {**os.environ, "CALDERA_HOME": str(home), "CALDERA_SOCKET": str(home / "s.sock")}
        up = subprocess.run([*CALDERA, "up"], env=env, capture_output=True, text=True, timeout=60)
        assert up.returncode == 1
        assert up.stderr == f"caldera: error: cannot start the gateway: {home}/{message}\n"
        assert sorted(p.name for p in home.iterdir()) == ["caldera.toml"]  # nothing started
    finally:
        shutil.rmtree(base, ignore_errors=True)
