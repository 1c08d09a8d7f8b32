"""The GET /v1/jobs document, with each job encoded once per version.

squeue fetches every visible job on each call. Converting 10,000 records to dicts and
through FastAPI's encoder took ~0.9 s per call; a record is immutable (a change replaces
it), so its JSON is kept, keyed by the record itself, and a call joins the bytes.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import orjson

from gateway.model.codec import job_to_dict
from gateway.model.job import Job

__all__ = ["JobsDocument"]


class JobsDocument:
    """Encoded jobs by id, each valid while the gateway holds the same record."""

    def __init__(self) -> None:
        self._encoded: dict[int, tuple[Job, bytes]] = {}

    def render(self, head: dict[str, Any], jobs: Sequence[Job]) -> bytes:
        """`head` as a JSON object with a `jobs` member listing `jobs` (compact UTF-8 JSON,
        as the API's other answers)."""
        cache = self._encoded
        parts: list[bytes] = []
        for job in jobs:
            hit = cache.get(job.job_id)
            if hit is None or hit[0] is not job:
                hit = cache[job.job_id] = (job, orjson.dumps(job_to_dict(job)))
            parts.append(hit[1])
        if len(cache) > 2 * len(jobs) + 1024:  # jobs past MinJobAge: drop theirs
            keep = {j.job_id for j in jobs}
            self._encoded = {k: v for k, v in cache.items() if k in keep}
        body = orjson.dumps(head)
        return b"".join((body[:-1], b',"jobs":[', b",".join(parts), b"]}"))
