"""What the servers say during benchmarks/k8s_flood.py: a pod watch of the namespace (phases,
runs per job, completions), LIST pods latency, etcd's database size and the API server's
POSTs by resource. Kept apart so the flood script stays short."""

from __future__ import annotations

import os
import re
import ssl
import sys
import threading
import time
import urllib.request
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from k8s_bridge.kube import PODS, KubeClient, KubeError
from k8s_bridge.names import LABEL_JOB
from tests.support.k8s_env import K8sEnv

__all__ = ["Observer", "etcd_sizes", "pct", "posts"]

Obj = dict[str, Any]
POST_RE = re.compile(r"^apiserver_request_total\{([^}]*)\} ([0-9.e+]+)$")


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


# --- what the servers say about themselves ------------------------------------------------


def fetch_text(url: str, token: str | None = None, ca_file: Path | None = None) -> str:
    if not url.startswith(("http://", "https://")):
        raise ValueError(f"not an HTTP URL: {url}")
    req = urllib.request.Request(url)  # noqa: S310 (checked above)
    if token:
        req.add_header("Authorization", f"Bearer {token}")
    ctx = ssl.create_default_context(cafile=str(ca_file)) if ca_file else None
    with urllib.request.urlopen(req, timeout=10, context=ctx) as resp:  # noqa: S310
        return str(resp.read().decode())


def etcd_sizes() -> tuple[float, float]:
    """etcd's database size: (allocated, in use) bytes."""
    text = fetch_text(f"http://127.0.0.1:{os.environ['CALDERA_K8S_ETCD_PORT']}/metrics")
    values = dict(
        line.split(" ", 1) for line in text.splitlines() if line.startswith("etcd_mvcc_db_total")
    )
    return (
        float(values["etcd_mvcc_db_total_size_in_bytes"]),
        float(values["etcd_mvcc_db_total_size_in_use_in_bytes"]),
    )


def posts(env: K8sEnv) -> Counter[str]:
    """Successful POSTs so far, by resource[/subresource] (apiserver_request_total)."""
    out: Counter[str] = Counter()
    for line in fetch_text(f"{env.server}/metrics", env.admin_token, env.ca_file).splitlines():
        match = POST_RE.match(line)
        if not match:
            continue
        labels = dict(re.findall(r'(\w+)="([^"]*)"', match.group(1)))
        if labels.get("verb") == "POST" and labels.get("code") == "201":
            sub = labels.get("subresource")
            out[labels.get("resource", "?") + (f"/{sub}" if sub else "")] += int(
                float(match.group(2))
            )
    return out


# --- the observer: a pod watch and a LIST/etcd sampler -----------------------------------


@dataclass
class Observer:
    """Pods of one namespace as the API server shows them, while a run goes on."""

    kube: KubeClient
    ns: str
    phases: dict[str, str] = field(default_factory=dict)  # pod uid -> phase
    runs: defaultdict[str, set[str]] = field(default_factory=lambda: defaultdict(set))
    done_at: dict[str, float] = field(default_factory=dict)  # job -> first Succeeded seen
    peak_pending: int = 0
    peak_existing: int = 0
    relists: int = 0
    list_ms: list[float] = field(default_factory=list)
    etcd: list[tuple[float, float]] = field(default_factory=list)
    stop: threading.Event = field(default_factory=threading.Event)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def _see(self, kind: str, pod: Obj) -> None:
        meta = pod.get("metadata") or {}
        uid = str(meta.get("uid"))
        phase = str((pod.get("status") or {}).get("phase") or "Pending")
        job = str((meta.get("labels") or {}).get(LABEL_JOB, "?"))
        with self.lock:
            if kind == "DELETED":
                self.phases.pop(uid, None)
            else:
                self.phases[uid] = phase
            if phase in ("Running", "Succeeded", "Failed"):
                self.runs[job].add(uid)
            if phase == "Succeeded":
                self.done_at.setdefault(job, time.monotonic())
            pending = sum(1 for p in self.phases.values() if p == "Pending")
            self.peak_pending = max(self.peak_pending, pending)
            self.peak_existing = max(self.peak_existing, len(self.phases))

    def watch(self) -> None:
        while not self.stop.is_set():
            try:
                items, rv = self.kube.list(PODS, self.ns)
                with self.lock:
                    self.phases.clear()
                for pod in items:
                    self._see("ADDED", pod)
                for event in self.kube.watch(PODS, self.ns, rv, timeout_s=3600):
                    if event.get("type") == "ERROR":
                        break
                    if event.get("type") != "BOOKMARK":
                        self._see(str(event.get("type")), event.get("object") or {})
                    if self.stop.is_set():
                        return
            except KubeError as exc:
                log(f"pod watch: {exc}")
                time.sleep(0.2)
            self.relists += 1

    def sample(self) -> None:
        while not self.stop.is_set():
            t0 = time.perf_counter()
            try:
                self.kube.list(PODS, self.ns)
                self.list_ms.append((time.perf_counter() - t0) * 1000)
            except KubeError as exc:
                log(f"LIST pods: {exc}")
            try:
                self.etcd.append(etcd_sizes())
            except OSError as exc:
                log(f"etcd metrics: {exc}")
            self.stop.wait(0.5)

    def start(self) -> None:
        for target in (self.watch, self.sample):
            threading.Thread(target=target, daemon=True).start()
