"""Debian's Prometheus scrapes a running gateway's /metrics on a loopback TCP port
(`[metrics] listen` in caldera.toml), and PromQL over Prometheus' HTTP API answers what
squeue counts. Prometheus comes from testenv/metrics/install.sh (CI runs it)."""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.gateway_env import Gateway, running_gateway

PROMETHEUS = shutil.which("prometheus") or "/usr/bin/prometheus"
CONFIG = 'time_scale = 0.016666\nkill_wait_s = 2\n[metrics]\nlisten = "127.0.0.1:0"\n'


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def metrics_gateway() -> Iterator[Gateway]:
    with running_gateway(CONFIG, "caldera-metrics-") as gw:
        yield gw


class Prometheus:
    """A Prometheus server of its own (config, data, port) scraping one target."""

    def __init__(self, target: str, base: Path) -> None:
        assert Path(PROMETHEUS).exists(), "prometheus missing: run testenv/metrics/install.sh"
        self.port = _free_port()
        config = base / "prometheus.yml"
        config.write_text(
            "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n"
            "scrape_configs:\n"
            "  - job_name: caldera\n"
            f"    static_configs:\n      - targets: ['{target}']\n"
        )
        self.log_path = base / "prometheus.log"
        self.log = self.log_path.open("w")
        self.proc = subprocess.Popen(
            [
                PROMETHEUS,
                f"--config.file={config}",
                f"--storage.tsdb.path={base / 'data'}",
                f"--web.listen-address=127.0.0.1:{self.port}",
            ],
            stdout=self.log,
            stderr=subprocess.STDOUT,
        )

    def query(self, promql: str) -> list[dict[str, object]]:
        """An instant query's result vector (raises until Prometheus answers)."""
        url = f"http://127.0.0.1:{self.port}/api/v1/query?" + urllib.parse.urlencode(
            {"query": promql}
        )
        with urllib.request.urlopen(url, timeout=5) as answer:
            doc = json.loads(answer.read())
        assert doc["status"] == "success", doc
        result = doc["data"]["result"]
        assert isinstance(result, list)
        return result

    def scalar(self, promql: str) -> float:
        """The single value of an instant query."""
        result = self.query(promql)
        assert len(result) == 1, (promql, result)
        value = result[0]["value"]
        assert isinstance(value, list)
        return float(value[1])

    def wait(self, promql: str, ok: object, timeout: float = 60) -> float:
        """Poll until the single value satisfies `ok` (a callable); return it."""
        deadline = time.monotonic() + timeout
        last: object = None
        while time.monotonic() < deadline:
            try:
                value = self.scalar(promql)
            except (OSError, AssertionError) as exc:  # not up yet, or no sample yet
                last = exc
            else:
                if callable(ok) and ok(value):
                    return value
                last = value
            time.sleep(0.25)
        self.log.flush()
        tail = self.log_path.read_text()[-2000:]
        raise AssertionError(f"{promql}: still {last!r} after {timeout}s\n{tail}")

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.log.close()


def _count(gw: Gateway, *args: str) -> int:
    return len(gw.ok(["squeue", "-h", *args]).splitlines())


def test_prometheus_scrapes_and_promql_counts_what_squeue_counts(
    metrics_gateway: Gateway,
) -> None:
    gw = metrics_gateway
    endpoint = (gw.home / "metrics.endpoint").read_text().strip()
    assert endpoint.startswith("127.0.0.1:")
    # the TCP listener serves /metrics and nothing of the API
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(f"http://{endpoint}/v1/jobs", timeout=5)
    assert refused.value.code == 404

    cpus = int(gw.ok(["sinfo", "-h", "-o", "%c"]).split()[0])
    submitted = [gw.sbatch("-c", "1", "-t", "600", "--wrap", "sleep 900") for _ in range(cpus + 3)]
    submitted.append(gw.sbatch("-H", "--wrap", "true"))
    submitted.append(gw.sbatch("-p", "debug", '--account=phys"ics', "-H", "--wrap", "true"))
    submitted.append(gw.sbatch("-H", "--wrap", "true", user="tester"))
    deadline = time.monotonic() + 60
    while _count(gw, "-t", "R") < cpus:
        assert time.monotonic() < deadline, gw.ok(["squeue"])
        time.sleep(0.2)
    time.sleep(1.0)  # a scheduling cycle or two: every pending job has its reason
    pending, running = _count(gw, "-t", "PD"), _count(gw, "-t", "R")
    assert (pending, running) == (6, cpus)
    counted_at = time.time()

    base = gw.home.parent
    prom = Prometheus(endpoint, base)
    try:
        prom.wait('up{job="caldera"}', lambda v: v == 1)
        # a sample scraped after squeue counted
        prom.wait("timestamp(slurm_jobs_pending)", lambda v: v > counted_at + 0.5)
        assert prom.scalar("slurm_jobs_pending") == pending
        assert prom.scalar("slurm_jobs_running") == running
        assert prom.scalar('sum(caldera_jobs{state="PENDING"})') == pending
        assert prom.scalar('slurm_partition_jobs_pending{partition="debug"}') == _count(
            gw, "-t", "PD", "-p", "debug"
        )
        assert prom.scalar("sum(caldera_pending_jobs)") == pending
        assert prom.scalar('sum(caldera_pending_jobs{reason="JobHeldUser"})') == 3
        for user in ("root", "tester"):
            assert prom.scalar(f'slurm_user_jobs_pending{{username="{user}"}}') == _count(
                gw, "-t", "PD", "-u", user
            )
        assert prom.scalar('slurm_account_jobs_pending{account="phys\\"ics"}') == 1
        assert prom.scalar("slurm_jobs_cpus_alloc") == running
        submits = 'caldera_submit_duration_seconds_count{result="accepted"}'
        assert prom.scalar(submits) == len(submitted)
        p50 = prom.scalar(
            'histogram_quantile(0.5, caldera_submit_duration_seconds_bucket{result="accepted"})'
        )
        assert 0 < p50 < 5
        assert prom.scalar("sum(caldera_admission_attempts_total)") >= 1
        assert prom.scalar('caldera_cluster_up{cluster="caldera"}') == 1
        routes = prom.query('caldera_api_request_duration_seconds_count{route="/v1/sbatch"}')
        assert routes, "the API's submissions are timed"
    finally:
        prom.stop()
        gw.run(["scancel", *map(str, submitted)])  # running jobs outlive `caldera down`
