"""Gateway benchmarks (issue 3), each a ratio or rate measured in one run:

1. `sbatch --parsable` wall time per call: Caldera's shim vs real Slurm's sbatch against the
   local slurmctld (testenv/slurm), N calls each, alternating, held jobs cancelled after;
2. sustained durable submissions through the API from C concurrent clients;
3. a 1,000,000-task array: time to accept it, store size, squeue time, gateway RSS.

    python benchmarks/bench_gateway.py [--calls 200] [--clients 8] [--procs 4] [--seconds 10]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from multiprocessing import Process, Queue
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from gateway.cli.fastclient import FastClient  # noqa: E402

CALDERA = [sys.executable, "-m", "gateway.cli.main"]
SLURM_CONF = os.environ.get("SLURM_CONF", "/tmp/caldera-slurm/etc/slurm.conf")


def start(home: Path, config: str = "") -> dict[str, str]:
    home.mkdir(parents=True)
    (home / "caldera.toml").write_text(config)
    env = {**os.environ, "CALDERA_HOME": str(home), "CALDERA_SOCKET": str(home / "gateway.sock")}
    subprocess.run([*CALDERA, "up"], env=env, check=True, capture_output=True)
    shims = subprocess.run(
        [*CALDERA, "shims", str(home / "shims")],
        env=env,
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    env["PATH"] = f"{shims}:{env['PATH']}"
    return env


def stop(env: dict[str, str]) -> None:
    subprocess.run([*CALDERA, "down"], env=env, capture_output=True, check=False)


def pcts(values: list[float]) -> str:
    values = sorted(values)
    p50 = values[len(values) // 2]
    p99 = values[min(len(values) - 1, int(len(values) * 0.99))]
    return (
        f"mean {statistics.mean(values) * 1000:.1f} ms, p50 {p50 * 1000:.1f} ms, "
        f"p99 {p99 * 1000:.1f} ms"
    )


def bench_shim(calls: int, env: dict[str, str], work: Path) -> dict[str, object]:
    shim = str(Path(env["PATH"].split(":")[0]) / "sbatch")
    real = shutil.which("sbatch", path="/usr/bin:/bin") or "sbatch"
    slurm_env = {**os.environ, "SLURM_CONF": SLURM_CONF}
    ours: list[float] = []
    theirs: list[float] = []
    real_ids: list[str] = []
    for _ in range(calls):
        t = time.perf_counter()
        r = subprocess.run(
            [shim, "--parsable", "-H", "--wrap", "true"],
            env=env,
            cwd=work,
            capture_output=True,
            text=True,
            check=True,
        )
        ours.append(time.perf_counter() - t)
        t = time.perf_counter()
        r = subprocess.run(
            [real, "--parsable", "-H", "-p", "real", "-o", "/dev/null", "--wrap", "true"],
            env=slurm_env,
            cwd=work,
            capture_output=True,
            text=True,
            check=True,
        )
        theirs.append(time.perf_counter() - t)
        real_ids.append(r.stdout.strip().split(";")[0])
    for i in range(0, len(real_ids), 200):
        subprocess.run(["scancel", *real_ids[i : i + 200]], env=slurm_env, check=False)
    ratio = statistics.mean(ours) / statistics.mean(theirs)
    print(f"sbatch --parsable, {calls} calls each:")
    print(f"  Caldera shim: {pcts(ours)}")
    print(f"  Slurm sbatch: {pcts(theirs)}")
    print(f"  ratio (mean): {ratio:.2f}x (goal <= 2x)")
    return {
        "calls": calls,
        "caldera_mean_ms": statistics.mean(ours) * 1000,
        "slurm_mean_ms": statistics.mean(theirs) * 1000,
        "ratio": ratio,
    }


def _submit_loop(sock: str, stop_at: float, threads: int, out: Queue[tuple[int, str]]) -> None:
    """One client process: `threads` connections submitting until stop_at."""
    body = {
        "argv": ["sbatch", "-H", "--wrap", "true"],
        "env": {"PATH": "/usr/bin:/bin"},
        "cwd": "/tmp",
        "script": None,
    }
    counts = [0] * threads
    errors: list[str] = []

    def client(i: int) -> None:
        c = FastClient(sock)
        while time.monotonic() < stop_at:
            status, answer = c.request("POST", "/v1/sbatch", body)
            if status != 200 or answer["exit_code"] != 0:
                errors.append(str(answer))
                return
            counts[i] += 1

    workers = [threading.Thread(target=client, args=(i,)) for i in range(threads)]
    for t in workers:
        t.start()
    for t in workers:
        t.join()
    out.put((sum(counts), errors[0] if errors else ""))


def bench_throughput(
    clients: int, seconds: float, env: dict[str, str], procs: int
) -> dict[str, object]:
    """`clients` connections spread over `procs` client processes (one Python process
    cannot keep a fast server busy on its own)."""
    sock = env["CALDERA_SOCKET"]
    stop_at = time.monotonic() + seconds
    out: Queue[tuple[int, str]] = Queue()
    per = [clients // procs + (1 if i < clients % procs else 0) for i in range(procs)]
    workers = [Process(target=_submit_loop, args=(sock, stop_at, n, out)) for n in per if n]
    t0 = time.monotonic()
    for w in workers:
        w.start()
    results = [out.get() for _ in workers]
    for w in workers:
        w.join()
    elapsed = time.monotonic() - t0
    total = sum(n for n, _ in results)
    errors = [e for _, e in results if e]
    print(
        f"sustained submissions: {clients} connections in {len(workers)} processes, "
        f"{elapsed:.1f} s: {total} jobs, {total / elapsed:.0f} durable submissions/s "
        "(goal >= 2,000)"
    )
    if errors:
        print("  errors:", errors[:3])
    return {
        "clients": clients,
        "procs": len(workers),
        "seconds": elapsed,
        "jobs": total,
        "rate": total / elapsed,
    }


def bench_big_array(env: dict[str, str], home: Path) -> dict[str, object]:
    sock = env["CALDERA_SOCKET"]
    c = FastClient(sock)
    pid = int((home / "gateway.pid").read_text())
    rss0 = psutil.Process(pid).memory_info().rss
    db = home / "caldera.db"
    size0 = db.stat().st_size + (
        Path(str(db) + "-wal").stat().st_size if Path(str(db) + "-wal").exists() else 0
    )
    body = {
        "argv": ["sbatch", "-H", "--array=0-999999", "--wrap", "true"],
        "env": {"PATH": "/usr/bin:/bin"},
        "cwd": "/tmp",
        "script": None,
    }
    t = time.perf_counter()
    status, out = c.request("POST", "/v1/sbatch", body)
    accept = time.perf_counter() - t
    if status != 200 or out["exit_code"] != 0:
        raise SystemExit(f"array submission failed: {out}")
    time.sleep(0.5)
    size1 = db.stat().st_size + (
        Path(str(db) + "-wal").stat().st_size if Path(str(db) + "-wal").exists() else 0
    )
    t = time.perf_counter()
    r = subprocess.run(["squeue"], env=env, capture_output=True, text=True, check=True)
    squeue_s = time.perf_counter() - t
    lines = r.stdout.count("\n")
    rss1 = psutil.Process(pid).memory_info().rss
    print(
        f"1,000,000-task array: accepted in {accept * 1000:.1f} ms (goal < 1 s); store grew "
        f"{(size1 - size0) / 1024:.1f} KiB; squeue {squeue_s * 1000:.0f} ms for {lines} "
        f"lines (goal < 1 s); gateway RSS {rss1 / 2**20:.0f} MiB "
        f"(+{(rss1 - rss0) / 2**20:.1f} MiB)"
    )
    return {
        "accept_ms": accept * 1000,
        "store_kib": (size1 - size0) / 1024,
        "squeue_ms": squeue_s * 1000,
        "rss_mib": rss1 / 2**20,
    }


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--calls", type=int, default=200)
    p.add_argument("--clients", type=int, default=8)
    p.add_argument("--seconds", type=float, default=10.0)
    p.add_argument("--procs", type=int, default=4, help="client processes")
    p.add_argument("--json", type=Path)
    args = p.parse_args()
    base = Path(tempfile.mkdtemp(prefix="caldera-bench-", dir="/tmp"))
    os.chmod(base, 0o755)  # noqa: S103 - job scripts run as the test cluster's users
    print(f"host {socket.gethostname()}, {os.cpu_count()} cpus, load {os.getloadavg()}")
    results: dict[str, object] = {}
    env = start(base / "a", "agents = false\n")
    try:
        work = base / "work"
        work.mkdir()
        results["shim"] = bench_shim(args.calls, env, work)
        results["throughput"] = bench_throughput(args.clients, args.seconds, env, args.procs)
    finally:
        stop(env)
    env = start(base / "b", "agents = false\nmax_array_size = 1000001\n")
    try:
        results["array"] = bench_big_array(env, base / "b")
    finally:
        stop(env)
        shutil.rmtree(base, ignore_errors=True)
    if args.json:
        args.json.write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
