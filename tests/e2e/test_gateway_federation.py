"""One queue over the local machine and a real Slurm cluster: routing by predicted start,
bursting, and moving a job out of Slurm's queue when home frees up - each job run once.

The home cluster is the gateway's own local site (one 2-CPU node); the other cluster is the
real Slurm test cluster (testenv/slurm), whose partition `real` Caldera offers as `debug`
too. Every job records each run it makes (token, host, time) under flock in a file both
clusters' nodes write, so "ran once" is what the job itself saw, not what a log claims.
"""

from __future__ import annotations

import os
import signal
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.gateway_env import Gateway, discard_gateway, restart, start_gateway
from tests.support.slurm_burst import SlurmClusters
from tests.support.slurm_stack import SlurmStack, cancel, run_sbatch

pytestmark = [pytest.mark.slurm, pytest.mark.federation]

JOBS = Path("/tmp/caldera-slurm/jobs")  # mode 1777, on this machine: every node sees it


def _config(slurm_conf: str, instance: str, extra: str = "") -> str:
    return (
        'cluster_name = "home"\n'
        '[[nodes]]\nname = "fedhome"\ncpus = 2\nmemory_mb = 2000\n'
        '[[partitions]]\nname = "debug"\ndefault = true\n'
        '[slurm]\n[[slurm.cluster]]\nname = "hpc"\ntransport = "cli"\n'
        f'slurm_conf = "{slurm_conf}"\ninstance = "{instance}"\n'
        '[[slurm.cluster.partition]]\nslurm = "real"\nname = "debug"\n'
        '[routing]\nhome = "home"\nmargin = "30s"\n' + extra
    )


@pytest.fixture
def fed(slurm_cluster: SlurmStack) -> Iterator[Gateway]:
    base = Path(tempfile.mkdtemp(prefix="caldera-fed-", dir="/tmp"))
    gw = start_gateway(base, _config(slurm_cluster.slurm_conf, f"fed-{base.name}"))
    try:
        yield gw
    finally:
        gw.run(["scancel", "-u", "root"])
        gw.run(["scancel", "-u", "tester"])
        discard_gateway(gw, base)


class RunLog:
    """Each run of a job, as the job records it: `token host time`, one line under flock."""

    def __init__(self) -> None:
        self.path = JOBS / f"fed-runs-{time.time_ns()}.log"
        self.path.touch()
        self.path.chmod(0o666)

    def script(self, token: str, seconds: float = 1) -> str:
        return (
            "#!/bin/sh\n"
            f"flock {self.path} sh -c "
            f"'echo \"{token} $(hostname) $(date +%s.%N)\" >> {self.path}'\n"
            f"sleep {seconds}\n"
        )

    def runs(self, token: str) -> list[str]:
        return [
            ln.split()[1] for ln in self.path.read_text().splitlines() if ln.split()[0] == token
        ]


def _submit(gw: Gateway, script: str, *args: str) -> int:
    path = gw.workdir / f"job-{time.time_ns()}.sh"
    path.write_text(script)
    path.chmod(0o755)
    return gw.sbatch(*args, str(path))


def _show(gw: Gateway, job: int) -> str:
    return gw.ok(["scontrol", "show", "job", str(job)])


def _slurm_fill(seconds: int) -> list[str]:
    """Every CPU of Slurm's partition `real` taken by jobs ending within `seconds`."""
    ids = []
    for node in ("node01", "node02", "node03", "node04"):
        argv = ["-p", "real", "-w", node, "--exclusive", "-t", f"0:{seconds}"]
        argv += ["-o", "/dev/null", "--parsable", "--wrap", f"sleep {seconds}"]
        out = run_sbatch(None, argv)
        assert out.returncode == 0, out.stderr
        ids.append(out.stdout.strip().split(";")[0])
    return ids


def test_a_full_home_bursts_to_slurm_and_the_job_runs_there_once(fed: Gateway) -> None:
    log = RunLog()
    blocker = _submit(fed, log.script("blocker", 120), "-t", "10", "-c", "2", "-o", "/dev/null")
    fed.wait(blocker, states=("RUNNING",), timeout=60)
    out = fed.workdir / "burst-%j.out"
    job = _submit(fed, log.script("burst") + "echo ran-on-$(hostname)\n", "-t", "5", "-o", str(out))
    final = fed.wait(job, timeout=180)
    assert final["state"] == "COMPLETED", final
    assert final["cluster"] == "hpc"
    hosts = log.runs("burst")
    assert len(hosts) == 1, hosts
    assert hosts[0].startswith("node0"), hosts
    text = (fed.workdir / f"burst-{job}.out").read_text()
    assert text.strip() == f"ran-on-{hosts[0]}"
    shown = _show(fed, job)
    assert "FedOrigin=home FedViableSiblings=home,hpc FedActiveSiblings=hpc" in shown
    assert "Routing=burst: hpc starts now, home (home) in " in shown
    page = fed.api(f"/ui/api/jobs/{job}")  # the dashboard's job page, as its owner (root)
    assert isinstance(page, dict)
    assert page["private"]["output_tail"].strip() == f"ran-on-{hosts[0]}"
    assert [r["to"] for r in page["routing"]] == ["hpc"]
    fed.ok(["scancel", str(blocker)])


def test_a_job_queued_by_slurm_moves_home_when_home_frees_up(
    fed: Gateway, slurm_cluster: SlurmStack
) -> None:
    log = RunLog()
    blocker = _submit(fed, log.script("blocker", 300), "-t", "20", "-c", "2", "-o", "/dev/null")
    fed.wait(blocker, states=("RUNNING",), timeout=60)
    fillers = _slurm_fill(90)
    try:
        job = _submit(fed, log.script("mover"), "-t", "5", "-o", "/dev/null")
        # Slurm starts it in ~90 s, home in ~20 min: it waits in Slurm's queue
        _wait_queued_at_hpc(fed, job)
        fed.ok(["scancel", str(blocker)])  # home frees up: the next review moves it
        final = fed.wait(job, timeout=120)
        assert final["state"] == "COMPLETED", final
        assert final["cluster"] == "home"
        runs = log.runs("mover")
        assert len(runs) == 1, runs  # once, and not on a Slurm node
        assert not runs[0].startswith("node0"), runs
        assert "Routing=revoked on hpc" in _show(fed, job)
        # the dashboard's job page and decision log show the move: routed to hpc, then
        # revoked there and routed home
        page = fed.api(f"/ui/api/jobs/{job}")
        assert isinstance(page, dict)
        kinds = [(r["kind"], r["from"], r["to"]) for r in page["routing"]]
        assert ("route", None, "hpc") in kinds, kinds
        assert ("revoke", "hpc", "home") in kinds, kinds
        assert kinds.index(("route", None, "hpc")) < kinds.index(("revoke", "hpc", "home"))
        log_page = fed.api("/ui/api/decisions")
        assert isinstance(log_page, dict)
        mine = [(r["kind"], r["from"]) for r in log_page["decisions"] if r["job_id"] == job]
        assert ("revoke", "hpc") in mine, mine
    finally:
        cancel(*fillers)


def test_a_job_pinned_with_M_never_moves(fed: Gateway) -> None:
    log = RunLog()
    job = _submit(fed, log.script("pinned"), "-M", "hpc", "-t", "5", "-o", "/dev/null")
    final = fed.wait(job, timeout=180)
    assert final["state"] == "COMPLETED", final
    assert final["cluster"] == "hpc"
    assert [h[:4] for h in log.runs("pinned")] == ["node"]
    assert "home: -M" in _show(fed, job) or "not in -M" in _show(fed, job)


def test_a_gres_type_only_slurm_has_sends_the_job_there(fed: Gateway) -> None:
    log = RunLog()
    job = _submit(fed, log.script("gpu"), "--gres=gpu:1", "-t", "5", "-o", "/dev/null")
    final = fed.wait(job, timeout=180)
    assert final["state"] == "COMPLETED", final
    assert final["cluster"] == "hpc"
    shown = _show(fed, job)
    assert "FedViableSiblings=hpc " in shown
    assert "skipped home: " in shown


def _wait_queued_at_hpc(gw: Gateway, job: int, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while True:
        record = gw.job(job)
        queued = record["state"] == "PENDING" and record.get("backend_id")
        if record["cluster"] == "hpc" and queued:  # (RUNNING until Slurm's PD is seen)
            return
        where = {k: record.get(k) for k in ("state", "cluster", "backend_id", "route_note")}
        assert time.monotonic() < deadline, where
        time.sleep(0.5)


def test_a_gateway_killed_mid_withdrawal_loses_nothing_and_runs_the_job_once(
    slurm_cluster: SlurmStack, monkeypatch: pytest.MonkeyPatch
) -> None:
    """kill -9 of the gateway after it held the job in Slurm's queue and before it checked
    and cancelled it (a test hook makes the gateway kill itself at that instant). The
    restarted gateway finishes the withdrawal and starts the job once, at home."""
    monkeypatch.setenv("CALDERA_TEST_CRASH_IN_WITHDRAW", "1")
    base = Path(tempfile.mkdtemp(prefix="caldera-fed-", dir="/tmp"))
    gw = start_gateway(base, _config(str(slurm_cluster.slurm_conf), f"fed-{base.name}"))
    log = RunLog()
    fillers = _slurm_fill(90)
    try:
        blocker = _submit(gw, log.script("blocker", 300), "-t", "20", "-c", "2", "-o", "/dev/null")
        gw.wait(blocker, states=("RUNNING",), timeout=60)
        job = _submit(gw, log.script("crash"), "-t", "5", "-o", "/dev/null")
        _wait_queued_at_hpc(gw, job)
        pid = int((gw.home / "gateway.pid").read_text())
        gw.ok(["scancel", str(blocker)])  # home frees up: the review withdraws -> dies
        deadline = time.monotonic() + 60
        while Path(f"/proc/{pid}").exists():
            assert time.monotonic() < deadline, "the gateway did not reach the withdrawal"
            time.sleep(0.2)
        monkeypatch.delenv("CALDERA_TEST_CRASH_IN_WITHDRAW")
        restart(gw)
        final = gw.wait(job, timeout=120)
        assert final["state"] == "COMPLETED", final
        assert final["cluster"] == "home", final
        runs = log.runs("crash")
        assert len(runs) == 1, runs
        assert not runs[0].startswith("node0"), runs
    finally:
        cancel(*fillers)
        gw.run(["scancel", "-u", "root"])
        discard_gateway(gw, base)


def _stopped_slurmctld(slurm: SlurmStack) -> int:
    """slurmctld stopped (SIGSTOP): it holds its connections and answers nothing."""
    pid = int((Path(slurm.slurm_conf).parent.parent / "run" / "slurmctld.pid").read_text())
    os.kill(pid, signal.SIGSTOP)
    return pid


def test_a_silent_slurm_cluster_gets_no_new_jobs_and_its_running_job_keeps_its_one_run(
    slurm_cluster: SlurmStack,
) -> None:
    """slurmctld stops answering with a job running on the Slurm cluster: a job submitted
    meanwhile is not sent there (its prediction is unknown once outage_timeout passed) and
    runs at home; the running job is still the one run when slurmctld answers again, and
    ends there, once."""
    base = Path(tempfile.mkdtemp(prefix="caldera-fed-", dir="/tmp"))
    extra = 'outage_timeout = "10s"\n'
    gw = start_gateway(base, _config(str(slurm_cluster.slurm_conf), f"fed-{base.name}", extra))
    log = RunLog()
    pid = 0
    try:
        blocker = _submit(gw, log.script("blocker", 300), "-t", "20", "-c", "2", "-o", "/dev/null")
        gw.wait(blocker, states=("RUNNING",), timeout=60)
        away = _submit(gw, log.script("away", 30), "-t", "5", "-o", "/dev/null")
        final = gw.wait(away, states=("RUNNING",), timeout=120)
        assert final["cluster"] == "hpc", final
        pid = _stopped_slurmctld(slurm_cluster)
        time.sleep(12)  # past outage_timeout
        late = _submit(gw, log.script("late"), "-t", "5", "-o", "/dev/null")
        # routed once the gateway's own reads of hpc have timed out (10 s each): hpc unknown
        deadline = time.monotonic() + 60
        while "hpc unknown" not in _show(gw, late):
            assert time.monotonic() < deadline, _show(gw, late)
            time.sleep(0.5)
        assert (gw.job(late)["cluster"], gw.job(late)["state"]) == ("home", "PENDING")
        assert gw.job(away)["state"] == "RUNNING"
        os.kill(pid, signal.SIGCONT)
        pid = 0
        gw.ok(["scancel", str(blocker)])
        assert gw.wait(late, timeout=120)["cluster"] == "home"
        final = gw.wait(away, timeout=120)
        assert final["state"] == "COMPLETED", final
        assert final["cluster"] == "hpc"
        assert len(log.runs("away")) == 1, log.runs("away")
        assert log.runs("away")[0].startswith("node0")
        assert len(log.runs("late")) == 1
        assert not log.runs("late")[0].startswith("node0")
    finally:
        if pid:
            os.kill(pid, signal.SIGCONT)
        gw.run(["scancel", "-u", "root"])
        discard_gateway(gw, base)


def _two_slurm_config(clusters: SlurmClusters, instance: str) -> str:
    """Home is the real cluster `caldera` (offered as `hpc`), the second real cluster is
    `burst`; jobs of partition `real` go to those two only (the local site has none)."""
    out = [
        'cluster_name = "site"\n[[partitions]]\nname = "local"\ndefault = true\n',
        '[routing]\nhome = "hpc"\nmargin = "30s"\n',
        '[[routing.rule]]\npartition = "real"\nclusters = ["hpc", "burst"]\n',
    ]
    for name, slurm in (("hpc", "caldera"), ("burst", "burst")):
        out.append(
            f'[[cluster]]\nname = "{name}"\nkind = "slurm"\ntransport = "cli"\n'
            f'slurm_conf = "{clusters.by_name(slurm).slurm_conf}"\ninstance = "{instance}"\n'
            '[[cluster.partition]]\nslurm = "real"\nname = "real"\n'
        )
    return "".join(out)


@pytest.fixture
def two_slurm(slurm_burst_cluster: SlurmClusters) -> Iterator[Gateway]:
    base = Path(tempfile.mkdtemp(prefix="caldera-fed2-", dir="/tmp"))
    gw = start_gateway(base, _two_slurm_config(slurm_burst_cluster, f"fed2-{base.name}"))
    try:
        yield gw
    finally:
        gw.run(["scancel", "-u", "root"])
        discard_gateway(gw, base)


def test_a_full_home_slurm_cluster_bursts_to_the_other_slurm_cluster(two_slurm: Gateway) -> None:
    log = RunLog()
    fillers = _slurm_fill(120)  # every CPU of the home cluster's partition `real`
    try:
        job = _submit(two_slurm, log.script("slurm2slurm"), "-p", "real", "-t", "5")
        final = two_slurm.wait(job, timeout=120)
        assert final["state"] == "COMPLETED", final
        assert final["cluster"] == "burst"
        runs = log.runs("slurm2slurm")
        assert len(runs) == 1, runs
        assert runs[0].startswith("bnode"), runs
        assert "FedOrigin=hpc FedViableSiblings=hpc,burst FedActiveSiblings=burst" in _show(
            two_slurm, job
        )
    finally:
        cancel(*fillers)


def test_a_gres_type_only_the_burst_cluster_has_runs_only_there(two_slurm: Gateway) -> None:
    log = RunLog()
    job = _submit(two_slurm, log.script("h100"), "-p", "real", "--gres=gpu:h100:1", "-t", "5")
    final = two_slurm.wait(job, timeout=120)
    assert final["state"] == "COMPLETED", final
    assert final["cluster"] == "burst"
    assert log.runs("h100") == ["bnode02"]
    shown = _show(two_slurm, job)
    assert "FedViableSiblings=burst " in shown
    assert "skipped hpc: no node has gres gpu:h100" in shown
