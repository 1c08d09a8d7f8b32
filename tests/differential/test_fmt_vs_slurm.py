"""Caldera's squeue/sacct/sinfo/scontrol formatters against the real Slurm 22.05 commands.

A varied set of real jobs is submitted to the test cluster (held, a throttled array, sleeps
pinned to node01..node04, a completed, a failed `exit 3`, a cancelled and a two-node job,
one with a dependency, GPUs, a comment and a file pattern). Their state is read with
`squeue --json`, `sacct --json` and `sinfo --json` (plus slurmrestd's partitions, which
22.05's sinfo does not print), translated into Caldera's model by
`slurm_plugin.from_slurm_json`, formatted by `gateway.compat.*_fmt`, and compared with the
text the real commands print at the same moment.

The cluster is shared and alive: a snapshot counts only when the JSON read before and after
the text agrees on the jobs (or nodes) compared, and moving times (RunTime, TIME, Elapsed)
are matched against every second between the two reads. Two facts the JSON does not carry
are masked: `AllocNode:Sid` of `scontrol show job`, and the per-partition order of a node
listed in several partitions by `sinfo -N` (real sinfo builds those records in parallel
threads, so their order varies from run to run; the lines are compared as a multiset).
"""

from __future__ import annotations

import difflib
import json
import os
import re
import subprocess
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from gateway.compat.job_fields import SiteDefaults
from gateway.compat.sacct_fmt import SacctOptions, render_sacct
from gateway.compat.sacct_fmt_json import sacct_json_doc
from gateway.compat.show_fmt import show_job, show_nodes, show_partitions
from gateway.compat.sinfo_fmt import SinfoOptions, render_sinfo
from gateway.compat.sinfo_fmt_json import partitions_json_doc, sinfo_json
from gateway.compat.squeue_fmt import SqueueOptions, render_squeue
from gateway.compat.squeue_fmt_json import squeue_json
from gateway.model.state import JobState
from slurm_plugin.from_slurm_json import (
    SlurmCluster,
    cluster_from_sinfo_json,
    exit_codes_from_sacct,
    jobs_from_sacct_json,
    jobs_from_squeue_json,
)
from tests.support.slurm_stack import (
    SlurmStack,
    cancel,
    job_id_from_sbatch,
    rest_get,
    run_sbatch,
    wait_job,
)

pytestmark = pytest.mark.slurm

SITE = SiteDefaults(default_partition="debug", def_mem_per_cpu_mb=100)
MAX_ARRAY_SIZE = 100001  # the test cluster's MaxArraySize
ATTEMPTS = 8


def _run(env: dict[str, str], *argv: str) -> str:
    proc = subprocess.run(argv, env=env, capture_output=True, check=False, timeout=120)
    assert proc.returncode == 0, (argv, proc.stderr.decode(errors="replace"))
    return proc.stdout.decode("utf-8", "surrogateescape")


def _diff(real: str, mine: str) -> str:
    lines = difflib.unified_diff(
        real.splitlines(), mine.splitlines(), "slurm", "caldera", lineterm="", n=1
    )
    return "\n".join(list(lines)[:60])


@dataclass
class Workload:
    """The submitted jobs and how to talk to the cluster."""

    env: dict[str, str]
    ids: list[str]
    array_id: str

    def run(self, *argv: str) -> str:
        return _run(self.env, *argv)


def _submit(cluster: SlurmStack, workdir: Path, argv: list[str], script: str | None = None) -> str:
    proc = run_sbatch(script, ["--parsable", *argv], cluster.env_dict(), workdir)
    assert proc.returncode == 0, proc.stderr
    return job_id_from_sbatch(proc.stdout)


@pytest.fixture(scope="module")
def workload(slurm_cluster: SlurmStack) -> Iterator[Workload]:
    workdir = slurm_cluster.jobs_dir / f"fmtdiff-{os.getpid()}"
    workdir.mkdir(mode=0o777, exist_ok=True)
    out = ["-o", str(workdir / "%x-%j.out")]
    ids: list[str] = []

    def sub(argv: list[str], script: str | None = None) -> str:
        job_id = _submit(slurm_cluster, workdir, argv, script)
        ids.append(job_id)
        return job_id

    try:
        held = sub(["--hold", "-p", "debug", "-J", "fmt-held", "--mem=500", *out, "--wrap", "true"])
        # fields only some jobs carry: 22.05 prints them (and misspells one) only when set
        freq = ["--cpu-freq=1000-2000:performance", "--profile=task", "--delay-boot=10"]
        sub(["--hold", "-p", "debug", "-J", "fmt-freq", *freq, *out, "--wrap", "true"])
        sub(["--hold", "-p", "debug", "-J", "fmt-high", "--cpu-freq=high", *out, "--wrap", "true"])
        array_id = sub(
            [
                "-p",
                "real",
                "--array=0-9%1",
                "-t",
                "10",
                "-J",
                "fmt-array",
                "-o",
                str(workdir / "%A_%a.out"),
                "--wrap",
                "sleep 240",
            ]
        )
        for n in range(1, 5):
            sub(
                [
                    "-p",
                    "real",
                    "-w",
                    f"node0{n}",
                    "-t",
                    "30",
                    "-J",
                    f"fmt-run-{n}",
                    *out,
                    "--wrap",
                    "sleep 600",
                ]
            )
        ok = sub(["-p", "real", "-J", "fmt-ok", *out, "--wrap", "true"])
        fail = sub(["-p", "real", "-J", "fmt-fail", *out], "#!/bin/bash\nexit 3\n")
        doomed = sub(["-p", "real", "-J", "fmt-cancel", "-t", "5", *out, "--wrap", "sleep 600"])
        sub(["-p", "real", "-N2", "-t", "20", "-J", "fmt-multi", *out, "--wrap", "srun sleep 600"])
        sub(
            [
                "-p",
                "debug",
                "-J",
                "fmt-dep",
                f"--dependency=afterok:{held}",
                "-c",
                "2",
                "--comment=formatter check",
                "--gres=gpu:1",
                "--mem-per-cpu=150",
                *out,
                "--wrap",
                "true",
            ]
        )
        wait_job(ok, timeout=120)
        wait_job(fail, timeout=120)
        time.sleep(2)
        cancel(doomed)
        wait_job(doomed, timeout=60)
        time.sleep(3)  # let slurmdbd record the ends
        yield Workload(slurm_cluster.env_dict(), ids, array_id)
    finally:
        cancel(*ids)


# --- snapshots -------------------------------------------------------------------------


def _ok(*docs: str) -> bool:
    """slurmctld answered (a busy controller returns an error and no jobs)."""
    return all(not json.loads(d)["errors"] for d in docs)


def _job_key(doc: str, ids: set[int], array_id: int) -> list[tuple[Any, ...]]:
    return sorted(
        (
            j["job_id"],
            j["job_state"],
            j["state_reason"],
            j["array_task_string"],
            j["nodes"],
            j["end_time"],
        )
        for j in json.loads(doc)["jobs"]
        if j["job_id"] in ids or j["array_job_id"] == array_id
    )


def _squeue_snapshot(w: Workload, argv: Sequence[str]) -> tuple[str, str, float, float]:
    ids = {int(i) for i in w.ids}
    for _ in range(ATTEMPTS):
        before = w.run("squeue", "--json")
        t0 = time.time()
        text = w.run("squeue", *argv)
        t1 = time.time()
        after = w.run("squeue", "--json")
        same = _job_key(before, ids, int(w.array_id)) == _job_key(after, ids, int(w.array_id))
        if same and _ok(before, after):
            return after, text, t0, t1
        time.sleep(0.5)
    pytest.fail(f"no stable snapshot of the jobs for squeue {argv}")


def _matches(real: str, render: Callable[[float], str], t0: float, t1: float) -> str | None:
    """None when some `now` between the reads renders the real text, else the diff."""
    mine = ""
    for now in range(int(t0) - 1, int(t1) + 2):
        mine = render(float(now))
        if mine == real:
            return None
    return _diff(real, mine)


SQUEUE_VIEWS: list[tuple[list[str], dict[str, Any]]] = [
    ([], {}),
    (["-l"], {"long": True}),
    (["-h"], {"noheader": True}),
    (["--start"], {"start": True}),
    (["-r"], {"array": True}),
    (["-t", "all"], {"all_states": True}),
    (["-t", "all", "-r", "-S", "-i"], {"all_states": True, "array": True, "sort": "-i"}),
    (["-t", "all", "-o", "%.18i %9P %.12j %8u %.2t %.10M %.9l %.6D %R"], {"all_states": True}),
    (
        [
            "-t",
            "all",
            "-o",
            "%A|%F|%K|%i|%j|%T|%r|%C|%m|%b|%c|%d|%h|%q|%a|%E|%f|%k|%o|%Z|%y|%z|%p|%Q",
        ],
        {"all_states": True},
    ),
    (["-t", "all", "-o", "x%%y %.3i%%%5j%-9P %S %e %V %L"], {"all_states": True}),
    (
        [
            "-t",
            "all",
            "-O",
            "JobID:10,Name:.20,ArrayJobID,ArrayTaskID:8,StateCompact,State,"
            "TimeUsed,TimeLimit,NumNodes,ReasonList,Partition,NumCPUs,MinMemory",
        ],
        {"all_states": True},
    ),
    (
        [
            "-t",
            "all",
            "-O",
            "jobarrayid:.20|,numtasks,stdout:.40,stderr:30,stdin,tres:40,"
            "submittime,starttime,endtime,eligibletime,pendingtime,exit_code,command,workdir",
        ],
        {"all_states": True},
    ),
    (
        ["-t", "PD,R", "-S", "u,-M,l"],
        {"states": (JobState.PENDING, JobState.RUNNING), "sort": "u,-M,l"},
    ),
]


def _squeue_opts(argv: list[str], extra: dict[str, Any], ids: tuple[str, ...]) -> SqueueOptions:
    kw = dict(extra)
    if "-o" in argv:
        kw["format"] = argv[argv.index("-o") + 1]
    if "-O" in argv:
        kw["format_long"] = argv[argv.index("-O") + 1]
    return SqueueOptions(job_ids=ids, max_array_size=MAX_ARRAY_SIZE, site=SITE, **kw)


@pytest.mark.parametrize(
    ("argv", "extra"), SQUEUE_VIEWS, ids=lambda v: " ".join(v) if isinstance(v, list) else ""
)
def test_squeue_text_matches_slurm(
    workload: Workload, argv: list[str], extra: dict[str, Any]
) -> None:
    ids = tuple(workload.ids)
    doc, real, t0, t1 = _squeue_snapshot(workload, ["-j", ",".join(ids), *argv])
    jobs = jobs_from_squeue_json(doc)
    opts = _squeue_opts(argv, extra, ids)

    def render(now: float) -> str:
        return render_squeue(jobs.jobs, opts, now=now, extras=jobs.extras)

    assert len(real.splitlines()) >= 2 or "-h" in argv
    diff = _matches(real, render, t0, t1)
    assert diff is None, diff


def _strip_allocation(doc: dict[str, Any]) -> dict[str, Any]:
    """Keep which nodes a job has, not how its cores and memory spread over them."""
    for job in doc["jobs"]:
        res = job.get("job_resources", {})
        if "allocated_nodes" in res:
            res["allocated_nodes"] = [n["nodename"] for n in res["allocated_nodes"]]
    return doc


def test_squeue_json_matches_slurm(workload: Workload) -> None:
    """This module's jobs round-trip to the same document (squeue --json of 22.05 ignores
    -j and lists every job slurmctld holds; other sessions' jobs are not compared: a job
    another test left within MinJobAge may use what Caldera's model has no place for). Only
    the per-node spread of allocated cores and memory (socket/core ids, CPUs and memory per
    node, steps' usage) is not in Caldera's model."""
    for _ in range(ATTEMPTS):  # slurmctld may answer "Failed while looking for jobs"
        raw = workload.run("squeue", "--json")
        if not json.loads(raw)["errors"]:
            break
        time.sleep(0.5)
    from gateway.compat.fmt_common import json_c_dumps

    # the serialiser writes json-c's bytes for the whole document, whoever's jobs it holds
    assert json_c_dumps(json.loads(raw)) == raw
    ours = set(workload.ids) | {workload.array_id}
    real_doc = json.loads(raw)
    real_doc["jobs"] = [
        j for j in real_doc["jobs"] if str(j["array_job_id"] or j["job_id"]) in ours
    ]
    assert len(real_doc["jobs"]) >= len(workload.ids)
    jobs = jobs_from_squeue_json(json_c_dumps(real_doc))
    mine = squeue_json(jobs.jobs, extras=jobs.extras)
    assert not mine.endswith("\n")
    mine_doc = json.loads(mine)
    assert [list(j) for j in real_doc["jobs"]] == [list(j) for j in mine_doc["jobs"]]
    real_text = json_c_dumps(real_doc)
    assert _strip_allocation(json.loads(real_text)) == _strip_allocation(mine_doc)
    # with the real allocations the text is byte for byte Slurm's
    for real_job, my_job in zip(real_doc["jobs"], mine_doc["jobs"], strict=True):
        if "job_resources" in real_job:
            my_job["job_resources"] = real_job["job_resources"]
    assert json_c_dumps(mine_doc) == real_text


# --- sacct -----------------------------------------------------------------------------

SACCT_FIELDS = (
    "JobID,JobIDRaw,JobName,Partition,Account,State,ExitCode,DerivedExitCode,Elapsed,"
    "ElapsedRaw,Start,End,Submit,Eligible,NNodes,AllocNodes,NodeList,User,UID,Group,GID,"
    "ReqMem,ReqCPUS,AllocCPUS,NCPUS,NTasks,Timelimit,TimelimitRaw,Reason,QOS,Priority,"
    "Cluster,WorkDir,AllocTRES,ReqTRES,Flags,CPUTime,CPUTimeRAW,Reserved,Constraints,"
    "Reservation,WCKey,MaxRSS"
)
SACCT_VIEWS: list[tuple[list[str], dict[str, Any]]] = [
    ([], {}),
    (["-X"], {"allocations": True}),
    (["-P"], {"parsable2": True}),
    (["-p", "-n"], {"parsable": True, "noheader": True}),
    (["-b"], {"brief": True}),
    (
        [
            "-o",
            "jobid%15,jobname%-20,state%12,start%10,nodelist%.10,end%25,elapsed%4,"
            "alloccpus%-3,exitcode%3",
        ],
        {},
    ),
    (["-o", SACCT_FIELDS], {}),
    (["-P", "-o", SACCT_FIELDS], {"parsable2": True}),
]


def _sacct_key(doc: str) -> list[tuple[Any, ...]]:
    return sorted(
        (
            j["job_id"],
            j["state"]["current"],
            j["nodes"],
            j["time"]["end"],
            len(j["steps"]),
            tuple((s["state"], s["time"]["end"]) for s in j["steps"]),
        )
        for j in json.loads(doc)["jobs"]
    )


@pytest.mark.parametrize(
    ("argv", "extra"), SACCT_VIEWS, ids=lambda v: " ".join(v)[:60] if isinstance(v, list) else ""
)
def test_sacct_text_matches_slurm(
    workload: Workload, argv: list[str], extra: dict[str, Any]
) -> None:
    sel = ["-j", ",".join(workload.ids)]
    for _ in range(ATTEMPTS):
        before = workload.run("sacct", *sel, "--json")
        codes = workload.run("sacct", *sel, "-P", "-n", "-o", "JobIDRaw,ExitCode,DerivedExitCode")
        t0 = time.time()
        real = workload.run("sacct", *sel, *argv)
        t1 = time.time()
        after = workload.run("sacct", *sel, "--json")
        if _sacct_key(before) == _sacct_key(after) and _ok(before, after):
            break
        time.sleep(0.5)
    else:
        pytest.fail("no stable sacct snapshot")
    acct = jobs_from_sacct_json(after, exit_codes=exit_codes_from_sacct(codes))
    kw = dict(extra)
    if "-o" in argv:
        kw["fields"] = argv[argv.index("-o") + 1]
    opts = SacctOptions(site=SITE, **kw)

    def render(now: float) -> str:
        return render_sacct(acct.jobs, acct.steps, opts, now=now, extras=acct.extras)

    assert "3:0" in real or "-b" not in argv
    diff = _matches(real, render, t0, t1)
    assert diff is None, diff


# step usage statistics (TRES usage, CPU times, frequencies, task layout) are not in the
# model; the allocated TRES list may carry an "energy" entry slurmdbd keeps from the start.
_SACCT_JSON_SKIP = (
    ".steps[].tres.requested",
    ".steps[].tres.consumed",
    ".steps[].time.total",
    ".steps[].time.user",
    ".steps[].time.system",
    ".steps[].CPU",
    ".steps[].task",
    ".tres.allocated",
    ".steps[].time.elapsed",
    ".time.elapsed",
)


def _compare(a: Any, b: Any, path: str, out: list[str]) -> None:
    if any(path.startswith(p) for p in _SACCT_JSON_SKIP):
        return
    if isinstance(a, dict) and isinstance(b, dict):
        if list(a) != list(b):
            out.append(f"{path}: keys {list(a)} != {list(b)}")
        for key in a:
            _compare(a[key], b.get(key), f"{path}.{key}", out)
    elif isinstance(a, list) and isinstance(b, list) and path.endswith("steps"):
        if len(a) != len(b):
            out.append(f"{path}: {len(a)} steps != {len(b)}")
        for x, y in zip(a, b, strict=False):
            _compare(x, y, f"{path}[]", out)
    elif a != b:
        out.append(f"{path}: {a!r} != {b!r}")


def test_sacct_json_matches_slurm(workload: Workload) -> None:
    """dbv0.0.38's document, including 22.05's exit codes (a failed job says SUCCESS)."""
    sel = ["-j", ",".join(workload.ids)]
    for _ in range(ATTEMPTS):
        raw = workload.run("sacct", *sel, "--json")
        if _ok(raw):
            break
        time.sleep(0.5)
    now = time.time()
    acct = jobs_from_sacct_json(raw)
    mine: Any = sacct_json_doc(
        acct.jobs, acct.steps, now=now, extras=acct.extras, tres_ids=acct.tres_ids
    )
    real = json.loads(raw)
    assert real["meta"] == mine["meta"]
    for job in real["jobs"]:
        # slurmdbd 22.05 with a second cluster in the same database (testenv's `burst`)
        # finds a job's association by its id alone, across every cluster's table, and
        # names the first cluster that has that id: a job of `caldera` is shown with the
        # association of `burst`. Caldera names the job's own cluster, as 22.05 does for a
        # database of one cluster (this test's expectation before the second cluster).
        assoc = job.get("association") or {}
        if assoc.get("cluster") not in (None, job["cluster"]):
            assoc["cluster"] = job["cluster"]
    problems: list[str] = []
    assert len(real["jobs"]) == len(mine["jobs"])
    for a, b in zip(real["jobs"], mine["jobs"], strict=True):
        _compare(a, b, "", problems)
    assert not problems, "\n".join(problems[:40])


# --- sinfo -----------------------------------------------------------------------------

SINFO_VIEWS: list[tuple[list[str], dict[str, Any]]] = [
    ([], {}),
    (["-l"], {"long": True}),
    (["-s"], {"summarize": True}),
    (["-N"], {"node_view": True}),
    (["-N", "-l"], {"node_view": True, "long": True}),
    (["-p", "real", "-N", "-l"], {"node_view": True, "long": True, "partitions": ("real",)}),
    (
        [
            "-o",
            "%P %a %l %D %t %N %c %m %G %f %z %C %F %A %E %T %d %w %O %e %R %s %g %h %X %Y "
            "%Z %b %L %p %I %B",
        ],
        {},
    ),
    (["-o", "%20N %.6t %c %10P"], {}),
    (["-O", "partition:.15,nodes,statelong,nodelist:30,cpusstate,gres:15,statecomplete"], {}),
    (["-t", "idle,mix,alloc"], {"states": ("idle", "mix", "alloc")}),
    (["-e", "-o", "%P %c %m %D %t"], {"exact": True}),
    (["-h", "-p", "real,debug"], {"noheader": True, "partitions": ("real", "debug")}),
]


def _node_key(doc: str) -> list[tuple[Any, ...]]:
    return [
        (
            n["name"],
            n["state"],
            n["state_flags"],
            n["alloc_cpus"],
            n["alloc_memory"],
            n["cpu_load"],
            n["free_memory"],
            n["reason"],
        )
        for n in json.loads(doc)["nodes"]
    ]


def _cluster_snapshot(
    w: Workload, commands: Sequence[Sequence[str]]
) -> tuple[SlurmCluster, list[str], float, float]:
    for _ in range(ATTEMPTS):
        before = w.run("sinfo", "--json")
        parts = rest_get("/slurm/v0.0.38/partitions")
        t0 = time.time()
        texts = [w.run(*c) for c in commands]
        t1 = time.time()
        after = w.run("sinfo", "--json")
        if _node_key(before) == _node_key(after) and _ok(before, after):
            return cluster_from_sinfo_json(after, parts), texts, t0, t1
        time.sleep(0.5)
    pytest.fail("no stable snapshot of the nodes")


@pytest.mark.parametrize(
    ("argv", "extra"), SINFO_VIEWS, ids=lambda v: " ".join(v)[:60] if isinstance(v, list) else ""
)
def test_sinfo_text_matches_slurm(
    workload: Workload, argv: list[str], extra: dict[str, Any]
) -> None:
    sc, (real,), t0, t1 = _cluster_snapshot(workload, [["sinfo", *argv]])
    kw = dict(extra)
    if "-o" in argv:
        kw["format"] = argv[argv.index("-o") + 1]
    if "-O" in argv:
        kw["format_long"] = argv[argv.index("-O") + 1]
    opts = SinfoOptions(**kw)

    def render(now: float) -> str:
        return render_sinfo(
            sc.cluster,
            opts,
            now=now,
            node_extras=sc.node_extras,
            partition_extras=sc.partition_extras,
        )

    diff = _matches(real, render, t0, t1)
    if diff is not None and opts.node_view and not opts.partitions:
        # same lines; a node's records across partitions come in thread order in Slurm
        mine = render(t1)
        real_lines, my_lines = real.splitlines(), mine.splitlines()
        if opts.long:
            real_lines, my_lines = real_lines[1:], my_lines[1:]
        assert sorted(real_lines) == sorted(my_lines), _diff(real, mine)
        assert [ln.split()[0] for ln in real_lines] == [ln.split()[0] for ln in my_lines]
        return
    assert diff is None, diff


def test_sinfo_json_matches_slurm(workload: Workload) -> None:
    for _ in range(ATTEMPTS):
        raw = workload.run("sinfo", "--json")
        if _ok(raw):
            break
        time.sleep(0.5)
    parts = rest_get("/slurm/v0.0.38/partitions")
    sc = cluster_from_sinfo_json(raw, parts)
    assert sinfo_json(sc.cluster, node_extras=sc.node_extras) == raw
    assert partitions_json_doc(sc.cluster, partition_extras=sc.partition_extras) == parts


# --- scontrol --------------------------------------------------------------------------

_ALLOC = re.compile(r"AllocNode:Sid=\S+")
# Slurm 22.05's JSON has no trace of the backfill flag (`flags` stays empty for a job backfill
# started), so Caldera can only say Main: a documented difference (docs/compatibility.md)
# that shows whenever backfill happens to start one of the workload's jobs
_SCHEDULER = re.compile(r"Scheduler=(Main|Backfill)")


def _mask(text: str) -> str:
    return _SCHEDULER.sub("Scheduler=*", _ALLOC.sub("AllocNode:Sid=*", text))


@pytest.mark.parametrize("one_liner", [False, True], ids=["multi-line", "one-liner"])
def test_scontrol_show_job_matches_slurm(workload: Workload, one_liner: bool) -> None:
    ids = {int(i) for i in workload.ids}
    flag = ["-o"] if one_liner else []
    for _ in range(ATTEMPTS):
        before = workload.run("squeue", "--json")
        t0 = time.time()
        real = workload.run("scontrol", *flag, "show", "job")
        t1 = time.time()
        after = workload.run("squeue", "--json")
        if _ok(before, after) and _job_key(before, ids, int(workload.array_id)) == _job_key(
            after, ids, int(workload.array_id)
        ):
            break
        time.sleep(0.5)
    else:
        pytest.fail("no stable snapshot for scontrol show job")
    jobs = jobs_from_squeue_json(after)
    sep = "\n" if one_liner else "\n\n"
    records = {
        int(m.group(1)): r + sep for r in real.split(sep) if (m := re.match(r"JobId=(\d+)", r))
    }
    compared = 0
    for job in jobs.jobs:
        if job.job_id not in ids and job.array_job_id != int(workload.array_id):
            continue
        expected = records[job.job_id]

        def render(now: float, job: Any = job) -> str:
            return _mask(
                show_job(
                    job, now=now, extras=jobs.extras[job.job_id], site=SITE, one_liner=one_liner
                )
            )

        diff = _matches(_mask(expected), render, t0, t1)
        assert diff is None, f"job {job.job_id}\n{diff}"
        compared += 1
    assert compared >= len(ids)


@pytest.mark.parametrize("one_liner", [False, True], ids=["multi-line", "one-liner"])
def test_scontrol_show_node_and_partition_match_slurm(workload: Workload, one_liner: bool) -> None:
    flag = ["-o"] if one_liner else []
    sc, (nodes, parts), _, _ = _cluster_snapshot(
        workload, [["scontrol", *flag, "show", "node"], ["scontrol", *flag, "show", "partition"]]
    )
    mine_nodes = show_nodes(sc.cluster, node_extras=sc.node_extras, one_liner=one_liner)
    assert mine_nodes == nodes, _diff(nodes, mine_nodes)
    mine_parts = show_partitions(
        sc.cluster, partition_extras=sc.partition_extras, one_liner=one_liner
    )
    assert mine_parts == parts, _diff(parts, mine_parts)
