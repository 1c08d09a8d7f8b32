"""Pods bound per second on the local API server: Caldera's gang binder, Volcano and
kube-scheduler placing the same pods in the same run; and the time from submit to all ranks
Running for a 64-rank job.

    python benchmarks/bench_k8s.py [--nodes 1000] [--gangs 250] [--ranks 8]

Starts testenv/k8s with Volcano and N KWOK nodes (testenv/k8s/up.sh; cached binaries), then
for each scheduler in turn: a fresh namespace, the gangs rendered by k8s_bridge (identical
pods but for schedulerName and Volcano's group annotation; PodGroups for Volcano), the
scheduler paused (SIGSTOP for kube-scheduler and vc-scheduler; Caldera's binder simply is
not called yet) while every pod is created, then released; a watch records when each pod
gets its node. Rate = pods / (last binding - release). The namespace is deleted and waited
for before the next scheduler. Caldera runs with the same client settings as the backend
(`--qps/--burst/--workers`), kube-scheduler and Volcano with their defaults.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import sys
import threading
import time
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from gateway.model.backend import EventKind, Launch  # noqa: E402
from gateway.model.job import Job  # noqa: E402
from gateway.model.state import JobState  # noqa: E402
from gateway.model.values import GresItem  # noqa: E402
from k8s_bridge.backend import KubernetesBackend  # noqa: E402
from k8s_bridge.binder import GangBinder, GangDemand  # noqa: E402
from k8s_bridge.informer import Informer  # noqa: E402
from k8s_bridge.inventory import parse_node, parse_usage, pod_requests  # noqa: E402
from k8s_bridge.kube import (  # noqa: E402
    NODES,
    PODS,
    KubeClient,
    KubeError,
    Resource,
    api_client_from_token,
)
from k8s_bridge.options import GangMode, K8sOptions  # noqa: E402
from k8s_bridge.ratelimit import TokenBucket  # noqa: E402
from k8s_bridge.render import GangManifests, render_gang  # noqa: E402
from k8s_bridge.request import GangRequest  # noqa: E402
from tests.support.builders import make_job  # noqa: E402
from tests.support.k8s_env import K8sEnv, ensure_up  # noqa: E402

Obj = dict[str, Any]
NAMESPACES = Resource("", "v1", "namespaces", "Namespace", namespaced=False)
SERVICE_ACCOUNTS = Resource("", "v1", "serviceaccounts", "ServiceAccount")


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def wait_until(what: str, predicate: Callable[[], bool], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise SystemExit(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(0.2)


# --- the pods ---------------------------------------------------------------------------


def gangs_for(ns: str, mode: GangMode, gangs: int, ranks: int) -> list[tuple[Job, GangManifests]]:
    """The same jobs for every scheduler: `gangs` jobs of `ranks` ranks, 1 GPU, 1 cpu."""
    opts = K8sOptions(namespace=ns, run_as_user=False)
    out = []
    for g in range(gangs):
        job = make_job(10_000 + g).nodes(ranks).spec(gres=(GresItem("gpu", None, 1),)).build()
        req = GangRequest(
            job_id=job.job_id,
            spec=job.spec,
            user="bench",
            uid=1000,
            gid=1000,
            script="#!/bin/sh\nsrun ./app\n",
            cluster="bench",
        )
        out.append((job, render_gang(req, opts, mode)))
    return out


def create_all(kube: KubeClient, ns: str, manifests: list[GangManifests], workers: int) -> float:
    started = time.monotonic()
    groups = [m.podgroup for m in manifests if m.podgroup is not None]
    pods = [p for m in manifests for p in m.pods]
    with ThreadPoolExecutor(workers) as pool:
        list(pool.map(lambda o: kube.create_object(ns, o), groups))
        list(pool.map(lambda o: kube.create_object(ns, o), pods))
    return time.monotonic() - started


@dataclass
class BindWatch:
    """When each pod of a namespace got its node (watch event arrival)."""

    bound_at: dict[str, float] = field(default_factory=dict)
    stop: threading.Event = field(default_factory=threading.Event)

    def run(self, kube: KubeClient, ns: str) -> None:
        items, rv = kube.list(PODS, ns)
        now = time.monotonic()
        for pod in items:
            if pod["spec"].get("nodeName"):
                self.bound_at.setdefault(pod["metadata"]["name"], now)
        while not self.stop.is_set():
            try:
                for event in kube.watch(PODS, ns, rv, timeout_s=30):
                    obj = event.get("object") or {}
                    rv = str((obj.get("metadata") or {}).get("resourceVersion") or rv)
                    if event.get("type") in ("ADDED", "MODIFIED") and obj["spec"].get("nodeName"):
                        self.bound_at.setdefault(obj["metadata"]["name"], time.monotonic())
                    if self.stop.is_set():
                        return
            except KubeError:
                time.sleep(0.2)


def pid_of(env: K8sEnv, component: str) -> int:
    return int((env.base_dir / "run" / f"{component}.pid").read_text().strip())


@dataclass
class Result:
    scheduler: str
    pods: int
    create_s: float
    makespan_s: float  # release -> last pod bound
    steady_s: float  # first -> last pod bound
    gang_spread_ms_p50: float
    gang_spread_ms_max: float
    place_s: float | None = None

    @property
    def rate(self) -> float:
        return self.pods / self.makespan_s

    @property
    def steady_rate(self) -> float:
        return (self.pods - 1) / self.steady_s if self.steady_s > 0 else float("inf")


def new_namespace(kube: KubeClient, prefix: str) -> str:
    name = f"{prefix}-{uuid.uuid4().hex[:5]}"
    body = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}
    kube.create(NAMESPACES, "", body)
    wait_until(
        "default service account",
        lambda: kube.get(SERVICE_ACCOUNTS, name, "default") is not None,
        60,
    )
    return name


def delete_namespace(kube: KubeClient, name: str) -> None:
    try:  # at once (no kubelet to wait for); the server goes on if the answer is late
        kube.delete_collection(PODS, name, "", grace_s=0)
    except KubeError as exc:
        log(f"deleting the pods of {name}: {exc}")
    kube.delete(NAMESPACES, "", name)
    wait_until(f"namespace {name} gone", lambda: kube.get(NAMESPACES, None, name) is None, 900)


def run_one(env: K8sEnv, kube: KubeClient, scheduler: str, args: argparse.Namespace) -> Result:
    mode = {
        "caldera": GangMode.CALDERA,
        "volcano": GangMode.VOLCANO,
        "kube-scheduler": GangMode.KUBE_SCHEDULER,
    }[scheduler]
    ns = new_namespace(kube, f"bench-{scheduler}")
    jobs = gangs_for(ns, mode, args.gangs, args.ranks)
    manifests = [m for _, m in jobs]
    total = sum(m.ranks for m in manifests)
    paused = {"volcano": "vc-scheduler", "kube-scheduler": "kube-scheduler"}.get(scheduler)
    binder = informers = None
    if scheduler == "caldera":
        opts = K8sOptions(namespace=ns, qps=args.qps, burst=args.burst, workers=args.workers)
        api = api_client_from_token(env.server, env.admin_token, env.ca_file, pool=args.workers * 2)
        client = KubeClient(api, TokenBucket(args.qps, args.burst))
        binder = GangBinder(client, ns, "bench", opts)
        nodes = Informer(client, NODES, None, parse_node, name="bench-nodes")
        usage = Informer(
            client,
            PODS,
            None,
            parse_usage,
            field_selector="spec.nodeName!=,status.phase!=Succeeded,status.phase!=Failed",
            name="bench-usage",
        )
        informers = (nodes, usage)
        for informer in informers:
            informer.start()
            informer.wait_synced(60)
    if paused:
        os.kill(pid_of(env, paused), signal.SIGSTOP)
    watch = BindWatch()
    try:
        create_s = create_all(kube, ns, manifests, 16)
        log(f"{scheduler}: {total} pods created in {create_s:.1f}s")
        watcher = threading.Thread(target=watch.run, args=(kube, ns), daemon=True)
        watcher.start()
        time.sleep(1.0)  # the watch is open, and the API server has settled
        released = time.monotonic()
        place_s = None
        if paused:
            os.kill(pid_of(env, paused), signal.SIGCONT)
            paused = None
        else:
            assert binder is not None
            assert informers is not None
            demands = [
                GangDemand(
                    job=job,
                    pods=tuple(p["metadata"]["name"] for p in m.pods),
                    requests=tuple(pod_requests(p["spec"]) for p in m.pods),
                    pod_spec=m.pods[0]["spec"],
                )
                for job, m in jobs
            ]
            queued = []

            def bind_now(gang: GangDemand, nodes: tuple[str, ...]) -> None:
                queued.append((gang, nodes, binder.bind_async(gang, nodes, range(gang.ranks))))

            t0 = time.perf_counter()
            placed = binder.place(
                demands, informers[0].items(), informers[1].items().values(), on_placed=bind_now
            )
            place_s = time.perf_counter() - t0
            outcomes = [binder.collect(g, n, q) for g, n, q in queued]
            failed = sum(len(o.failed) for o in outcomes)
            if len(placed) != len(demands) or failed:
                log(f"caldera: placed {len(placed)}/{len(demands)} gangs, {failed} bind errors")
        wait_until(f"{total} pods bound by {scheduler}", lambda: len(watch.bound_at) >= total, 900)
    finally:
        if paused:
            os.kill(pid_of(env, paused), signal.SIGCONT)
        watch.stop.set()
        if informers:
            for informer in informers:
                informer.stop()
        if binder:
            binder.close()
    times = watch.bound_at
    first, last = min(times.values()), max(times.values())
    spreads = []
    for m in manifests:
        ts = [times[p["metadata"]["name"]] for p in m.pods]
        spreads.append((max(ts) - min(ts)) * 1000)
    result = Result(
        scheduler=scheduler,
        pods=total,
        create_s=create_s,
        makespan_s=last - released,
        steady_s=last - first,
        gang_spread_ms_p50=statistics.median(spreads),
        gang_spread_ms_max=max(spreads),
        place_s=place_s,
    )
    log(
        f"{scheduler}: {result.rate:.0f} pods/s ({total} pods in {result.makespan_s:.2f}s; "
        f"first->last {result.steady_rate:.0f}/s; "
        f"gang spread p50 {result.gang_spread_ms_p50:.0f} ms)"
    )
    delete_namespace(kube, ns)
    return result


# --- submit to all ranks Running ------------------------------------------------------


def submit_to_running(
    env: K8sEnv, kube: KubeClient, mode: GangMode, ranks: int, args: argparse.Namespace
) -> float:
    ns = new_namespace(kube, f"bench-e2e-{mode.value}")
    opts = K8sOptions(namespace=ns, mode=mode, qps=args.qps, burst=args.burst, workers=args.workers)
    backend = KubernetesBackend(
        cluster="bench", server=env.server, token=env.admin_token, ca_file=env.ca_file, options=opts
    )
    try:
        backend.mode()
        backend.nodes.wait_synced(60)
        if mode is GangMode.CALDERA:
            backend.usage.wait_synced(60)
        job = make_job(20_000).nodes(ranks).spec(gres=(GresItem("gpu", None, 1),)).build()
        job = replace(job, state=JobState.RUNNING, partition="k8s", cluster="bench")
        launch = Launch(
            job=job,
            script="#!/bin/sh\n",
            environment={},
            placement=(),
            partition="k8s",
            cluster="bench",
        )
        t0 = time.monotonic()
        backend.submit(launch)
        submitted = time.monotonic() - t0
        started = None
        while started is None and time.monotonic() - t0 < 300:
            for ev in backend.poll():
                if ev.kind is EventKind.STARTED:
                    started = time.monotonic() - t0
            time.sleep(0.01)
        if started is None:
            raise SystemExit(f"{ranks}-rank job did not start ({mode.value})")
        log(
            f"{mode.value}: {ranks}-rank job: submit returned after {submitted:.2f}s, "
            f"all Running after {started:.2f}s"
        )
        backend.cancel(job)
        for _ in range(20):
            backend.poll()
            time.sleep(0.1)
        return started
    finally:
        backend.close()
        delete_namespace(kube, ns)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--gangs", type=int, default=250)
    parser.add_argument("--ranks", type=int, default=8)
    parser.add_argument("--qps", type=float, default=2000.0)
    parser.add_argument("--burst", type=int, default=2000)
    parser.add_argument("--workers", type=int, default=32)
    parser.add_argument("--warmup", type=float, default=60.0, help="seconds to let KWOK settle")
    parser.add_argument("--schedulers", default="caldera,volcano,kube-scheduler")
    parser.add_argument("--e2e-ranks", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--json", type=Path, default=None, help="also write the figures here")
    args = parser.parse_args()
    t0 = time.monotonic()
    env = ensure_up(volcano=True, nodes=args.nodes)
    log(
        f"environment: {env.nodes} nodes, Kubernetes {env.kubernetes_version}, "
        f"Volcano {env.volcano_version} (up in {time.monotonic() - t0:.0f}s)"
    )
    api = api_client_from_token(env.server, env.admin_token, env.ca_file, pool=32)
    kube = KubeClient(api, TokenBucket(1e6, 10**6))
    time.sleep(args.warmup)
    schedulers = args.schedulers.split(",")
    results: list[Result] = []
    for round_no in range(args.rounds):
        log(f"round {round_no + 1} of {args.rounds}")
        results.extend(run_one(env, kube, s, args) for s in schedulers)
    e2e = {
        mode.value: submit_to_running(env, kube, mode, args.e2e_ranks, args)
        for mode in (GangMode.CALDERA, GangMode.VOLCANO)
    }
    print(f"\n{env.nodes} KWOK nodes, {args.gangs} gangs x {args.ranks} ranks (1 GPU each)\n")
    print("| scheduler | round | pods | bound/s (release -> last) | bound/s (first -> last) |")
    print("| --- | ---: | ---: | ---: | ---: |")
    for i, r in enumerate(results):
        print(
            f"| {r.scheduler} | {i // len(schedulers) + 1} | {r.pods} | {r.rate:.0f} | "
            f"{r.steady_rate:.0f} |"
        )
    print("\n| scheduler | median bound/s | gang spread p50 / max (ms) | Caldera placement time |")
    print("| --- | ---: | ---: | ---: |")
    for name in schedulers:
        mine = [r for r in results if r.scheduler == name]
        place = [r.place_s for r in mine if r.place_s is not None]
        print(
            f"| {name} | {statistics.median(r.rate for r in mine):.0f} | "
            f"{statistics.median(r.gang_spread_ms_p50 for r in mine):.0f} / "
            f"{max(r.gang_spread_ms_max for r in mine):.0f} | "
            f"{f'{statistics.median(place):.2f}s' if place else '-'} |"
        )
    for mode, seconds in e2e.items():
        print(f"\n{args.e2e_ranks}-rank job, submit -> all ranks Running ({mode}): {seconds:.2f}s")
    if args.json:
        args.json.write_text(
            json.dumps(
                {"results": [r.__dict__ | {"rate": r.rate} for r in results], "e2e": e2e}, indent=2
            )
        )


if __name__ == "__main__":
    main()
