"""Short-job throughput (issue 14 item 7): N `--wrap true` array tasks end to end.

The same jobs on Caldera's local site (4 virtual nodes x 2 CPUs, DefMemPerCPU=100, as the
test cluster's partition `real`) and on real Slurm (testenv/slurm, partition `real`), in
the same run. Submitted as arrays of at most 500 tasks, timed from the first sbatch until
every task is known finished by the scheduler (both: until `squeue -h -r -j IDS -o %i`,
asked every 0.25 s, lists none of them; Caldera's rendered by its gateway), then every
task's state is checked to be COMPLETED (Caldera: its API; Slurm: sacct).

Also the local runner alone (`runner`): LocalBackend.submit/poll driven directly with 8 runs
in flight (what the gateway would keep on 4 x 2 CPUs), so the runner's own rate is seen
apart from the gateway's scheduling cycle.

    python benchmarks/short_jobs.py [--jobs 500] [--slurm-jobs N] [--skip-slurm]
                                    [--cycle-interval S] [--latency N]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from containers.proc import reap_exited  # noqa: E402
from gateway.cli.fastclient import FastClient  # noqa: E402

CALDERA = [sys.executable, "-m", "gateway.cli.main"]
SLURM_CONF = os.environ.get("SLURM_CONF", "/tmp/caldera-slurm/etc/slurm.conf")
CHUNK = 500
SLURM_SBATCH = ["sbatch", "--parsable", "-p", "real", "-o", "/dev/null"]
SITE = (
    "def_mem_per_cpu_mb = 100\n"
    + "".join(f'[[nodes]]\nname = "node0{i}"\ncpus = 2\nmemory_mb = 2000\n' for i in range(1, 5))
    + '[[partitions]]\nname = "real"\nnodes = ["node01", "node02", "node03", "node04"]\n'
    + "default = true\n"
)


def arrays(n: int) -> list[str]:
    """`--array` specs of at most CHUNK tasks covering n tasks."""
    return [f"0-{min(CHUNK, n - start) - 1}" for start in range(0, n, CHUNK)]


@contextlib.contextmanager
def caldera(home: Path, toml: str) -> Iterator[tuple[dict[str, str], list[str], FastClient]]:
    """A gateway in `home` (up, then down): its environment, sbatch argv and API client."""
    home.mkdir()
    (home / "caldera.toml").write_text(toml)
    env = {**os.environ, "CALDERA_HOME": str(home), "CALDERA_SOCKET": str(home / "gateway.sock")}
    subprocess.run([*CALDERA, "up"], env=env, check=True, capture_output=True)
    try:
        shims = subprocess.run(
            [*CALDERA, "shims", str(home / "shims")],
            env=env,
            check=True,
            capture_output=True,
            text=True,
        ).stdout.strip()
        client = FastClient(env["CALDERA_SOCKET"])
        try:
            yield env, [f"{shims}/sbatch", "--parsable", "-o", "/dev/null"], client
        finally:
            client.close()
    finally:
        down = subprocess.Popen([*CALDERA, "down"], env=env, stdout=subprocess.DEVNULL)
        while down.poll() is None:  # reaping: `down` waits for the adopted gateway to go
            reap_exited()
            time.sleep(0.05)


def listed(client: FastClient, ids: list[str]) -> bool:
    """Whether `squeue -h -r -j IDS -o %i` lists any of them (rendered by the gateway, as
    Caldera's squeue has it rendered)."""
    query: dict[str, object] = {"format": "%i", "noheader": True, "array": True, "job_ids": ids}
    query["tz"] = os.environ.get("TZ")  # the gateway renders only in the caller's TZ
    status, doc = client.request("POST", "/v1/squeue/render", query)
    assert status == 200, doc
    assert "stdout" in doc, doc  # (not a fallback)
    return bool(doc["stdout"].strip())


def run_caldera(n: int, workdir: Path, cycle_s: float | None = None) -> dict[str, float]:
    home = workdir / f"caldera-{n}-{cycle_s}"
    cadence = "" if cycle_s is None else f"cycle_interval_s = {cycle_s}\n"
    with caldera(home, cadence + SITE) as (env, sbatch, client):
        t0 = time.monotonic()
        ids = [
            subprocess.run(
                [*sbatch, f"--array={spec}", "--wrap", "true"],
                env=env,
                cwd=workdir,
                check=True,
                capture_output=True,
                text=True,
            ).stdout.strip()
            for spec in arrays(n)
        ]
        submitted = time.monotonic() - t0
        # as for Slurm: until squeue lists none of them, asked every 0.25 s (each question
        # costs the gateway ~8 ms of the CPU the jobs need, with 1,000 jobs visible)
        while listed(client, ids):
            reap_exited()  # supervisors adopted by this process (run_runner made it a subreaper)
            time.sleep(0.25)
        elapsed = time.monotonic() - t0
        states: dict[str, str] = {}
        for array_id in ids:
            status, doc = client.request("GET", f"/v1/jobs/{array_id}")
            assert status == 200, doc
            states.update({str(job["job_id"]): job["state"] for job in doc["jobs"]})
        assert len(states) >= n, f"{len(states)} of {n} tasks known"
        bad = {k: s for k, s in states.items() if s != "COMPLETED"}
        assert not bad, f"not COMPLETED: {sorted(bad.items())[:5]}"
        gateway = int((home / "gateway.pid").read_text().split()[0])
        server = json.loads((home / "spool" / "forkserver" / "server.json").read_text())["pid"]
        return {
            "jobs": float(n),
            "submit_s": submitted,
            "total_s": elapsed,
            "gateway_cpu_ms": cpu_ms(gateway) / n,
            "forkserver_cpu_ms": cpu_ms(server) / n,
        }


def run_latency(k: int, workdir: Path) -> list[float]:
    """One `--wrap true` job at a time, k times: seconds from sbatch until squeue no longer
    lists it (asked every 10 ms). What a lone short job waits for its end to be seen."""
    took: list[float] = []
    with caldera(workdir / "caldera-latency", SITE) as (env, sbatch, client):
        for _ in range(k):
            t0 = time.monotonic()
            job_id = subprocess.run(
                [*sbatch, "--wrap", "true"],
                env=env,
                cwd=workdir,
                check=True,
                capture_output=True,
                text=True,
            ).stdout.strip()
            while listed(client, [job_id]):
                reap_exited()
                time.sleep(0.01)
            took.append(time.monotonic() - t0)
    return took


def run_runner(n: int, workdir: Path, slots: int = 8) -> dict[str, float]:
    """The local runner alone: `slots` runs in flight, the next one submitted as soon as
    poll() reports one finished (polled every 10 ms)."""
    from containers.backend import LocalBackend
    from containers.proc import set_child_subreaper
    from gateway.compat.optypes import ParseContext
    from gateway.compat.sbatch import parse_sbatch
    from gateway.model.backend import EventKind, Launch, RankPlacement
    from gateway.model.job import Job

    spool = workdir / "runner-spool"
    backend = LocalBackend(spool, node_name="node01", cpus=slots, memory_mb=16000)
    script = "#!/bin/sh\ntrue\n"
    ctx = ParseContext(cwd="/tmp", uid=0, user="root", now=time.time())
    spec = parse_sbatch(["sbatch", "-o", "/dev/null", "job.sh"], script, {}, ctx).spec

    def launch(job_id: int) -> Launch:
        job = Job(
            job_id=job_id,
            spec=spec,
            user="root",
            uid=0,
            group="root",
            gid=0,
            submit_time=time.time(),
            partition="real",
            qos="normal",
            time_limit=0,
        )
        env = {"PATH": "/usr/bin:/bin", "HOME": "/root", "USER": "root"}
        placement = [RankPlacement("node01", 1, 1, 100, ())]
        return Launch(
            job=job, script=script, environment=env, placement=placement, partition="real"
        )

    # this process adopts the fork server and the supervisors (they detach): reaping them
    # adds their CPU time, and their jobs', to this process's RUSAGE_CHILDREN
    set_child_subreaper()
    before = _cpu(resource.RUSAGE_SELF), _cpu(resource.RUSAGE_CHILDREN)
    t0 = time.monotonic()
    submitted = finished = 0
    states: dict[int, str] = {}
    try:
        while finished < n:
            while submitted < n and submitted - finished < slots:
                submitted += 1
                backend.submit(launch(submitted))
            for event in backend.poll():
                if event.kind in (EventKind.FINISHED, EventKind.LOST):
                    finished += 1
                    states[event.job_id] = event.state.long if event.state else "?"
            reap_exited()
            time.sleep(0.01)
        elapsed = time.monotonic() - t0
    finally:
        server = backend.fork_server_pid()
        backend.close()
    while server is not None and psutil.pid_exists(server):
        reap_exited()
        time.sleep(0.05)
    bad = {k: v for k, v in states.items() if v != "COMPLETED"}
    assert not bad, f"not COMPLETED: {sorted(bad.items())[:5]}"
    return {
        "jobs": float(n),
        "submit_s": 0.0,
        "total_s": elapsed,
        "backend_cpu_ms": 1000 * (_cpu(resource.RUSAGE_SELF) - before[0]) / n,
        "forked_cpu_ms": 1000 * (_cpu(resource.RUSAGE_CHILDREN) - before[1]) / n,
    }


def _cpu(who: int) -> float:
    usage = resource.getrusage(who)
    return usage.ru_utime + usage.ru_stime


def run_slurm(n: int, workdir: Path) -> dict[str, float]:
    env = {**os.environ, "SLURM_CONF": SLURM_CONF}
    t0 = time.monotonic()
    ids = [
        subprocess.run(
            [*SLURM_SBATCH, f"--array={spec}", "--wrap", "true"],
            env=env,
            cwd=workdir,
            check=True,
            capture_output=True,
            text=True,
        )
        .stdout.strip()
        .split(";")[0]
        for spec in arrays(n)
    ]
    submitted = time.monotonic() - t0
    joined = ",".join(ids)
    while True:
        out = subprocess.run(
            ["squeue", "-h", "-r", "-j", joined, "-o", "%i"],
            env=env,
            capture_output=True,
            text=True,
            check=False,
        ).stdout
        if not out.strip():
            break
        time.sleep(0.25)
    elapsed = time.monotonic() - t0
    time.sleep(3)  # slurmdbd receives the last ends a moment later
    acct = subprocess.run(
        ["sacct", "-X", "-n", "-P", "-j", joined, "-o", "JobID,State"],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    completed = sum(1 for line in acct if line.endswith("|COMPLETED"))
    return {"jobs": float(n), "submit_s": submitted, "total_s": elapsed, "completed": completed}


def cpu_ms(pid: int) -> float:
    """CPU time of a process and of its reaped children (the fork server's intermediate
    forks), in ms."""
    t = psutil.Process(pid).cpu_times()
    return 1000 * (t.user + t.system + t.children_user + t.children_system)


def load() -> str:
    return " ".join(f"{x:.1f}" for x in os.getloadavg())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=500)
    parser.add_argument("--slurm-jobs", type=int, default=None, help="default: --jobs")
    parser.add_argument("--skip-slurm", action="store_true")
    parser.add_argument(
        "--cycle-interval",
        type=float,
        default=None,
        help="also run Caldera with this cycle_interval_s (a diagnostic: default 0.2 s)",
    )
    parser.add_argument(
        "--latency", type=int, default=0, help="also time N lone jobs, one at a time"
    )
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="short-jobs-") as tmp:
        work = Path(tmp)
        print(f"load before: {load()}", flush=True)
        alone = run_runner(args.jobs, work)
        print(
            f"runner:  {args.jobs} jobs in {alone['total_s']:.2f} s: "
            f"{alone['jobs'] / alone['total_s']:.1f} jobs/s; load {load()}; CPU per job: "
            f"backend (submit, poll) {alone['backend_cpu_ms']:.1f} ms, fork server + "
            f"supervisor + job {alone['forked_cpu_ms']:.1f} ms",
            flush=True,
        )
        mine = run_caldera(args.jobs, work)
        rate = mine["jobs"] / mine["total_s"]
        print(
            f"caldera: {args.jobs} jobs in {mine['total_s']:.2f} s "
            f"(submit {mine['submit_s']:.2f} s): {rate:.1f} jobs/s; load {load()}; CPU per "
            f"job: gateway {mine['gateway_cpu_ms']:.1f} ms, fork server "
            f"{mine['forkserver_cpu_ms']:.1f} ms"
        )
        if args.latency:
            took = sorted(run_latency(args.latency, work))
            print(
                f"latency: {args.latency} jobs one at a time, sbatch -> not in squeue: p50 "
                f"{statistics.median(took):.3f} s, max {took[-1]:.3f} s; load {load()}",
                flush=True,
            )
        if args.cycle_interval is not None:
            fast = run_caldera(args.jobs, work, args.cycle_interval)
            print(
                f"caldera (cycle_interval_s={args.cycle_interval}): {args.jobs} jobs in "
                f"{fast['total_s']:.2f} s: {fast['jobs'] / fast['total_s']:.1f} jobs/s; "
                f"load {load()}"
            )
        if args.skip_slurm:
            return
        count = args.slurm_jobs or args.jobs
        theirs = run_slurm(count, work)
        slurm_rate = theirs["jobs"] / theirs["total_s"]
        print(
            f"slurm:   {count} jobs in {theirs['total_s']:.2f} s "
            f"(submit {theirs['submit_s']:.2f} s, {theirs['completed']:.0f} COMPLETED in "
            f"sacct): {slurm_rate:.2f} jobs/s; load {load()}"
        )
        print(f"ratio: {rate / slurm_rate:.1f}x")


if __name__ == "__main__":
    main()
