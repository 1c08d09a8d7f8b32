"""When a job would start on a Slurm cluster, from Slurm's own planner.

`sbatch --test-only` with the request the job would be submitted with runs slurmctld's
backfill planner and prints `sbatch: Job N to start at 2026-11-25T23:59:37 using 1
processors on nodes node04 in partition real` (nothing is submitted). The time is printed
in the command's time zone, so the command runs with TZ=UTC. slurmrestd v0.0.38 has no
job_will_run, so the commands answer for every transport (none without them). The planner
ignores a partition's state (a DOWN partition's job "starts now"): the partition's State is
asked too, and only an UP partition gets a time. Unreachable, refused (a request that can
never run there) or down: None, "unknown". Answers are kept per request shape (what the
planner looks at: not names, paths or comments) and partition for `predict_ttl_s`.
"""

from __future__ import annotations

import calendar
import logging
import re
import threading
import time
from collections.abc import Callable, Hashable

from gateway.model.backend import Launch
from gateway.model.job import Job
from slurm_plugin.cli import CliClient
from slurm_plugin.client import Identity, SubmitRequest
from slurm_plugin.errors import SlurmError, SlurmUnreachable
from slurm_plugin.submit_args import build_request
from slurm_plugin.watch import Watcher

__all__ = ["SlurmPredict", "StartCache", "parse_test_only", "request_shape"]

log = logging.getLogger("caldera.slurm")

_CACHE_LIMIT = 4096
_PROBE_SCRIPT = "#!/bin/sh\ntrue\n"  # the job's own options are on the command line
_START = re.compile(r"\bJob \d+ to start at (\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)\b")
# options that do not change when or where a job can start
_VOLATILE = (
    "--comment=",
    "--job-name=",
    "--output=",
    "--error=",
    "--input=",
    "--chdir=",
    "--mail-user=",
    "--mail-type=",
    "--open-mode=",
)


def parse_test_only(text: str) -> float | None:
    """The epoch time in `sbatch --test-only`'s answer (printed with TZ=UTC), if any."""
    m = _START.search(text)
    if m is None:
        return None
    return float(calendar.timegm(time.strptime(m.group(1), "%Y-%m-%dT%H:%M:%S")))


def request_shape(request: SubmitRequest) -> Hashable:
    """What of a submission Slurm's planner looks at (a cache key)."""
    options = tuple(o for o in request.options if not o.startswith(_VOLATILE))
    return (request.identity.user, options, request.array_task)


class StartCache:
    """Predicted starts by key for `ttl_s` seconds (None, "unknown", is kept too: asking a
    dead controller again at once only costs more)."""

    def __init__(
        self,
        ttl_s: float,
        clock: Callable[[], float] = time.monotonic,
        limit: int = _CACHE_LIMIT,
    ) -> None:
        self.ttl_s = ttl_s
        self._clock = clock
        self._limit = limit
        self._lock = threading.Lock()
        self._items: dict[Hashable, tuple[float, float | None]] = {}

    def get(self, key: Hashable) -> tuple[bool, float | None]:
        """(found, prediction)."""
        with self._lock:
            item = self._items.get(key)
            if item is None or self._clock() - item[0] > self.ttl_s:
                return False, None
            return True, item[1]

    def put(self, key: Hashable, value: float | None) -> None:
        """Keep an answer (the oldest half goes when the cache is full)."""
        now = self._clock()
        with self._lock:
            if len(self._items) >= self._limit:
                fresh = sorted(self._items.items(), key=lambda kv: kv[1][0])[self._limit // 2 :]
                self._items = dict(fresh)
            self._items[key] = (now, value)


class SlurmPredict(Watcher):
    """The prediction half of SlurmBackend (which sets `_predictions`)."""

    _predictions: StartCache

    def predict_start(self, job: Job, partition: str) -> float | None:
        """When `job` would start in `partition` (Caldera's name) of this cluster, as epoch
        seconds, by Slurm's planner; None when unknown (unreachable, down, refused).
        Blocking: a worker thread calls it."""
        if self.cli is None:
            return None  # slurmrestd v0.0.38 has no job_will_run
        launch = Launch(
            job=job,
            script=_PROBE_SCRIPT,
            environment={},
            placement=(),
            partition=partition,
            cluster=self.name,
        )
        try:
            request = build_request(launch, self.config, Identity(job.user, job.uid, job.gid))
        except SlurmError as exc:  # not a partition of this cluster, a bad image ...
            log.info("no prediction for job %s on %s: %s", job.job_id, self.name, exc)
            return None
        key = (partition, request_shape(request))
        found, value = self._predictions.get(key)
        if found:
            return value
        value = self._ask_planner(self.cli, request)
        self._predictions.put(key, value)
        return value

    def _ask_planner(self, cli: CliClient, request: SubmitRequest) -> float | None:
        try:
            self._fail_fast()
            cli.ping()  # fails at once where the others retry for 9-18 s
            partitions = request.spec.partitions
            if partitions and cli.partition_state(partitions[0]) != "UP":
                return None
            return parse_test_only(cli.test_only(request))
        except SlurmUnreachable as exc:
            self._failed(exc)
            return None
        except SlurmError as exc:
            log.info("Slurm's planner on %s: %s", self.name, exc)
            return None
