"""Slurm's multi-cluster command forms (`-M/--clusters`, `sacct -L`) against real Slurm 22.05.

Two real clusters run (`caldera` and `burst`, one slurmdbd: tests/support/slurm_burst.py). A
Caldera gateway is configured with both as `kind = "slurm"` clusters of the same names (and
its own local cluster, `site`), offering the same partitions in slurm.conf's order. Each test
runs the same command line against real Slurm (SLURM_CONF of the caldera cluster) and against
Caldera, as root and as tester, and compares stdout, stderr and the exit code.

Jobs are submitted held and pinned with `-M <one cluster>`, so they never run anywhere: both
sides list them under that cluster. Job ids differ (each side numbers its own); a job id is
replaced by a token naming its cluster before comparing. The recorded outputs
(tests/data/multicluster/, re-recorded by multicluster_record.py) show the same forms.
"""

from __future__ import annotations

import re
import shutil
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.differential.multicluster_record import DATA, submitted
from tests.support.gateway_env import Gateway, start_gateway, stop_gateway
from tests.support.slurm_burst import SlurmClusters, run_on

pytestmark = [pytest.mark.slurm, pytest.mark.federation]

USERS = ("root", "tester")
HOLD = ("--hold", "--wrap", "sleep 30")
# the partitions Caldera offers, in each slurm.conf's order (sinfo lists them in that order)
OFFERED = {"caldera": ("real",), "burst": ("real", "gpu", "burst")}
PIN = {"caldera": "real", "burst": "burst"}  # the partition a pinned job asks for


@dataclass(frozen=True)
class Out:
    """What a command printed."""

    stdout: str
    stderr: str
    rc: int


def _config(clusters: SlurmClusters, instance: str) -> str:
    out = ['cluster_name = "site"\n[[partitions]]\nname = "local"\ndefault = true\n']
    for name in ("caldera", "burst"):
        out.append(
            f'[[cluster]]\nname = "{name}"\nkind = "slurm"\ntransport = "cli"\n'
            f'slurm_conf = "{clusters.by_name(name).slurm_conf}"\ninstance = "{instance}"\n'
        )
        out.extend(f'[[cluster.partition]]\nslurm = "{p}"\nname = "{p}"\n' for p in OFFERED[name])
    return "".join(out)


@pytest.fixture(scope="module")
def caldera(slurm_burst_cluster: SlurmClusters) -> Iterator[Gateway]:
    base = Path(tempfile.mkdtemp(prefix="caldera-multicluster-", dir="/tmp"))
    gw = start_gateway(base, _config(slurm_burst_cluster, f"mc-{base.name}"))
    try:
        yield gw
    finally:
        stop_gateway(gw)
        shutil.rmtree(base, ignore_errors=True)


def _real(clusters: SlurmClusters, argv: Sequence[str], user: str) -> Out:
    proc = run_on(clusters.home, list(argv), user=None if user == "root" else user)
    return Out(proc.stdout, proc.stderr, proc.returncode)


def _ours(gw: Gateway, argv: Sequence[str], user: str) -> Out:
    proc = gw.run(list(argv), user=None if user == "root" else user)
    return Out(proc.stdout, proc.stderr, proc.returncode)


class Jobs:
    """Held jobs pinned to each cluster, submitted the same way on both sides (one name per
    test), and the tokens that replace their ids."""

    def __init__(self, clusters: SlurmClusters, gw: Gateway, user: str) -> None:
        self.clusters, self.gw, self.user = clusters, gw, user
        self.name = f"mc{uuid.uuid4().hex[:10]}"
        self.real: dict[str, str] = {}
        self.ours: dict[str, str] = {}

    def submit(self) -> None:
        for cluster, part in PIN.items():
            argv = ["sbatch", "-M", cluster, "-p", part, "-J", self.name, "--parsable", *HOLD]
            real = _real(self.clusters, argv, self.user)
            ours = _ours(self.gw, argv, self.user)
            got_real, got_ours = submitted(real.stdout), submitted(ours.stdout)
            assert got_real is not None, real
            assert got_ours is not None, ours
            assert (got_real[1], got_ours[1]) == (cluster, cluster)
            self.real[cluster], self.ours[cluster] = got_real[0], got_ours[0]

    def cancel(self) -> None:
        for cluster, job in self.real.items():
            run_on(self.clusters.home, ["scancel", "-M", cluster, job])
        for job in self.ours.values():
            self.gw.run(["scancel", job])

    @staticmethod
    def _tokens(text: str, ids: Mapping[str, str]) -> str:
        """Each line's first number, when it is one of the jobs' ids (the JOBID column), as
        `<cluster>` (the padding around it too: ids of different lengths align differently)."""
        names = {job: cluster for cluster, job in ids.items()}
        first = re.compile(r"^(\D*?) *\b(\d+)\b *")

        def one(line: str) -> str:
            m = first.match(line)
            if m is None or m.group(2) not in names:
                return line
            return f"{m.group(1)}<{names[m.group(2)]}>{line[m.end() :]}"

        return "".join(one(line) for line in text.splitlines(True))

    def real_out(self, out: Out) -> Out:
        return Out(self._tokens(out.stdout, self.real), out.stderr, out.rc)

    def ours_out(self, out: Out) -> Out:
        return Out(self._tokens(out.stdout, self.ours), out.stderr, out.rc)

    def argv(self, template: Sequence[str], side: Mapping[str, str]) -> list[str]:
        return [a.format(name=self.name, **side) for a in template]


@pytest.fixture(params=USERS)
def jobs(
    request: pytest.FixtureRequest, slurm_burst_cluster: SlurmClusters, caldera: Gateway
) -> Iterator[Jobs]:
    made = Jobs(slurm_burst_cluster, caldera, str(request.param))
    try:
        made.submit()
        yield made
    finally:
        made.cancel()


def _same(real: Callable[[], Out], ours: Callable[[], Out], tries: int = 3) -> None:
    """Equal outputs; the clusters are shared and alive (node states move), so Caldera's
    output counts as right when it equals real Slurm's read just before or just after it,
    and wrong only when that fails `tries` times in a row."""
    for attempt in range(tries):
        before, got_ours, after = real(), ours(), real()
        if got_ours in (before, after):
            return
        if attempt < tries - 1:
            time.sleep(1)
    assert got_ours == after


LISTINGS = [
    ("squeue", "-M", "caldera,burst", "-n", "{name}"),
    ("squeue", "-M", "burst,caldera", "-n", "{name}", "-o", "%j %P %u %T %r"),
    ("squeue", "-M", "caldera,burst", "-n", "{name}", "-h"),
    ("squeue", "-M", "caldera,burst", "-n", "{name}", "-h", "-l"),
    ("squeue", "-M", "burst", "-n", "{name}", "-O", "cluster,jobid,partition,state,reason"),
    ("squeue", "-M", "BURST", "-n", "{name}", "-h"),
    ("squeue", "-M", "nosuch,burst", "-n", "{name}", "-o", "%j %P"),
    # sacct without -j leaves out jobs never eligible (held): name them
    ("sacct", "-M", "burst", "-X", "-j", "{burst}", "-o", "jobname,cluster,partition,state"),
    ("sacct", "-M", "BURST", "-X", "-j", "{burst}", "-o", "cluster,partition"),
    ("sacct", "-M", "caldera", "-X", "-j", "{caldera}", "-o", "cluster,partition,state"),
    ("sacct", "-M", "nosuch", "-X", "-j", "{burst}", "-o", "jobname,cluster"),
]


@pytest.mark.parametrize("template", LISTINGS, ids=lambda t: " ".join(t))
def test_listing_per_cluster(jobs: Jobs, template: tuple[str, ...]) -> None:
    # slurmctld sends a new job's record to slurmdbd a few seconds after the submission
    tries = 15 if template[0] == "sacct" else 3
    _same(
        lambda: jobs.real_out(_real(jobs.clusters, jobs.argv(template, jobs.real), jobs.user)),
        lambda: jobs.ours_out(_ours(jobs.gw, jobs.argv(template, jobs.ours), jobs.user)),
        tries,
    )


def test_squeue_long_prints_the_date_once_above_the_clusters(jobs: Jobs) -> None:
    argv = ["squeue", "-M", "caldera,burst", "-l", "-n", jobs.name]
    real = jobs.real_out(_real(jobs.clusters, argv, jobs.user))
    ours = jobs.ours_out(_ours(jobs.gw, argv, jobs.user))
    assert [line[:3] for line in ours.stdout.splitlines()[:1]] == [
        line[:3] for line in real.stdout.splitlines()[:1]
    ]  # the weekday: the clocks' seconds may differ
    assert ours.stdout.splitlines()[1:] == real.stdout.splitlines()[1:]
    assert (ours.stderr, ours.rc) == (real.stderr, real.rc)


def test_scancel_M_reaches_only_the_named_cluster(jobs: Jobs) -> None:
    """scancel -M burst <the caldera job>: silently not found; -M caldera cancels it."""
    sides: dict[str, tuple[Callable[[Sequence[str]], Out], str]] = {
        "real": (lambda a: _real(jobs.clusters, a, jobs.user), jobs.real["caldera"]),
        "ours": (lambda a: _ours(jobs.gw, a, jobs.user), jobs.ours["caldera"]),
    }
    pending = ["squeue", "-M", "caldera", "-h", "-n", jobs.name, "-t", "PD", "-o", "%T"]
    for side, (run, job) in sides.items():
        assert run(["scancel", "-M", "burst", job]) == Out("", "", 0), side
        assert run(pending).stdout.split() == ["PENDING"], side
        assert run(["scancel", "-M", "caldera", job]) == Out("", "", 0), side
        assert run(pending).stdout == "", side


def test_scontrol_M_shows_only_that_clusters_jobs(jobs: Jobs) -> None:
    """scontrol talks to one cluster: a job elsewhere is an invalid id there, and a list of
    clusters is refused."""
    for side, run, ids in (
        ("real", lambda a: _real(jobs.clusters, a, jobs.user), jobs.real),
        ("ours", lambda a: _ours(jobs.gw, a, jobs.user), jobs.ours),
    ):
        there = run(["scontrol", "-M", "burst", "show", "job", ids["burst"]])
        assert there.rc == 0, (side, there)
        assert there.stdout.startswith(f"JobId={ids['burst']} "), (side, there)
        assert run(["scontrol", "-M", "burst", "show", "job", ids["caldera"]]) == Out(
            "", "slurm_load_jobs error: Invalid job id specified\n", 1
        ), side
        assert run(["scontrol", "-M", "caldera,burst", "show", "job"]) == Out(
            "", "scontrol: fatal: Only one cluster can be used at a time with scontrol\n", 1
        ), side


SBATCH_FORMS = [
    ("-M", "burst", "-p", "burst"),
    ("-M", "burst", "-p", "burst", "--parsable"),
    ("--clusters=caldera", "-p", "real", "--parsable"),
    ("-M", "BURST", "-p", "burst"),
    ("-M", "nosuch,burst", "-p", "burst"),
]


@pytest.mark.parametrize("form", SBATCH_FORMS, ids=lambda t: " ".join(t))
@pytest.mark.parametrize("user", USERS)
def test_sbatch_names_the_cluster(
    slurm_burst_cluster: SlurmClusters, caldera: Gateway, form: tuple[str, ...], user: str
) -> None:
    argv = ["sbatch", *form, *HOLD]
    real = _real(slurm_burst_cluster, argv, user)
    ours = _ours(caldera, argv, user)
    got_real, got_ours = submitted(real.stdout), submitted(ours.stdout)
    try:
        assert got_real is not None, real
        assert got_ours is not None, ours
        norm = re.compile(r"\d+(?=[; ])")
        assert norm.sub("N", ours.stdout) == norm.sub("N", real.stdout)
        assert (ours.stderr, ours.rc) == (real.stderr, real.rc)
    finally:
        if got_real is not None:
            run_on(slurm_burst_cluster.home, ["scancel", "-M", got_real[1], got_real[0]])
        if got_ours is not None:
            caldera.run(["scancel", got_ours[0]])


@pytest.mark.parametrize("directive", ["#SBATCH -M burst", "#SBATCH --clusters=nosuch,burst"])
def test_sbatch_directive_names_the_cluster(
    slurm_burst_cluster: SlurmClusters, caldera: Gateway, directive: str
) -> None:
    """-M in the script: sbatch reads it before asking the database, as from the command line."""
    script = slurm_burst_cluster.home.jobs_dir / f"mc-{uuid.uuid4().hex[:8]}.sh"
    script.write_text(f"#!/bin/bash\n{directive}\n#SBATCH -p burst\nsleep 30\n")
    script.chmod(0o644)
    argv = ["sbatch", "--parsable", "--hold", str(script)]
    real, ours = _real(slurm_burst_cluster, argv, "tester"), _ours(caldera, argv, "tester")
    got_real, got_ours = submitted(real.stdout), submitted(ours.stdout)
    try:
        assert got_real is not None, real
        assert got_ours is not None, ours
        assert (got_ours[1], ours.stderr, ours.rc) == (got_real[1], real.stderr, real.rc)
    finally:
        script.unlink()
        if got_real is not None:
            run_on(slurm_burst_cluster.home, ["scancel", "-M", got_real[1], got_real[0]])
        if got_ours is not None:
            caldera.run(["scancel", got_ours[0]])


UNKNOWN = ["nosuch", "nosuch,bogus", "all,nosuch"]
COMMANDS = [
    ("sbatch", "-M", "{m}", *HOLD),
    ("sbatch", "-M", "{m}", "--test-only", "--wrap", "true"),
    ("squeue", "-M", "{m}"),
    ("sinfo", "-M", "{m}"),
    ("scancel", "-M", "{m}", "1"),
    ("scontrol", "-M", "{m}", "show", "job", "1"),
    ("squeue", "--clusters={m}", "-h"),
    ("sinfo", "--cluster={m}", "-s"),
]


@pytest.mark.parametrize("m", UNKNOWN)
@pytest.mark.parametrize("template", COMMANDS, ids=lambda t: " ".join(t[:2]))
def test_unknown_clusters_are_refused_in_slurms_words(
    slurm_burst_cluster: SlurmClusters, caldera: Gateway, template: tuple[str, ...], m: str
) -> None:
    argv = [a.format(m=m) for a in template]
    before = _ours(caldera, ["squeue", "-h", "-o", "%i"], "root").stdout
    real = _real(slurm_burst_cluster, argv, "tester")
    ours = _ours(caldera, argv, "tester")
    assert ours == real
    assert ours.rc == 1
    assert _ours(caldera, ["squeue", "-h", "-o", "%i"], "root").stdout == before  # nothing new


@pytest.mark.parametrize(
    "template", [("squeue", "-M", ""), ("sinfo", "-M", ","), ("scancel", "-M", "", "1")]
)
def test_an_empty_cluster_list_is_refused(
    slurm_burst_cluster: SlurmClusters, caldera: Gateway, template: tuple[str, ...]
) -> None:
    assert _ours(caldera, template, "root") == _real(slurm_burst_cluster, template, "root")


SINFO = [
    ("sinfo", "-M", "caldera,burst", "-p", "real,burst"),
    ("sinfo", "-M", "burst", "-p", "real,gpu,burst"),
    ("sinfo", "-M", "BURST,caldera", "-p", "real", "-N"),
    ("sinfo", "-M", "burst", "-p", "real,gpu,burst", "-o", "%P %D %t %N %G"),
    ("sinfo", "-M", "caldera,burst", "-p", "real", "-s"),
]


@pytest.mark.parametrize("argv", SINFO, ids=lambda t: " ".join(t))
def test_sinfo_per_cluster(
    slurm_burst_cluster: SlurmClusters, caldera: Gateway, argv: tuple[str, ...]
) -> None:
    # other sessions' jobs move the caldera cluster's node states; the gateway sees a change
    # at its next poll of the cluster: compare until both sides show the same moment
    _same(
        lambda: _real(slurm_burst_cluster, argv, "tester"),
        lambda: _ours(caldera, argv, "tester"),
        tries=20,
    )


def test_the_recording_shows_what_real_slurm_printed() -> None:
    """The recorded data is real Slurm's: the forms compared live above, as they looked."""
    import json

    data = json.loads(DATA.read_text())
    for user in USERS:
        rec = data["users"][user]
        assert rec["sbatch_M_burst"]["stdout"].endswith(" on cluster burst\n")
        assert re.fullmatch(r"\d+;burst\n", rec["sbatch_M_burst_parsable"]["stdout"])
        assert rec["sbatch_M_nosuch"]["rc"] == 1
        assert rec["squeue_M_all"]["stdout"].startswith("CLUSTER: burst\n")
        assert "\n\nCLUSTER: caldera\n" in rec["squeue_M_all"]["stdout"]
