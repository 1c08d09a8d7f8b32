"""A Caldera local site read from the real test cluster's own slurm.conf, next to real Slurm.

The gateway is configured with `[local] slurm_conf = <a copy of the cluster's slurm.conf>`,
so its nodes (CPUs, sockets, cores, threads, memory, Gres with types, features, weights),
partitions and licences are whatever the file declares. The copy has one more partition,
`h6alim` (limits), and three in the states DRAIN, INACTIVE and DOWN, which the tests create
on the real cluster with `scontrol create` for as long as they need them (the cluster's
slurm.conf is never changed).

What is normalised, and why:
* node states, and the CPUs allocated on them: the real nodes run other users' jobs (the
  cluster is shared) and its big* nodes have no slurmd (DOWN*, NOT_RESPONDING); Caldera's
  nodes are idle or DOWN as slurm.conf says. `%C` is compared as (allocated + idle)/other/
  total; default `sinfo`'s rows (one per state) are compared per partition as the union of
  their nodes;
* partitions the file does not declare (created at run time by others) are left out;
* `sinfo -N` lines are compared as a multiset (real sinfo orders a node's partitions by
  thread completion);
* `scontrol show node` fields that are slurmd's runtime facts (Arch, OS, CPULoad,
  FreeMem, NodeAddr, Port, Version, BootTime, SlurmdStartTime, LastBusyTime) and AllocTRES
  (the real nodes run others' jobs) are not compared. A partition made by `scontrol
  create` has MinNodes=1 where a slurm.conf line gives 0: masked for `h6alim` only;
  `license/SCRATCH=` is left out of Caldera's partition TRES when the cluster's lacks it
  (its slurmdbd registered the licence as `license/scratch` before slurm.conf spelt it
  SCRATCH, and slurmctld does not match the two; a fresh cluster shows it).
"""

from __future__ import annotations

import re
import subprocess
import tempfile
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest

from gateway.compat.hostlist import expand
from gateway.control.slurm_conf import parse_slurm_conf
from tests.support.gateway_env import Gateway, discard_gateway, start_gateway
from tests.support.slurm_stack import SlurmStack, cancel, parse_scontrol_records

pytestmark = pytest.mark.slurm

LIMITED = (
    "PartitionName=h6alim Nodes=node[01-02] MaxNodes=1 MaxTime=10 DefaultTime=5 "
    "DefMemPerCPU=300 OverSubscribe=EXCLUSIVE State=UP"
)
STATES = {
    "h6adrain": "PartitionName=h6adrain Nodes=node[01-02] State=DRAIN",
    "h6ainact": "PartitionName=h6ainact Nodes=node[01-02] State=INACTIVE",
    "h6adown": "PartitionName=h6adown Nodes=node[01-02] State=DOWN",
}
_STATES = re.compile(
    r"\b(idle|mix(ed)?|alloc(ated)?|down|drain(ed|ing)?|drng|comp(leting)?|unk(nown)?|resv|"
    r"reserved|planned|plnd|maint|fail(ing)?|future|futr|inval|npc|pow_dn|pow_up|boot)"
    r"([*~#!%$@^-]|\+[A-Z_+]+)?(?=\s|$)",
    re.IGNORECASE,
)
_CPUS = re.compile(r"\b(\d+)/(\d+)/(\d+)/(\d+)\b")


class Pair:
    """The same command on real Slurm and on Caldera."""

    def __init__(self, cluster: SlurmStack, gw: Gateway, declared: frozenset[str]) -> None:
        self.cluster, self.gw = cluster, gw
        # the partitions the real cluster has only while a test creates them are left out
        self.declared = declared - {"h6alim", *STATES}
        self.all_declared = declared
        self.real_ids: list[str] = []

    def real(self, argv: Sequence[str]) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            list(argv), env=dict(self.cluster.env), capture_output=True, text=True, timeout=60
        )

    def ours(self, argv: Sequence[str]) -> subprocess.CompletedProcess[str]:
        return self.gw.run(list(argv), cwd=self.gw.workdir)

    def both(self, argv: Sequence[str]) -> tuple[str, str]:
        real, ours = self.real(argv), self.ours(argv)
        assert real.returncode == 0, real.stderr
        assert (ours.returncode, ours.stderr) == (0, ""), ours.stderr
        return real.stdout, ours.stdout

    def sbatch(self, *args: str) -> tuple[tuple[int, str, str], tuple[int, str, str]]:
        out = []
        for run in (self.real, self.ours):
            r = run(["sbatch", "--parsable", "-o", "/dev/null", *args])
            job = r.stdout.strip() if r.returncode == 0 else ""
            if run == self.real and job:
                self.real_ids.append(job)
            out.append((r.returncode, job, r.stderr))
        return out[0], out[1]

    def squeue(self, run: str, job: str, fmt: Sequence[str]) -> str:
        r = (self.real if run == "real" else self.ours)(["squeue", "-h", "-j", job, *fmt])
        return r.stdout.strip()

    def wait(
        self, run: str, job: str, fmt: str, want: str, timeout: float = 90, prefix: bool = False
    ) -> str:
        """The job's `squeue -o fmt` once it is `want` (or starts so), or the last seen."""
        deadline = time.monotonic() + timeout
        while True:
            got = self.squeue(run, job, ["-o", fmt])
            if got == want or (prefix and got.startswith(want)) or time.monotonic() > deadline:
                return got
            time.sleep(0.3)

    def wait_done(self, run: str, job: str, timeout: float = 90) -> str:
        """The job's state once it is neither pending nor running (or the last seen)."""
        deadline = time.monotonic() + timeout
        while True:
            got = self.squeue(run, job, ["-t", "all", "-o", "%T"])
            if got not in ("PENDING", "RUNNING", "COMPLETING") or time.monotonic() > deadline:
                return got
            time.sleep(0.3)


@pytest.fixture(scope="module")
def pair(cluster: SlurmStack) -> Iterator[Pair]:
    base = Path(tempfile.mkdtemp(prefix="h6a-site-", dir="/tmp"))
    text = "\n".join([cluster.slurm_conf.read_text(), LIMITED, *STATES.values(), ""])
    (base / "slurm.conf").write_text(text)
    (base / "topology.conf").write_text((cluster.slurm_conf.parent / "topology.conf").read_text())
    declared = frozenset(p.name for p in parse_slurm_conf(text).partitions)
    gw = start_gateway(base, f'[local]\nslurm_conf = "{base / "slurm.conf"}"\n')
    p = Pair(cluster, gw, declared)
    try:
        yield p
    finally:
        cancel(*p.real_ids, env=cluster.env)
        gw.run(["scancel", "-u", "root"])
        discard_gateway(gw, base)


def _cpus(line: str) -> str:
    return _CPUS.sub(lambda m: f"{int(m[1]) + int(m[2])}/{m[3]}/{m[4]}", line)


def _norm(line: str) -> str:
    """States (and the padding of their right-aligned column) and allocated CPUs out."""
    return _cpus(re.sub(r"\s*STATE", " STATE", _STATES.sub("STATE", line)))


def _partition_of(line: str) -> str:
    return line.split()[0].rstrip("*")


def _grouped_nodes(text: str, declared: frozenset[str]) -> dict[tuple[str, ...], list[str]]:
    """Default sinfo: per (PARTITION, AVAIL, TIMELIMIT), the nodes of all its state rows."""
    out: dict[tuple[str, ...], list[str]] = {}
    for line in text.splitlines()[1:]:
        part, avail, limit, _count, _state, nodelist = line.split()
        if part.rstrip("*") in declared:
            out.setdefault((part, avail, limit), []).extend(expand(nodelist))
    return {k: sorted(v) for k, v in out.items()}


def test_default_sinfo_lists_the_same_partitions_limits_and_nodes(pair: Pair) -> None:
    real, ours = pair.both(["sinfo"])
    assert real.splitlines()[0] == ours.splitlines()[0]
    assert _grouped_nodes(ours, pair.declared) == _grouped_nodes(real, pair.declared)
    order = [_partition_of(ln) for ln in real.splitlines()[1:]]
    mine = [_partition_of(ln) for ln in ours.splitlines()[1:]]
    assert [p for p in dict.fromkeys(order) if p in pair.declared] == [
        p for p in dict.fromkeys(mine) if p in pair.declared
    ]


@pytest.mark.parametrize(
    "argv",
    [
        ["sinfo", "-N", "-l"],
        ["sinfo", "-N", "-o", "%N %P %G %f %C %m %w %z %c %X %Y %Z %d"],
        ["sinfo", "-N", "-o", "%20N %.12P %30G %25f %.15C %.8m %E"],
    ],
    ids=["-N -l", "-N -o fields", "-N -o widths"],
)
def test_sinfo_per_node_lines_agree(pair: Pair, argv: list[str]) -> None:
    real, ours = pair.both(argv)
    skip = 2 if "-l" in argv else 1  # -l prints the time first
    assert real.splitlines()[skip - 1] == ours.splitlines()[skip - 1]

    def lines(text: str) -> list[str]:
        rows = text.splitlines()[skip:]
        col = 2 if "-l" in argv else 1
        return sorted(_norm(r) for r in rows if r.split()[col].rstrip("*") in pair.declared)

    assert lines(ours) == lines(real)


@pytest.mark.parametrize(
    "fmt", ["%P %G %f %C %m %D %N", "%R %c %z %m %G %f", "%P %a %l %L %D %s %F"]
)
def test_sinfo_grouped_formats_agree(pair: Pair, fmt: str) -> None:
    real, ours = pair.both(["sinfo", "-o", fmt])

    def lines(text: str) -> list[str]:
        rows = text.splitlines()
        return [rows[0], *sorted(_norm(r) for r in rows[1:] if _partition_of(r) in pair.declared)]

    assert lines(ours) == lines(real)


_NODE_FIELDS = [
    "NodeName",
    "CoresPerSocket",
    "CPUTot",
    "CPUEfctv",
    "AvailableFeatures",
    "ActiveFeatures",
    "Gres",
    "RealMemory",
    "Sockets",
    "Boards",
    "ThreadsPerCore",
    "TmpDisk",
    "Weight",
    "Owner",
    "MCS_label",
    "Partitions",
    "Reason",
    "CfgTRES",
    "NodeAddr",
    "Port",
]


@pytest.mark.parametrize(
    "node", ["node01", "node03", "node04", "big001", "big040", "big050", "big070", "big100"]
)
def test_show_node_declares_what_slurm_conf_declares(pair: Pair, node: str) -> None:
    real, ours = pair.both(["scontrol", "show", "node", node])
    (r,), (o,) = parse_scontrol_records(real), parse_scontrol_records(ours)
    for key in _NODE_FIELDS:
        if key == "Partitions":  # a partition others created at run time is not ours

            def declared(text: str) -> list[str]:
                return [p for p in text.split(",") if p in pair.declared]

            assert declared(o.get(key, "")) == declared(r.get(key, "")), key
        else:
            assert o.get(key) == r.get(key), key


@pytest.mark.parametrize("node", ["node01", "node03", "node04", "big001", "big070", "big100"])
def test_show_node_details_give_gres_drain_and_gres_used_in_gres_types_order(
    pair: Pair, node: str
) -> None:
    """`scontrol -d show node`: GresDrain=N/A and GresUsed= per GresType of slurm.conf, in
    its order (`gpu:a100:0(IDX:N/A)` on a node whose slurmd registered its devices,
    `gpu:v100:0` on one with no slurmd). Counts and indices are masked on the real nodes
    (others' jobs may hold their GPUs), compared on the big* ones."""
    real, ours = pair.both(["scontrol", "-d", "show", "node", node])
    (r,), (o,) = parse_scontrol_records(real), parse_scontrol_records(ours)
    assert o["GresDrain"] == r["GresDrain"] == "N/A"

    def held(text: str) -> str:
        return re.sub(r":\d+(\(IDX:[^)]*\))?", lambda m: ":N" + ("(IDX)" if m[1] else ""), text)

    mask = held if node.startswith("node") else (lambda text: text)
    assert mask(o["GresUsed"]) == mask(r["GresUsed"])
    config = pair.both(["scontrol", "show", "config"])
    real_types, our_types = (re.findall(r"^GresTypes\s*=\s*(\S+)", c, re.M) for c in config)
    assert our_types == real_types == ["gpu,craynetwork,qpu"]


def test_show_partition_agrees_on_every_declared_partition(pair: Pair) -> None:
    real, ours = pair.both(["scontrol", "show", "partition"])
    mine = {r["PartitionName"]: r for r in parse_scontrol_records(ours)}
    theirs = {r["PartitionName"]: r for r in parse_scontrol_records(real)}
    assert set(mine) == pair.all_declared
    for name in sorted(pair.declared):
        r, o = dict(theirs[name]), dict(mine[name])
        if "license/SCRATCH=" not in r["TRES"]:  # the cluster's slurmdbd spelling (above)
            o["TRES"] = re.sub(r",license/SCRATCH=\d+", "", o["TRES"])
        assert o == r, name


def test_show_licenses_agrees(pair: Pair) -> None:
    for argv in (
        ["scontrol", "show", "licenses"],
        ["scontrol", "-o", "show", "lic"],
        ["scontrol", "show", "lic", "matlab"],
        ["scontrol", "show", "lic", "nosuch"],
    ):
        real, ours = pair.both(argv)
        if re.search(r"Used=[1-9]", real):  # another user's job holds a licence now
            real = re.sub(r"Used=\d+ Free=\d+", "Used=* Free=*", real)
            ours = re.sub(r"Used=\d+ Free=\d+", "Used=* Free=*", ours)
        assert ours == real, argv


@pytest.mark.parametrize(
    "spec", ["foo", "matlab:9", "matlab:1,matlab:8", "MATLAB", ":2", "matlab*2", "matlab|cfs"]
)
def test_an_invalid_licence_request_is_refused_with_slurms_words(pair: Pair, spec: str) -> None:
    (rc_r, _, err_r), (rc_o, _, err_o) = pair.sbatch(
        "--hold", "-p", "real", "-L", spec, "--wrap=true"
    )
    assert rc_r != 0, "real Slurm is expected to refuse"
    assert (rc_o, err_o) == (rc_r, err_r)


def test_a_job_waits_for_licences_in_use_and_runs_once_they_are_released(pair: Pair) -> None:
    (_, hold_r, _), (_, hold_o, _) = pair.sbatch(
        "--hold", "-p", "real", "-L", "matlab:2;cfs", "--wrap=true"
    )
    fmt = ["-o", "%W|%r"]
    assert pair.squeue("ours", hold_o, fmt) == pair.squeue("real", hold_r, fmt)
    for run, job in (("real", hold_r), ("ours", hold_o)):
        assert pair.squeue(run, job, ["-O", "licenses"]) == "matlab:2;cfs"
        show = (pair.real if run == "real" else pair.ours)(["scontrol", "show", "job", job])
        assert "Licenses=matlab:2;cfs " in show.stdout, run
    (_, big_r, _), (_, big_o, _) = pair.sbatch("-p", "real", "-L", "matlab:8", "--wrap=sleep 8")
    (_, small_r, _), (_, small_o, _) = pair.sbatch(
        "-p", "real", "-L", "matlab:1,cfs:3", "--wrap=true"
    )
    for run, big, small in (("real", big_r, small_r), ("ours", big_o, small_o)):
        assert pair.wait(run, big, "%T", "RUNNING") == "RUNNING", run
        assert pair.wait(run, small, "%T|%r|%W", "PENDING|Licenses|matlab:1,cfs:3") == (
            "PENDING|Licenses|matlab:1,cfs:3"
        ), run
    real, ours = pair.both(["scontrol", "show", "lic", "matlab"])
    assert ours == real
    assert "Used=8 Free=0" in ours
    for run, small in (("real", small_r), ("ours", small_o)):
        assert pair.wait_done(run, small) in ("", "COMPLETED"), f"{run}: job {small} never ran"
    real, ours = pair.both(["scontrol", "show", "lic", "matlab"])
    assert ours == real
    assert "Used=0 Free=8" in ours


@pytest.fixture
def limited(pair: Pair) -> Iterator[Pair]:
    """The `h6alim` partition on the real cluster too, for the duration of one test."""
    words = LIMITED.split()
    r = pair.real(["scontrol", "create", *words])
    assert r.returncode == 0, r.stderr
    try:
        yield pair
    finally:  # slurmctld deletes no partition that still has jobs
        cancel(*pair.real_ids, env=pair.cluster.env)
        deadline = time.monotonic() + 60
        while pair.real(["squeue", "-h", "-p", "h6alim"]).stdout.strip():
            if time.monotonic() > deadline:
                break
            time.sleep(0.5)
        gone = pair.real(["scontrol", "delete", "PartitionName=h6alim"])
        assert gone.returncode == 0, gone.stderr


def test_partition_limits_defaults_and_oversubscribe_agree(limited: Pair) -> None:
    pair = limited
    real, ours = pair.both(["scontrol", "show", "partition", "h6alim"])
    (r,), (o,) = parse_scontrol_records(real), parse_scontrol_records(ours)
    for rec in (r, o):
        rec.pop("TRES"), rec.pop("MinNodes")
    assert o == r
    fmt = "%P %a %h %l %L %s %D %N %C"
    real, ours = pair.both(["sinfo", "-p", "h6alim", "-o", fmt])
    assert [_norm(x) for x in ours.splitlines()] == [_norm(x) for x in real.splitlines()]
    cases = (
        (("-N", "2"), "PartitionNodeLimit"),
        (("-t", "20"), "PartitionTimeLimit"),
        (("--hold",), "JobHeldUser"),
    )
    fmt = "%r|%m|%l|%h"
    for args, reason in cases:
        (rc_r, job_r, err_r), (rc_o, job_o, err_o) = pair.sbatch(
            "-p", "h6alim", *args, "--wrap=true"
        )
        assert (rc_o, err_o) == (rc_r, err_r) == (0, "")
        want = pair.wait("real", job_r, "%r", reason)
        assert want == reason
        assert pair.wait("ours", job_o, "%r", reason) == reason
        assert pair.squeue("ours", job_o, ["-o", fmt]) == pair.squeue("real", job_r, ["-o", fmt])
        for key in ("MinMemoryCPU", "OverSubscribe", "TimeLimit", "NumNodes"):
            rr = pair.real(["scontrol", "show", "job", job_r]).stdout
            oo = pair.ours(["scontrol", "show", "job", job_o]).stdout
            pick = re.compile(rf"\b{key}=(\S+)")
            assert pick.findall(oo) == pick.findall(rr), key
    # OverSubscribe=EXCLUSIVE: one job per node, so the third of three one-CPU jobs waits
    jobs = [pair.sbatch("-p", "h6alim", "--wrap=sleep 20") for _ in range(3)]
    for i, run in ((0, "real"), (1, "ours")):
        ids = [j[i][1] for j in jobs]
        running = [pair.wait(run, j, "%T %N", "RUNNING ", 90, prefix=True) for j in ids[:2]]
        nodes = sorted(got.split()[-1] for got in running)
        assert nodes == ["node01", "node02"], (run, running)
        # Slurm may first say Priority (the job was tried while the two were still pending)
        # and says Resources from its next scheduling pass (backfill: within 30 s)
        assert pair.wait(run, ids[2], "%T %r", "PENDING Resources") == "PENDING Resources", run
        if run == "real":
            cancel(*ids, env=pair.cluster.env)
        else:
            pair.ours(["scancel", *ids])


@pytest.fixture
def states(pair: Pair) -> Iterator[Pair]:
    """The DRAIN, INACTIVE and DOWN partitions on the real cluster too, for one test."""
    for line in STATES.values():
        r = pair.real(["scontrol", "create", *line.split()])
        assert r.returncode == 0, r.stderr
    try:
        yield pair
    finally:
        cancel(*pair.real_ids, env=pair.cluster.env)
        for name in STATES:
            deadline = time.monotonic() + 60
            while pair.real(["squeue", "-h", "-p", name]).stdout.strip():
                if time.monotonic() > deadline:
                    break
                time.sleep(0.5)
            gone = pair.real(["scontrol", "delete", f"PartitionName={name}"])
            assert gone.returncode == 0, gone.stderr


def test_partition_states_are_shown_and_enforced_as_slurm_does(states: Pair) -> None:
    pair = states
    names = ",".join(STATES)
    real, ours = pair.both(["sinfo", "-p", names, "-o", "%P %a %l %D %N"])
    assert ours == real
    for name in STATES:
        real, ours = pair.both(["scontrol", "show", "partition", name])
        (r,), (o,) = parse_scontrol_records(real), parse_scontrol_records(ours)
        for rec in (r, o):
            rec.pop("TRES"), rec.pop("MinNodes")
        assert o == r, name
    for name in ("h6adrain", "h6ainact"):
        (rc_r, _, err_r), (rc_o, _, err_o) = pair.sbatch("--hold", "-p", name, "--wrap=true")
        assert rc_r != 0, "real Slurm is expected to refuse"
        assert (rc_o, err_o) == (rc_r, err_r)
    (rc_r, job_r, _), (rc_o, job_o, _) = pair.sbatch("-p", "h6adown", "--wrap=true")
    assert rc_r == rc_o == 0
    assert pair.wait("real", job_r, "%r", "PartitionDown") == "PartitionDown"
    assert pair.wait("ours", job_o, "%r", "PartitionDown") == "PartitionDown"
