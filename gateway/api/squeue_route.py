"""POST /v1/squeue/render: squeue's output made where the jobs already are.

Decoding 10,000 jobs and rebuilding a Job of each in the command cost ~0.9 s of its
1.4 s; the gateway holds the records, and keeps each one's line per format
(`LineCache`), so a call costs filtering, sorting and joining. The command sends the options
it parsed (parsing and its messages stay in the command) and prints the answer. Anything
that would make the gateway's text differ from the command's own (another TZ, a failure of
the formatter) answers `fallback`, and the command renders as before.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from typing import Annotated, Any

from fastapi import APIRouter, Request
from fastapi.responses import Response
from pydantic import BaseModel, Field

from gateway.compat.job_fields import site_from
from gateway.compat.job_list_order import list_order
from gateway.compat.squeue_fmt import SqueueOptions, render_squeue
from gateway.compat.squeue_fmt_cache import LineCache
from gateway.compat.squeue_fmt_json import JobTexts, squeue_json
from gateway.control.gateway import Gateway
from gateway.control.submit import Caller
from gateway.model.state import JobState

__all__ = ["SqueueBody", "squeue_router"]

Text = Annotated[str, Field(max_length=65536)]
Words = Annotated[list[Text], Field(max_length=100_000)]


class SqueueBody(BaseModel):
    """squeue's parsed options (users resolved to names by the command)."""

    format: Text | None = None
    format_long: Text | None = None
    long: bool = False
    start: bool = False
    array: bool = False
    array_unique: bool = False
    noheader: bool = False
    sort: Text | None = None
    states: Annotated[list[Text], Field(max_length=64)] | None = None  # JobState names
    all_states: bool = False
    job_ids: Words = []
    users: Words = []
    partitions: Words = []
    names: Words = []
    json_out: bool = False  # --json/--yaml
    tz: Text | None = None  # the command's TZ: times print in it


def _answer(doc: dict[str, Any]) -> Response:
    # json, not orjson: text cut inside a character carries lone surrogates, which
    # ensure_ascii escapes and the command's decoder restores
    return Response(json.dumps(doc).encode(), media_type="application/json")


def _text(
    gw: Gateway, site_doc: dict[str, Any], body: SqueueBody, cache: LineCache, texts: JobTexts
) -> str | None:
    """The output, or None when the job ids name no job (squeue's "Invalid job id")."""
    jobs = list_order(gw.visible_jobs())
    site = site_from({"site": site_doc})
    now = time.time()
    if body.json_out:
        return squeue_json(jobs, site=site, cache=texts) + "\n"
    if body.job_ids:
        known = {str(j.job_id) for j in jobs} | {str(j.array_job_id) for j in jobs}
        unknown = [j for j in body.job_ids if j.split("_")[0] not in known]
        if unknown and len(unknown) == len(body.job_ids) and not body.all_states:
            return None
    options = SqueueOptions(
        format=body.format,
        format_long=body.format_long,
        long=body.long,
        start=body.start,
        array=body.array,
        array_unique=body.array_unique,
        noheader=body.noheader,
        sort=body.sort,
        states=None if body.states is None else tuple(JobState[s] for s in body.states),
        all_states=body.all_states,
        job_ids=tuple(body.job_ids),
        users=tuple(body.users),
        partitions=tuple(body.partitions),
        names=tuple(body.names),
        max_array_size=int(site_doc.get("max_array_size", 1001)),
        site=site,
    )
    return render_squeue(jobs, options, now=now, cache=cache)


def squeue_router(
    gw: Gateway,
    caller: Callable[[Request, Gateway], Caller],
    site: Callable[[Gateway], dict[str, Any]],
) -> APIRouter:
    """The route, with its caches of lines and `--json` texts."""
    router = APIRouter()
    cache = LineCache()
    texts = JobTexts()

    @router.post("/v1/squeue/render", response_model=None)
    async def render(request: Request, body: SqueueBody) -> Response:
        """{stdout, stderr, exit_code}, or {fallback: true}: the command renders itself."""
        caller(request, gw)
        if body.tz != os.environ.get("TZ"):
            return _answer({"fallback": True})
        try:
            text = _text(gw, site(gw), body, cache, texts)
        except (ValueError, KeyError):  # the command shows today's error or traceback
            return _answer({"fallback": True})
        if text is None:
            error = "slurm_load_jobs error: Invalid job id specified\n"
            return _answer({"stdout": "", "stderr": error, "exit_code": 1})
        return _answer({"stdout": text, "stderr": "", "exit_code": 0})

    return router
