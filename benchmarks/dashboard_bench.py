"""Dashboard benchmark (issue 15): the queue page's first render with 100,000 jobs queued.

A gateway is built in this process (its store in a temporary home, the local backend, no
scheduling loop) and 100,000 jobs of 50 users are put in its job table, 90 % pending and
10 % running. The dashboard's real TCP listener serves it (token-authenticated, as a site
would run it). Measured:

1. server JSON: GET /ui/api/queue (first page of 50) with the default sort, a sort by user
   descending, and a state filter, N times each (the 1 s cache of pages is turned off:
   every request computes its page);
2. first render: Debian's chromium (headless, through chromium-driver and selenium) opens
   /ui/ and the time until the 50 rows are in the table is taken, N times (a new document
   each time: whoami, queue and history requests, then rendering).

    python benchmarks/dashboard_bench.py [--jobs 100000] [--runs 10]
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import statistics
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from gateway.control.backends import make_backends  # noqa: E402
from gateway.control.config import load_config  # noqa: E402
from gateway.control.gateway import Gateway  # noqa: E402
from gateway.dashboard.auth import issue_token  # noqa: E402
from gateway.dashboard.routes import dashboard_state  # noqa: E402
from gateway.dashboard.tcp import DashboardListener, start_dashboard_tcp  # noqa: E402
from gateway.model.job import Job  # noqa: E402
from gateway.model.jobspec import JobSpec  # noqa: E402
from gateway.model.state import JobState, Reason  # noqa: E402
from gateway.store.startup import open_store  # noqa: E402


def fill(gw: Gateway, count: int) -> None:
    """`count` jobs of 50 users in two partitions: 90 % pending, 10 % running."""
    now = time.time()
    for i in range(1, count + 1):
        running = i % 10 == 0
        gw.jobs[i] = Job(
            job_id=i,
            spec=JobSpec(name=f"job-{i % 977}", workdir="/tmp"),
            user=f"user{i % 50:02d}",
            uid=5000 + i % 50,
            group="users",
            gid=100,
            submit_time=now - count + i,
            state=JobState.RUNNING if running else JobState.PENDING,
            reason=Reason.NONE if running else Reason.PRIORITY,
            partition="debug" if i % 3 else "long",
            num_cpus=1 + i % 8,
            priority=i % 1000,
            start_time=now - 60 if running else None,
            nodes=("n1",) if running else (),
        )


def timed_get(url: str, token: str) -> tuple[float, int]:
    req = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"})  # noqa: S310
    t0 = time.perf_counter()
    with urllib.request.urlopen(req, timeout=60) as resp:  # noqa: S310 - http://127.0.0.1
        body = resp.read()
    return time.perf_counter() - t0, len(body)


def browser_render(base: str, token: str, runs: int) -> list[float] | str:
    """Seconds from navigation to 50 rendered rows, or why it could not be measured."""
    chromium, driver_path = shutil.which("chromium"), shutil.which("chromedriver")
    try:
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service
    except ImportError:
        return "selenium not installed"
    if not chromium or not driver_path:
        return "chromium/chromedriver not installed (testenv/dashboard/install.sh)"
    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"):
        options.add_argument(arg)
    driver = webdriver.Chrome(service=Service(executable_path=driver_path), options=options)
    count = "return document.querySelectorAll('#queue tbody tr').length"
    out = []
    try:
        for i in range(runs + 1):  # the first warms the browser's own caches: not counted
            driver.get("about:blank")
            t0 = time.perf_counter()
            driver.get(f"{base}/ui/?run={i}#token={token}")
            while driver.execute_script(count) < 50:
                if time.perf_counter() - t0 > 30:
                    raise RuntimeError("the queue page did not render within 30 s")
                time.sleep(0.005)
            if i:
                out.append(time.perf_counter() - t0)
    finally:
        driver.quit()
    return out


def fmt(values: list[float]) -> str:
    values = sorted(values)
    p50 = statistics.median(values)
    return f"p50 {p50 * 1000:.0f} ms, max {values[-1] * 1000:.0f} ms (n={len(values)})"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--jobs", type=int, default=100_000)
    ap.add_argument("--runs", type=int, default=10)
    args = ap.parse_args()
    home = Path(tempfile.mkdtemp(prefix="caldera-dash-bench-"))
    (home / "caldera.toml").write_text('[dashboard]\nlisten = "127.0.0.1:0"\n')
    config = load_config(home, agents=False)
    store = open_store(config.db_path)
    backends, sites = make_backends(config)
    gw = Gateway(config, store, backends, sites=sites)
    t0 = time.perf_counter()
    fill(gw, args.jobs)
    print(f"{args.jobs} jobs in the table in {time.perf_counter() - t0:.1f} s")

    loop = asyncio.new_event_loop()
    started: list[DashboardListener] = []
    ready = threading.Event()

    async def serve() -> None:
        listener = await start_dashboard_tcp(gw)
        assert listener is not None
        started.append(listener)
        ready.set()
        await listener.task

    thread = threading.Thread(target=loop.run_until_complete, args=(serve(),), daemon=True)
    thread.start()
    ready.wait(30)
    base = f"http://127.0.0.1:{started[0].port}"
    token = issue_token(dashboard_state(gw).key(), "root", 3600)
    dashboard_state(gw).queue_pages.ttl_s = 0.0  # every request computes its page: no cache
    try:
        for label, query in [
            ("default sort (id)", "limit=50"),
            ("sort by user, descending", "limit=50&sort=user&order=desc"),
            ("state=RUNNING, sort by submit", "limit=50&state=R&sort=submit"),
        ]:
            url = f"{base}/ui/api/queue?{query}"
            timed_get(url, token)  # warm-up
            times, size = [], 0
            for _ in range(args.runs):
                dt, size = timed_get(url, token)
                times.append(dt)
            print(f"server JSON, {label}: {fmt(times)}, {size} bytes")
        render = browser_render(base, token, args.runs)
        if isinstance(render, str):
            print(f"first render in chromium: not measured ({render})")
        else:
            print(f"first render in chromium (navigation to 50 rows shown): {fmt(render)}")
    finally:
        asyncio.run_coroutine_threadsafe(started[0].stop(), loop).result(30)
        store.close()
        shutil.rmtree(home, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
