"""topology.conf written by Caldera, read back by a REAL slurmctld (Slurm 22.05).

A throwaway slurmctld runs for this module only: its own config directory, state
directory, log and ports (free ports picked at start), TopologyPlugin=topology/tree, nodes
that exist only in its configuration (never started, State=DOWN). It shares the machine's
munged with the test cluster of testenv/slurm and touches nothing else of it. Each case
writes a topology.conf, has slurmctld read it (start, then `scontrol reconfigure`), and
compares `scontrol show topology` with the topology Caldera wrote.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from gateway.compat.hostlist import compress
from gateway.model.topology import Switch, Topology
from gateway.topology.ibnetdiscover import read_ibnetdiscover, topology_from_fabric
from gateway.topology.slurm_conf import (
    parse_scontrol_topology,
    read_topology_conf,
    render_topology_conf,
)
from tests.support.shared_data import MICRO_TOPOLOGY
from tests.support.slurm_stack import SlurmStack, slurm_cluster

pytestmark = pytest.mark.slurm
__all__ = ["slurm_cluster"]

ROOT = Path(__file__).resolve().parents[2]
FABRIC = ROOT / "tests" / "data" / "ibnetdiscover" / "fabric.txt"
MICRO = MICRO_TOPOLOGY


def fat_tree() -> Topology:
    """3 levels: 8 leaves of 4 nodes, 2 pods of 4 leaves, one core (32 nodes ft[001-032])."""
    return Topology.from_paths(
        {f"ft{i + 1:03d}": [f"ftleaf{i // 4}", f"ftpod{i // 16}", "ftcore"] for i in range(32)}
    )


def _parts() -> list[Topology]:
    return [topology_from_fabric(read_ibnetdiscover(FABRIC)), read_topology_conf(MICRO), fat_tree()]


def everything() -> Topology:
    """The three others under one root: reaches every node slurm.conf defines."""
    parts = _parts()
    switches = [s for t in parts for s in t.switches]
    roots = [r for t in parts for r in t.roots()]
    return Topology.tree([*switches, Switch("calderaroot", (), tuple(roots))])


CASES = {
    "ibnetdiscover": lambda: _parts()[0],
    "slurm-sim-micro": lambda: _parts()[1],
    "fat-tree": fat_tree,
    "all-under-one-root": everything,
}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Ctld:
    etc: Path
    env: dict[str, str]
    log: Path

    def scontrol(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ["scontrol", *args],
            env=self.env,
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )

    def load(self, topo: Topology) -> tuple[str, list[str]]:
        """Write topology.conf, make slurmctld re-read it; `scontrol show topology` and the
        log lines slurmctld wrote meanwhile."""
        offset = self.log.stat().st_size if self.log.exists() else 0
        (self.etc / "topology.conf").write_text(
            render_topology_conf(topo, header="written by Caldera (test)")
        )
        res = self.scontrol("reconfigure")
        assert res.returncode == 0, res.stderr
        deadline = time.monotonic() + 20
        while True:
            out = self.scontrol("show", "topology")
            if out.returncode == 0 and "SwitchName=" in out.stdout:
                expected = {s.name for s in topo.switches}
                if {ln.split()[0][11:] for ln in out.stdout.splitlines() if ln} == expected:
                    with self.log.open() as fh:
                        fh.seek(offset)
                        return out.stdout, fh.read().splitlines()
            if time.monotonic() > deadline:
                raise AssertionError(
                    f"slurmctld did not take the topology: {out.stdout}{out.stderr}"
                )
            time.sleep(0.2)


def _nodes() -> list[str]:
    names: list[str] = []
    for make in CASES.values():
        names.extend(make().nodes())
    return list(dict.fromkeys(names))


@pytest.fixture(scope="module")
def ctld(slurm_cluster: SlurmStack, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Ctld]:
    base = tmp_path_factory.mktemp("topo-ctld")
    etc, state = base / "etc", base / "state"
    etc.mkdir()
    state.mkdir()
    port, dport = _free_port(), _free_port()
    host = socket.gethostname().split(".")[0]
    conf = f"""# throwaway slurmctld for tests/integration/test_topology_slurm.py
ClusterName=calderatopo
SlurmctldHost={host}(127.0.0.1)
SlurmctldPort={port}
SlurmdPort={dport}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
StateSaveLocation={state}
SlurmdSpoolDir={base}/spool-%n
SlurmctldPidFile={base}/slurmctld.pid
SlurmdPidFile={base}/slurmd-%n.pid
SlurmctldLogFile={base}/slurmctld.log
SlurmctldDebug=info
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
SchedulerType=sched/builtin
TopologyPlugin=topology/tree
TreeWidth=65533
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
JobAcctGatherType=jobacct_gather/none
MpiDefault=none
MailProg=/bin/true
ReturnToService=0
NodeName={compress(_nodes())} NodeAddr=127.0.0.1 Port={_free_port()} CPUs=2 RealMemory=1000 \
  State=DOWN Reason="virtual"
PartitionName=all Nodes=ALL Default=YES State=UP
"""
    (etc / "slurm.conf").write_text(conf)
    first = CASES["fat-tree"]()
    (etc / "topology.conf").write_text(render_topology_conf(first))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "SBATCH_"))}
    env["SLURM_CONF"] = str(etc / "slurm.conf")
    log = base / "slurmctld.log"
    proc = subprocess.Popen(
        [
            shutil.which("slurmctld") or "/usr/sbin/slurmctld",
            "-D",
            "-i",
            "-f",
            str(etc / "slurm.conf"),
        ],
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    c = Ctld(etc, env, log)
    try:
        deadline = time.monotonic() + 30
        while c.scontrol("ping").stdout.find("UP") < 0:
            if proc.poll() is not None or time.monotonic() > deadline:
                text = log.read_text() if log.exists() else "(no log)"
                raise AssertionError(f"throwaway slurmctld did not come up:\n{text[-3000:]}")
            time.sleep(0.2)
        yield c
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _shape(topo: Topology) -> dict[str, tuple[frozenset[str], frozenset[str], int]]:
    return {
        s.name: (frozenset(s.nodes), frozenset(s.switches), topo.level(s.name))
        for s in topo.switches
    }


@pytest.mark.parametrize("case", list(CASES))
def test_slurmctld_reads_the_topology_caldera_writes(ctld: Ctld, case: str) -> None:
    topo = CASES[case]()
    out, log = ctld.load(topo)
    seen = parse_scontrol_topology(out)
    assert _shape(seen) == _shape(topo)
    # an upper switch lists every node below it
    for line in out.splitlines():
        fields = dict(w.split("=", 1) for w in line.split())
        hosts = subprocess.run(
            ["scontrol", "show", "hostnames", fields["Nodes"]],
            env=ctld.env,
            capture_output=True,
            text=True,
            check=True,
        ).stdout.split()
        assert set(hosts) == set(topo.nodes_in(fields["SwitchName"]))
    bad = [
        ln
        for ln in log
        if "fatal" in ln.lower()
        or ("error" in ln.lower() and "switch" in ln.lower() and "lack access" not in ln)
    ]
    assert bad == []
    if case == "all-under-one-root":  # covers every node: slurmctld has nothing to warn about
        assert not [ln for ln in log if "switch" in ln.lower() or "TOPOLOGY" in ln]
