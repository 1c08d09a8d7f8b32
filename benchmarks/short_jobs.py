"""Short-job throughput (issue 14 item 7): N `--wrap true` array tasks end to end.

The same jobs on Caldera's local site (4 virtual nodes x 2 CPUs, DefMemPerCPU=100, as the
test cluster's partition `real`) and on real Slurm (testenv/slurm, partition `real`), in
the same run. Submitted as arrays of at most 500 tasks, timed from the first sbatch until
every task is known finished by the scheduler (Caldera: its API; Slurm: squeue no longer
lists them), then every task's state is checked to be COMPLETED.

Also the local runner alone (`runner`): LocalBackend.submit/poll driven directly with 8 runs
in flight (what the gateway would keep on 4 x 2 CPUs), so the runner's own rate is seen
apart from the gateway's scheduling cycle.

    python benchmarks/short_jobs.py [--jobs 500] [--slurm-jobs N] [--skip-slurm]
                                    [--cycle-interval S]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

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
FINAL = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY"}


def arrays(n: int) -> list[str]:
    """`--array` specs of at most CHUNK tasks covering n tasks."""
    return [f"0-{min(CHUNK, n - start) - 1}" for start in range(0, n, CHUNK)]


def run_caldera(n: int, workdir: Path, cycle_s: float | None = None) -> dict[str, float]:
    home = workdir / f"caldera-{n}-{cycle_s}"
    home.mkdir()
    cadence = "" if cycle_s is None else f"cycle_interval_s = {cycle_s}\n"
    (home / "caldera.toml").write_text(cadence + SITE)
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
        sbatch = [f"{shims}/sbatch", "--parsable", "-o", "/dev/null"]
        client = FastClient(env["CALDERA_SOCKET"])
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
        states: dict[str, str] = {}
        while True:
            states = {}
            for array_id in ids:
                status, doc = client.request("GET", f"/v1/jobs/{array_id}")
                assert status == 200, doc
                for job in doc["jobs"]:
                    states[str(job["job_id"])] = job["state"]
            if len(states) >= n and all(s in FINAL for s in states.values()):
                break
            _reap()  # supervisors adopted by this process (run_runner made it a subreaper)
            time.sleep(0.05)
        elapsed = time.monotonic() - t0
        client.close()
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
    finally:
        down = subprocess.Popen([*CALDERA, "down"], env=env, stdout=subprocess.DEVNULL)
        while down.poll() is None:  # reaping: `down` waits for the adopted gateway to go
            _reap()
            time.sleep(0.05)


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
            _reap()
            time.sleep(0.01)
        elapsed = time.monotonic() - t0
    finally:
        server = backend.fork_server_pid()
        backend.close()
    while server is not None and psutil.pid_exists(server):
        _reap()
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


def _reap() -> None:
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


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
