"""The job flood (issue 13 item 3): N single-core jobs at once through Caldera's
KubernetesBackend, against the same N as plain batch/v1 Jobs for kube-scheduler.

    nice -n 5 python benchmarks/k8s_flood.py --jobs 2000 [--nodes 1000] [--runs caldera-array,
        caldera-batches,jobs] [--keep]

Starts its own testenv/k8s control plane (state /tmp/caldera-k8s-flood, API 26443, etcd 22379,
scheduler 26459, controller manager 26457: CALDERA_K8S_* as testenv/k8s documents, so the
test environments are untouched) with N KWOK nodes, kube-scheduler and the controller
manager at the client rate Caldera gets (`--qps/--burst`), and stops it at the end. Every pod
carries `kwok.caldera.io/complete-after` (testenv/k8s/manifests/kwok-stages.yaml): KWOK
marks it Succeeded that long after it started.

Runs, each in a fresh namespace: `caldera-array` (one array of N: the tasks of one array
job, taken in task order from one queue by `--submitters` threads, as the gateway hands each
start to a thread), `caldera-batches` (N/100 submissions of 100 jobs: each thread takes a
whole submission and submits its jobs in order), `jobs` (N Jobs, one pod each,
ttlSecondsAfterFinished 0, created by a pool at the same client rate). Caldera's backend is
driven as the gateway drives it: `submit` off the poll loop, a retryable refusal (its
`max_pending_pods` bound) puts the job back, `poll` hands out events. Measured: jobs/s (N /
first submit -> last completion); the most pods that existed but were not Running (phase
Pending) and the most that existed at all; POSTs per job at the API server (its /metrics);
LIST pods latency of the namespace from a client polling during the run; etcd's database
size (its /metrics) at the start, the peak and the end; runs per job (distinct pod UIDs of a
job that reached Running, from a pod watch) and lost jobs; objects left in the namespace
after the run.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import threading
import time
import uuid
from collections import Counter, deque
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

FLOOD_ENV = {
    "CALDERA_K8S_BASE": "/tmp/caldera-k8s-flood",
    "CALDERA_K8S_API_PORT": "26443",
    "CALDERA_K8S_ETCD_PORT": "22379",
    "CALDERA_K8S_SCHED_PORT": "26459",
    "CALDERA_K8S_KCM_PORT": "26457",
    "CALDERA_K8S_VC_SCHED_PORT": "26251",
    "CALDERA_K8S_VC_CM_PORT": "26252",
}
for _key, _value in FLOOD_ENV.items():  # before tests.support.k8s_env reads them
    os.environ.setdefault(_key, _value)

from benchmarks.k8s_flood_observe import Observer, etcd_sizes, pct, posts  # noqa: E402
from gateway.model.backend import BackendError, EventKind, Launch  # noqa: E402
from gateway.model.state import JobState  # noqa: E402
from k8s_bridge.backend import KubernetesBackend  # noqa: E402
from k8s_bridge.kube import (  # noqa: E402
    CONFIGMAPS,
    PODS,
    SERVICES,
    KubeClient,
    Resource,
    api_client_from_token,
)
from k8s_bridge.names import LABEL_JOB  # noqa: E402
from k8s_bridge.options import GangMode, K8sOptions  # noqa: E402
from k8s_bridge.ratelimit import TokenBucket  # noqa: E402
from tests.support.builders import make_job  # noqa: E402
from tests.support.k8s_env import K8sEnv, down, ensure_up, read_env  # noqa: E402

Obj = dict[str, Any]
NAMESPACES = Resource("", "v1", "namespaces", "Namespace", namespaced=False)
SERVICE_ACCOUNTS = Resource("", "v1", "serviceaccounts", "ServiceAccount")
JOBS = Resource("batch", "v1", "jobs", "Job")
COMPLETE_AFTER = "kwok.caldera.io/complete-after"


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def wait_until(what: str, predicate: Callable[[], bool], timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            log(f"timed out after {timeout:.0f}s waiting for {what}")
            return False
        time.sleep(0.5)
    return True


@dataclass
class Result:
    run: str
    jobs: int
    seconds: float
    completed: int
    twice: int
    peak_pending: int
    peak_existing: int
    posts: Counter[str]
    list_ms: list[float]
    etcd_mb: tuple[float, float, float]  # start, peak, end (allocated)
    etcd_in_use_mb: tuple[float, float, float]
    left: dict[str, int]
    left_after_s: float
    refusals: int = 0
    backend_started: int = 0
    backend_twice: int = 0
    relists: int = 0

    @property
    def rate(self) -> float:
        return self.completed / self.seconds if self.seconds > 0 else 0.0


def new_namespace(kube: KubeClient, prefix: str) -> str:
    name = f"{prefix}-{uuid.uuid4().hex[:5]}"
    kube.create(
        NAMESPACES, "", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}
    )
    wait_until(
        "default service account",
        lambda: kube.get(SERVICE_ACCOUNTS, name, "default") is not None,
        60,
    )
    return name


def leftovers(kube: KubeClient, ns: str) -> dict[str, int]:
    return {r.plural: len(kube.list(r, ns)[0]) for r in (PODS, CONFIGMAPS, SERVICES, JOBS)}


def finish(
    env: K8sEnv,
    kube: KubeClient,
    obs: Observer,
    run: str,
    n: int,
    t0: float,
    posts0: Counter[str],
    etcd0: tuple[float, float],
    baseline: dict[str, int],
) -> Result:
    """Stop observing, wait for the namespace to empty, and gather the figures."""
    last = max(obs.done_at.values(), default=t0)
    settle = time.monotonic()

    def ours() -> dict[str, int]:
        counts = leftovers(kube, obs.ns)
        return {k: v - baseline.get(k, 0) for k, v in counts.items()}

    wait_until(f"{run}: objects deleted", lambda: sum(ours().values()) == 0, 120)
    left_after = time.monotonic() - settle
    left = {k: v for k, v in ours().items() if v}
    obs.stop.set()
    delta = posts(env) - posts0
    sizes = [*obs.etcd, etcd_sizes()]
    mb = 1 / 1e6
    end = sizes[-1]
    return Result(
        run=run,
        jobs=n,
        seconds=last - t0,
        completed=len(obs.done_at),
        twice=sum(1 for uids in obs.runs.values() if len(uids) > 1),
        peak_pending=obs.peak_pending,
        peak_existing=obs.peak_existing,
        posts=delta,
        list_ms=obs.list_ms,
        etcd_mb=(etcd0[0] * mb, max(s[0] for s in sizes) * mb, end[0] * mb),
        etcd_in_use_mb=(etcd0[1] * mb, max(s[1] for s in sizes) * mb, end[1] * mb),
        left=left,
        left_after_s=left_after,
        relists=obs.relists,
    )


# --- Caldera's backend ------------------------------------------------------------------


def launches(n: int, base: int, array: bool) -> list[Launch]:
    out = []
    for i in range(n):
        job = replace(
            make_job(base + i).build(), state=JobState.RUNNING, partition="k8s", cluster="flood"
        )
        if array:
            job = replace(job, array_job_id=base, array_task_id=i)
        out.append(
            Launch(
                job=job,
                script="#!/bin/sh\ntrue\n",
                environment={},
                placement=(),
                partition="k8s",
                cluster="flood",
            )
        )
    return out


def run_caldera(
    env: K8sEnv, kube: KubeClient, array: bool, base: int, args: argparse.Namespace
) -> Result:
    run = "caldera-array" if array else "caldera-batches"
    ns = new_namespace(kube, f"flood-{run}")
    baseline = leftovers(kube, ns)
    opts = K8sOptions(
        namespace=ns,
        mode=GangMode.CALDERA,
        qps=args.qps,
        burst=args.burst,
        workers=args.workers,
        max_pending_pods=args.max_pending,
        pod_annotations={COMPLETE_AFTER: f"{args.run_s}s"},
    )
    backend = KubernetesBackend(
        cluster="flood", server=env.server, token=env.admin_token, ca_file=env.ca_file, options=opts
    )
    backend.mode()
    backend.nodes.wait_synced(120)
    backend.usage.wait_synced(120)
    todo = launches(args.jobs, base, array)
    queue: deque[list[Launch]] = deque(
        [[launch] for launch in todo]
        if array
        else [todo[i : i + 100] for i in range(0, len(todo), 100)]
    )
    lock = threading.Lock()
    refusals = Counter[str]()
    failures: list[str] = []
    obs = Observer(kube, ns)
    obs.start()
    time.sleep(1.0)
    etcd0, posts0 = etcd_sizes(), posts(env)

    def submitter() -> None:
        while True:
            with lock:
                if not queue:
                    return
                batch = queue.popleft()
            for launch in batch:
                while True:
                    try:
                        backend.submit(launch)
                        break
                    except BackendError as exc:
                        if not exc.retryable:
                            failures.append(str(exc))
                            break
                        with lock:
                            refusals["n"] += 1
                        time.sleep(0.05)

    t0 = time.monotonic()
    threads = [threading.Thread(target=submitter, daemon=True) for _ in range(args.submitters)]
    for thread in threads:
        thread.start()
    started: Counter[int] = Counter()
    finished: dict[int, JobState | None] = {}
    deadline = t0 + args.timeout
    while len(finished) < args.jobs and time.monotonic() < deadline:
        for ev in backend.poll():
            if ev.kind is EventKind.STARTED:
                started[ev.job_id] += 1
            elif ev.kind in (EventKind.FINISHED, EventKind.LOST):
                finished[ev.job_id] = ev.state
        time.sleep(0.05)
    for _ in range(20):  # verdicts handed out are cleaned up at the next poll
        backend.poll()
        time.sleep(0.1)
    log(
        f"{run}: {len(finished)} finished, {len(failures)} refused for good, "
        f"{refusals['n']} retryable refusals; not-running now {backend.not_running_pods()}"
    )
    result = finish(env, kube, obs, run, args.jobs, t0, posts0, etcd0, baseline)
    backend.close()
    result.refusals = refusals["n"]
    result.backend_started = len(started)
    result.backend_twice = sum(1 for c in started.values() if c > 1)
    bad = Counter(str(s) for s in finished.values() if s is not JobState.COMPLETED)
    if bad or failures:
        log(f"{run}: not COMPLETED: {dict(bad)}; failures: {failures[:3]}")
    kube.delete(NAMESPACES, "", ns)
    return result


# --- plain Jobs for kube-scheduler --------------------------------------------------------


def job_manifest(i: int, run_s: float) -> Obj:
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": f"flood-{i}", "labels": {LABEL_JOB: str(i)}},
        "spec": {
            "backoffLimit": 0,
            "completions": 1,
            "parallelism": 1,
            "ttlSecondsAfterFinished": 0,
            "template": {
                "metadata": {
                    "labels": {LABEL_JOB: str(i)},
                    "annotations": {COMPLETE_AFTER: f"{run_s}s"},
                },
                "spec": {
                    "restartPolicy": "Never",
                    "enableServiceLinks": False,
                    "automountServiceAccountToken": False,
                    "containers": [
                        {
                            "name": "job",
                            "image": "caldera.local/job:latest",
                            "command": ["/bin/sh", "-c", "true"],
                            "resources": {"requests": {"cpu": "1"}, "limits": {"cpu": "1"}},
                        }
                    ],
                },
            },
        },
    }


def run_jobs(env: K8sEnv, kube: KubeClient, args: argparse.Namespace) -> Result:
    ns = new_namespace(kube, "flood-jobs")
    baseline = leftovers(kube, ns)
    api = api_client_from_token(env.server, env.admin_token, env.ca_file, pool=args.workers * 2)
    client = KubeClient(api, TokenBucket(args.qps, args.burst))
    obs = Observer(kube, ns)
    obs.start()
    time.sleep(1.0)
    etcd0, posts0 = etcd_sizes(), posts(env)
    t0 = time.monotonic()
    with ThreadPoolExecutor(args.workers) as pool:
        list(
            pool.map(
                lambda i: client.create(JOBS, ns, job_manifest(i, args.run_s)), range(args.jobs)
            )
        )
    log(f"jobs: {args.jobs} Jobs created in {time.monotonic() - t0:.1f}s")
    wait_until("every Job's pod Succeeded", lambda: len(obs.done_at) >= args.jobs, args.timeout)
    result = finish(env, kube, obs, "jobs", args.jobs, t0, posts0, etcd0, baseline)
    kube.delete(NAMESPACES, "", ns)
    return result


# --- report ----------------------------------------------------------------------------


def report(results: list[Result], args: argparse.Namespace, load: tuple[float, ...]) -> None:
    print(
        f"\n{args.jobs} single-core jobs, {args.nodes} KWOK nodes, pods run {args.run_s}s, "
        f"client qps/burst {args.qps:.0f}/{args.burst}, Caldera max_pending_pods "
        f"{args.max_pending}; load average at start {load[0]:.1f}/{load[1]:.1f}/{load[2]:.1f}\n"
    )
    print(
        "| run | jobs/s | completed | lost | run twice | peak Pending pods | peak pods | "
        "POSTs/job | LIST pods p50/p99 ms | etcd MB start/peak/end (in use) | left after |"
    )
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | --- | ---: | --- | --- |")
    for r in results:
        per_job = ", ".join(
            f"{k} {v / r.jobs:.2f}" for k, v in r.posts.most_common() if v / r.jobs >= 0.01
        )
        left = ", ".join(f"{k} {v}" for k, v in r.left.items()) or "nothing"
        print(
            f"| {r.run} | {r.rate:.1f} | {r.completed} | {r.jobs - r.completed} | {r.twice} | "
            f"{r.peak_pending} | {r.peak_existing} | {per_job} | "
            f"{statistics.median(r.list_ms):.0f} / {pct(r.list_ms, 0.99):.0f} | "
            f"{r.etcd_mb[0]:.1f}/{r.etcd_mb[1]:.1f}/{r.etcd_mb[2]:.1f} "
            f"({r.etcd_in_use_mb[0]:.1f}/{r.etcd_in_use_mb[1]:.1f}/{r.etcd_in_use_mb[2]:.1f}) | "
            f"{left} ({r.left_after_s:.0f}s) |"
        )
    for r in results:
        if r.run.startswith("caldera"):
            print(
                f"\n{r.run}: backend STARTED for {r.backend_started} jobs, twice for "
                f"{r.backend_twice}; {r.refusals} retryable refusals (max_pending_pods)"
            )
        if r.relists > 1:
            print(
                f"{r.run}: the pod watch was reopened {r.relists - 1} times (counts may miss pods)"
            )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--jobs", type=int, default=2000)
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--runs", default="caldera-array,caldera-batches,jobs")
    parser.add_argument("--run-s", type=float, default=2.0, help="how long each pod runs")
    parser.add_argument("--qps", type=float, default=500.0)
    parser.add_argument("--burst", type=int, default=500)
    parser.add_argument("--workers", type=int, default=16)
    parser.add_argument("--submitters", type=int, default=8, help="threads calling submit")
    parser.add_argument("--max-pending", type=int, default=K8sOptions().max_pending_pods)
    parser.add_argument("--timeout", type=float, default=3600.0)
    parser.add_argument("--keep", action="store_true", help="leave the control plane running")
    parser.add_argument(
        "--reuse", action="store_true", help="use the control plane --keep left running as is"
    )
    args = parser.parse_args()
    rate = f"--kube-api-qps={args.qps:.0f} --kube-api-burst={args.burst}"
    os.environ.setdefault("KUBE_SCHEDULER_ARGS", rate)
    os.environ.setdefault("KUBE_CONTROLLER_MANAGER_ARGS", rate)
    t0 = time.monotonic()
    running = read_env() if args.reuse else None
    # up.sh re-applies every node even when all run (minutes for 1,000 on a busy machine)
    env = running if running and running.nodes == args.nodes else ensure_up(nodes=args.nodes)
    log(
        f"control plane at {env.server} with {env.nodes} nodes (up in {time.monotonic() - t0:.0f}s)"
    )
    load = os.getloadavg()
    api = api_client_from_token(env.server, env.admin_token, env.ca_file, pool=8)
    kube = KubeClient(api, TokenBucket(1e6, 10**6), timeout_s=60.0)
    results: list[Result] = []
    try:
        for i, run in enumerate(args.runs.split(",")):
            log(f"run {run}: {args.jobs} jobs")
            if run == "jobs":
                results.append(run_jobs(env, kube, args))
            else:
                results.append(
                    run_caldera(env, kube, run == "caldera-array", (i + 1) * 1_000_000, args)
                )
            log(f"{run}: {results[-1].rate:.1f} jobs/s")
    finally:
        report(results, args, load)
        print(f"load average at the end: {'/'.join(f'{x:.1f}' for x in os.getloadavg())}")
        if not args.keep:
            down()


if __name__ == "__main__":
    main()
