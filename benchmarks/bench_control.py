"""Job control at scale (issue 14), on a real gateway (`caldera up` in a temporary home):

1. `scontrol release <2,000 ids>` of 2,000 separate held jobs, and `scontrol release
   <id>_[0-1999]` of a held 2,000-task array (goal: <= 1 s each, was 12.7 s);
2. `squeue` with 10,000 jobs queued (default format, `-o %i`, `--json`; goal <= 150 ms),
   rendered by the gateway, then by the command itself (the text must be the same bytes).

Every job is submitted held with `--begin=now+1days`, so a released job stays queued
(BeginTime) and can be held again for the next run: nothing ever runs.

    python benchmarks/bench_control.py [--runs 7] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.bench_gateway import start, stop  # noqa: E402
from gateway.cli.fastclient import FastClient  # noqa: E402

CONFIG = "agents = false\nmax_array_size = 10001\n"
HELD = ["sbatch", "-H", "--begin=now+1days", "-o", "/dev/null", "--wrap", "true"]


def figures(values: list[float]) -> str:
    """min / median / p90 in milliseconds."""
    values = sorted(values)
    p90 = values[min(len(values) - 1, int(len(values) * 0.9))]
    return (
        f"min {values[0] * 1000:.0f} ms, median {statistics.median(values) * 1000:.0f} ms, "
        f"p90 {p90 * 1000:.0f} ms ({len(values)} runs)"
    )


def summary(values: list[float]) -> dict[str, float]:
    values = sorted(values)
    return {
        "min_ms": values[0] * 1000,
        "median_ms": statistics.median(values) * 1000,
        "p90_ms": values[min(len(values) - 1, int(len(values) * 0.9))] * 1000,
    }


def submit(sock: str, argv: list[str], count: int, threads: int = 8) -> list[int]:
    """`count` submissions of argv through the API (concurrent: they share commits)."""
    body = {"argv": argv, "env": {"PATH": "/usr/bin:/bin"}, "cwd": "/tmp", "script": None}

    def some(n: int) -> list[int]:
        c = FastClient(sock)
        ids = []
        for _ in range(n):
            status, out = c.request("POST", "/v1/sbatch", body)
            if status != 200 or out["exit_code"] != 0:
                raise SystemExit(f"submission failed: {out}")
            ids.append(int(out["job_id"]))
        return ids

    shares = [count // threads + (1 if i < count % threads else 0) for i in range(threads)]
    with ThreadPoolExecutor(threads) as pool:
        return sorted(i for ids in pool.map(some, shares) for i in ids)


def timed(argv: list[str], env: dict[str, str]) -> tuple[float, str]:
    t = time.perf_counter()
    r = subprocess.run(argv, env=env, capture_output=True, text=True, check=False)
    elapsed = time.perf_counter() - t
    if r.returncode != 0:
        raise SystemExit(f"{argv[:2]}...: exit {r.returncode}: {r.stderr[:500]}")
    return elapsed, r.stdout


def bench_release(env: dict[str, str], ids: list[str], runs: int, label: str) -> dict[str, object]:
    """release then hold the same ids again, `runs` times; both timed."""
    release: list[float] = []
    hold: list[float] = []
    for _ in range(runs):
        release.append(timed(["scontrol", "release", *ids], env)[0])
        hold.append(timed(["scontrol", "hold", *ids], env)[0])
    print(f"scontrol release {label}: {figures(release)} (goal <= 1 s)")
    print(f"scontrol hold    {label}: {figures(hold)}")
    return {"release": summary(release), "hold": summary(hold)}


def _curl(sock: str) -> float:
    r = subprocess.run(
        [
            "curl",
            "-s",
            "-o",
            "/dev/null",
            "-w",
            "%{time_total}",
            "--unix-socket",
            sock,
            "http://caldera/v1/jobs",
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    return float(r.stdout)


def bench_squeue(env: dict[str, str], sock: str, runs: int) -> dict[str, object]:
    out: dict[str, object] = {}
    client = FastClient(sock)
    api: list[float] = []
    for _ in range(runs):
        t = time.perf_counter()
        _, answer = client.request("GET", "/v1/jobs")
        api.append(time.perf_counter() - t)
    print(f"GET /v1/jobs ({len(answer['jobs'])} records), decoded: {figures(api)}")
    out["api"] = summary(api)
    raw = [_curl(sock) for _ in range(runs)]  # the server's part: bytes, nothing decoded
    print(f"GET /v1/jobs as bytes (curl): {figures(raw)}")
    out["api_bytes"] = summary(raw)
    # TZ=":/etc/localtime" names the gateway's zone (TZ unset) differently: the command
    # then renders itself from GET /v1/jobs, as before POST /v1/squeue/render
    here = {**env, "TZ": ":/etc/localtime"}
    for argv in (["squeue"], ["squeue", "-o", "%i"], ["squeue", "--json"]):
        times: list[float] = []
        for _ in range(runs):
            elapsed, stdout = timed(argv, env)
            times.append(elapsed)
        lines = len(json.loads(stdout)["jobs"]) if "--json" in argv else stdout.count("\n") - 1
        print(f"{' '.join(argv)} ({lines} jobs): {figures(times)} (goal <= 150 ms)")
        local: list[float] = []
        for _ in range(runs):
            elapsed, text = timed(argv, here)
            local.append(elapsed)
            if text != stdout:  # every job is pending: nothing moves with the clock
                raise SystemExit(f"{' '.join(argv)}: the gateway's text differs from the command's")
        print(f"{' '.join(argv)}, rendered by the command (same bytes): {figures(local)}")
        out[" ".join(argv)] = {**summary(times), "jobs": lines, "command_renders": summary(local)}
    return out


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--runs", type=int, default=7)
    p.add_argument("--json", type=Path)
    args = p.parse_args()
    base = Path(tempfile.mkdtemp(prefix="caldera-bench-control-"))
    env = start(base / "home", CONFIG)
    sock = env["CALDERA_SOCKET"]
    results: dict[str, object] = {}
    try:
        t = time.perf_counter()
        separate = [str(i) for i in submit(sock, HELD, 2000)]
        array = submit(sock, [*HELD[:1], "--array=0-1999", *HELD[1:]], 1, threads=1)[0]
        took = time.perf_counter() - t
        print(f"2,000 held jobs and a held 2,000-task array submitted in {took:.1f} s")
        results["separate"] = bench_release(env, separate, args.runs, "of 2,000 separate job ids")
        first, _ = timed(["scontrol", "release", f"{array}_[0-1999]"], env)
        print(
            f"scontrol release {array}_[0-1999] (first: splits 2,000 tasks off the array): "
            f"{first * 1000:.0f} ms"
        )
        timed(["scontrol", "hold", f"{array}_[0-1999]"], env)
        results["array_first_ms"] = first * 1000
        results["array"] = bench_release(
            env, [f"{array}_[0-1999]"], args.runs, "of 2,000 array tasks"
        )
        submit(sock, HELD, 6000)  # 2,000 + 2,000 tasks + 6,000 = 10,000 queued
        results["squeue"] = bench_squeue(env, sock, args.runs)
    finally:
        stop(env)
        shutil.rmtree(base, ignore_errors=True)
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
