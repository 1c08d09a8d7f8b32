"""The gateway's HTTP API (FastAPI): what the commands and other clients call.

Every request is made by the Unix-socket peer (uid from SO_PEERCRED). Users see all jobs,
as in Slurm, but act only on their own; operators act on all. Bodies are validated by
pydantic, so malformed requests get a 422 with the field at fault; Slurm-level refusals
come back as `{"error": {"code", "message"}}` with Slurm's wording.
"""

from __future__ import annotations

import asyncio
import binascii
import grp
import logging
import pwd
import time
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Annotated, Any

from fastapi import FastAPI, HTTPException, Path, Query, Request
from fastapi.responses import JSONResponse, Response
from pydantic import BaseModel, Field, field_validator, model_validator

from gateway.api.errors import install_validation_handler
from gateway.api.jobs_doc import JobsDocument
from gateway.api.node_routes import node_router
from gateway.api.peercred import PEER_KEY
from gateway.api.policy_routes import policy_router
from gateway.api.privacy import script_answer
from gateway.api.site_doc import site_document
from gateway.api.squeue_route import squeue_router
from gateway.api.submit_clusters import cluster_choice, refusal, streams_on_cluster
from gateway.api.suspend_routes import suspend_router
from gateway.compat.clusters import ClusterSelectError
from gateway.compat.errors import CompatError
from gateway.compat.optypes import EarlyExit, ParseContext
from gateway.compat.sbatch import first_pass
from gateway.compat.slurm_errors import SlurmErrno
from gateway.control import ops
from gateway.control.arraytasks import Target, parse_targets
from gateway.control.gateway import Gateway
from gateway.control.scancel_select import Filters, select, split_steps
from gateway.control.submit import Caller, SbatchCall
from gateway.control.update_op import apply_update
from gateway.dashboard.routes import dashboard_router
from gateway.metrics.source import metrics_router
from gateway.model.codec import (
    job_to_dict,
    step_to_dict,
)
from gateway.model.job import Job, Step
from gateway.model.state import JobState
from gateway.store.base import JobQuery, StoreError

__all__ = ["build_app"]

log = logging.getLogger("caldera.api")

API_VERSION = "v1"
MAX_BODY = 16 * 1024 * 1024  # a 4 MiB script plus its environment, with room to spare
MAX_TARGETS = 4_000_000  # jobs and array tasks named in one request (as one id may name)
MAX_ID = 2**32 - 1  # job ids and uids are 32-bit, as in Slurm (and parse_targets)
JobIdText = Annotated[str, Field(max_length=1024)]
ShortText = Annotated[str, Field(max_length=1024)]


_SCRIPT_CHARS = 12 * 1024 * 1024  # room to answer Slurm's "too long" past its 4 MiB


def _unbase64(text: str) -> str:
    """Base64 bytes as text, undecodable bytes kept (surrogateescape) as sbatch keeps them."""
    try:
        return binascii.a2b_base64(text, strict_mode=True).decode("utf-8", "surrogateescape")
    except binascii.Error:
        raise ValueError("not valid base64") from None


class SbatchBody(BaseModel):
    """An sbatch invocation. A script or environment entry that is not UTF-8 comes as
    base64 (`script_b64`; `env_b64`: `NAME=VALUE` entries); after validation `script` and
    `env` hold them as text with the odd bytes escaped (surrogateescape)."""

    argv: list[str] = Field(min_length=1, max_length=10_000)
    env: dict[str, str] = Field(default_factory=dict)
    env_b64: list[str] = Field(default_factory=list, max_length=10_000)
    cwd: str = Field(min_length=1, max_length=4096)
    script: str | None = Field(default=None, max_length=_SCRIPT_CHARS)
    script_b64: str | None = Field(default=None, max_length=_SCRIPT_CHARS * 4 // 3 + 4)
    script_path: str | None = Field(default=None, max_length=4096)
    host: str = Field(default="localhost", max_length=255)
    located: bool = True  # False: the client guessed the script instead of asking first
    script_operand: str | None = Field(default=None, max_length=4096)
    token: str | None = Field(default=None, min_length=8, max_length=128)  # idempotency
    retry: bool = False  # the client lost the answer to this token's earlier attempt
    allocation: str | None = Field(default=None, max_length=4096)  # salloc's: its Command

    @field_validator("script_b64")
    @classmethod
    def _script_bytes(cls, value: str | None) -> str | None:
        return None if value is None else _unbase64(value)

    @field_validator("env_b64")
    @classmethod
    def _env_bytes(cls, value: list[str]) -> list[str]:
        entries = [_unbase64(v) for v in value]
        if any("=" not in e or e.startswith("=") for e in entries):
            raise ValueError("each entry must be NAME=VALUE")
        return entries

    @model_validator(mode="after")
    def _as_text(self) -> SbatchBody:
        if self.script_b64 is not None:
            if self.script is not None:
                raise ValueError("give script or script_b64, not both")
            self.script, self.script_b64 = self.script_b64, None
        for entry in self.env_b64:
            name, _, value = entry.partition("=")
            self.env[name] = value
        self.env_b64 = []
        return self


class LocateBody(BaseModel):
    """The argv of an sbatch invocation, for its first pass."""

    argv: list[str] = Field(min_length=1, max_length=10_000)


class SignalBody(BaseModel):
    """scancel: ids and/or filters."""

    ids: list[JobIdText] = Field(default_factory=list, max_length=100_000)
    signal: int | None = Field(default=None, ge=1, le=0xFFFF)  # scancel's uint16_t
    batch_only: bool = False
    user: ShortText | None = None
    name: ShortText | None = None
    states: list[ShortText] | None = Field(default=None, max_length=64)
    partition: ShortText | None = None
    verify: bool = False  # scancel with a signal or filter: ids of no unfinished job are errors
    steps: list[JobIdText] = Field(default_factory=list, max_length=1000)  # `ID.STEP`


class IdsBody(BaseModel):
    """hold / release / requeue."""

    ids: list[JobIdText] = Field(min_length=1, max_length=100_000)
    user_hold: bool = True
    hold_after: bool = False


class UpdateBody(BaseModel):
    """scontrol update JobId=... Key=Value..."""

    id: str = Field(min_length=1, max_length=256)
    fields: dict[ShortText, str] = Field(min_length=1, max_length=256)


class AccessDenied(HTTPException):
    """The request came without peer credentials (not over the Unix socket)."""

    def __init__(self) -> None:
        super().__init__(401, {"code": 2002, "message": "Access/permission denied"})


_NAMES_TTL_S = 60.0
_names: dict[tuple[int, int], tuple[float, str, str]] = {}


def _names_of(uid: int, gid: int) -> tuple[str, str]:
    """User and group names, cached for a minute: a lookup can read /etc/passwd or ask
    NSS, which would otherwise cost as much as a whole submission."""
    now = time.monotonic()
    hit = _names.get((uid, gid))
    if hit is not None and now - hit[0] < _NAMES_TTL_S:
        return hit[1], hit[2]
    try:
        user = pwd.getpwuid(uid).pw_name
    except KeyError:
        user = str(uid)
    try:
        group = grp.getgrgid(gid).gr_name
    except KeyError:
        group = str(gid)
    if len(_names) > 4096:
        _names.clear()
    _names[(uid, gid)] = (now, user, group)
    return user, group


def caller_from_scope(scope: Mapping[str, Any], gw: Gateway) -> Caller:
    """Who is asking: the socket peer's uid and gid, never anything the client sent."""
    peer = scope.get(PEER_KEY)
    if peer is None:
        raise AccessDenied
    _, uid, gid = peer
    user, group = _names_of(uid, gid)
    return Caller(uid, gid, user, group, uid in gw.config.operators)


def _caller(request: Request, gw: Gateway) -> Caller:
    return caller_from_scope(request.scope, gw)


async def submit_answer(gw: Gateway, caller: Caller, body: SbatchBody) -> dict[str, Any]:
    """POST /v1/sbatch: sbatch's stdout, stderr and exit code (and the id, once durable)."""
    call = SbatchCall(
        argv=body.argv,
        env=body.env,
        cwd=body.cwd,
        script=body.script,
        script_path=body.script_path,
        host=body.host,
        located=body.located,
        script_operand=body.script_operand,
        token=body.token,
        retry=body.retry,
        allocation=body.allocation,
    )
    try:  # -M/--clusters naming no known cluster: Slurm's refusal, nothing stored
        clusters = cluster_choice(gw, caller, call)
    except ClusterSelectError as exc:
        return refusal(exc)
    out = await gw.metrics.timed_submit(gw.sbatch(call, caller))  # /metrics: submit latency
    need = out.need_script
    stdout, stderr = await streams_on_cluster(gw, out, clusters)
    return {
        "job_id": out.job_id,
        "stdout": stdout,
        "stderr": stderr,
        "exit_code": out.exit_code,
        "wait": out.wait,
        # a wrong guess of the script: what /v1/sbatch/locate would have said
        "need_script": None if need is None else {"script": need.operand, "wrap": need.wrap},
    }


def _targets(ids: list[str]) -> list[Target]:
    """Parsed job ids; at most MAX_TARGETS jobs and array tasks in one request."""
    out: list[Target] = []
    count = 0
    for text in ids:
        parsed = parse_targets(text)
        if parsed is None:
            raise HTTPException(400, {"code": 2017, "message": f"Invalid job id specified: {text}"})
        count += sum(1 if t.tasks is None else len(t.tasks) for t in parsed)
        if count > MAX_TARGETS:
            message = f"Invalid job id specified: more than {MAX_TARGETS} jobs and tasks at once"
            raise HTTPException(400, {"code": 2017, "message": message})
        out.extend(parsed)
    return out


def _states(names: list[str] | None) -> set[JobState]:
    """Job states by name, or 400 with Slurm's message for the first unknown one."""
    try:
        return {JobState.parse(s) for s in names or ()}
    except ValueError as exc:
        raise HTTPException(400, {"code": 0, "message": str(exc)}) from exc


def _results(results: list[ops.OpResult]) -> dict[str, Any]:
    return {
        "results": [
            {
                "id": r.target,
                "error": None
                if r.error is None
                else {"code": r.error.code, "message": r.error.text},
            }
            for r in results
        ]
    }


async def _merge_cluster_accounting(
    gw: Gateway, jobs: list[Job], steps: list[Step]
) -> tuple[list[Job], list[Step]]:
    """Jobs that ran on a cluster keeping its own accounting (slurmdbd): its records win."""
    by_cluster: dict[str, list[Job]] = {}
    for job in jobs:
        if job.backend_id:
            by_cluster.setdefault(job.cluster, []).append(job)
    replaced: dict[int, Job] = {}
    new_steps: dict[int, list[Step]] = {}
    runs = {j.job_id: j.restart_count for j in jobs}
    for cluster, members in by_cluster.items():
        caps = gw.caps.get(cluster)
        accounting = caps.accounting if caps is not None else None
        if accounting is None:
            continue
        try:
            records = await asyncio.to_thread(accounting.accounting, members)
        except Exception as exc:  # noqa: BLE001 - best effort: keep Caldera's own view
            log.warning("accounting of cluster %s unavailable: %s", cluster, exc)
            continue
        for job_id, record in records.items():  # the cluster's record of the current run
            run = runs.get(job_id, 0)
            replaced[job_id] = replace(record.job, restart_count=run)
            new_steps[job_id] = [replace(s, run=run) for s in record.steps]
    if not replaced:
        return jobs, steps
    out_jobs = [replaced.get(j.job_id, j) for j in jobs]
    out_steps = [s for s in steps if s.job_id not in new_steps or s.run != runs[s.job_id]]
    for items in new_steps.values():
        out_steps.extend(items)
    return out_jobs, out_steps


async def _with_attempts(
    gw: Gateway, jobs: list[Job], states: Sequence[JobState] | None
) -> list[Job]:
    """Each job's earlier runs (in the states asked for) before its current record."""
    earlier: dict[int, list[Job]] = {}
    for run in await asyncio.to_thread(gw.store.attempts, [j.job_id for j in jobs]):
        if states is None or run.state in states:
            earlier.setdefault(run.job_id, []).append(run)
    return [r for j in jobs for r in (*earlier.get(j.job_id, ()), j)]


def build_app(gw: Gateway) -> FastAPI:
    """The API over a running Gateway."""
    app = FastAPI(
        title="Caldera gateway",
        version="0.1.0",
        description="Slurm-compatible job gateway: submit, watch and control batch jobs.",
        max_body_size=MAX_BODY,
    )
    install_validation_handler(app)
    app.include_router(node_router(gw, _caller, site_document))
    app.include_router(squeue_router(gw, _caller, site_document))
    app.include_router(policy_router(gw, _caller))  # sacctmgr, sshare, sprio
    app.include_router(suspend_router(gw, _caller, _targets, _results))  # scontrol suspend
    app.include_router(metrics_router(gw, _caller))  # /metrics, /v1/jobs/{id}/why
    app.include_router(dashboard_router(gw, caller_from_scope))  # /ui/, /v1/token

    @app.exception_handler(StoreError)
    async def store_failed(request: Request, exc: StoreError) -> JSONResponse:
        """The store failed (disk full, database locked): say why, as Slurm's commands do."""
        log.error("%s %s: %s", request.method, request.url.path, exc)
        return JSONResponse({"detail": {"code": 1, "message": exc.cause}}, status_code=503)

    @app.get(f"/{API_VERSION}/ping")
    async def ping(request: Request) -> dict[str, Any]:
        """Liveness, the caller's identity and the gateway's cluster name."""
        caller = _caller(request, gw)
        return {
            "status": "ok",
            "cluster": gw.config.cluster_name,
            "clusters": sorted(gw.clusters),  # every cluster's name, for -M/--clusters
            "uid": caller.uid,
            "user": caller.user,
            "operator": caller.operator,
            "cycles": gw.cycles,
        }

    @app.post(f"/{API_VERSION}/sbatch/locate")
    async def locate(request: Request, body: LocateBody) -> dict[str, Any]:
        """sbatch's first pass: which operand is the script, or --help/--version output."""
        caller = _caller(request, gw)
        try:
            first = first_pass(body.argv, ParseContext(cwd="/", uid=caller.uid))
        except EarlyExit as done:
            return {"early": {"stdout": done.stdout, "code": done.code}, "error": None}
        except CompatError as exc:
            return {
                "early": None,
                "error": {"stderr": exc.render("sbatch"), "exit_code": exc.exit_code},
            }
        return {
            "early": None,
            "error": None,
            "script": first.script_path,
            "wrap": first.wrap is not None,
        }

    @app.post(f"/{API_VERSION}/sbatch")
    async def sbatch(request: Request, body: SbatchBody) -> dict[str, Any]:
        """Submit as sbatch does; the answer carries sbatch's stdout, stderr and exit code."""
        return await submit_answer(gw, _caller(request, gw), body)

    jobs_doc = JobsDocument()

    @app.get(f"/{API_VERSION}/jobs", response_model=None)
    async def jobs(request: Request) -> Response:
        """Every job squeue would show: {now, cluster, site, jobs}."""
        _caller(request, gw)
        head = {"now": time.time(), "cluster": gw.config.cluster_name, "site": site_document(gw)}
        body = jobs_doc.render(head, gw.visible_jobs())
        return Response(body, media_type="application/json")

    @app.get(f"/{API_VERSION}/jobs/{{job_id}}")
    async def job(
        request: Request, job_id: Annotated[int, Path(ge=0, le=MAX_ID)]
    ) -> dict[str, Any]:
        """One job and, for an array, all its records."""
        _caller(request, gw)
        found = await gw.find(job_id)
        if found is None:
            raise HTTPException(404, {"code": 2017, "message": "Invalid job id specified"})
        members = await gw.array_members(found.array_job_id) if found.array_job_id else [found]
        return {
            "now": time.time(),
            "site": site_document(gw),
            "jobs": [job_to_dict(j) for j in members],
        }

    @app.get(f"/{API_VERSION}/jobs/{{job_id}}/script")
    async def script(
        request: Request, job_id: Annotated[int, Path(ge=0, le=MAX_ID)]
    ) -> dict[str, Any]:
        """The batch script and environment of a job: its owner and operators only."""
        return await script_answer(gw, _caller(request, gw), job_id)

    @app.post(f"/{API_VERSION}/jobs/signal")
    async def signal(request: Request, body: SignalBody) -> dict[str, Any]:
        """scancel: cancel or signal jobs by id and/or filters."""
        caller = _caller(request, gw)
        filters = Filters(body.user, body.name, frozenset(_states(body.states)), body.partition)
        jobs = gw.visible_jobs() if body.verify or filters or body.steps else []
        targets, unknown = select(_targets(body.ids), jobs, filters, body.verify)
        results = [ops.OpResult(ops.target_name(t), SlurmErrno.INVALID_JOB_ID) for t in unknown]
        results += await ops.cancel(gw, targets, caller, body.signal, body.batch_only)
        steps, missing = split_steps(body.steps, jobs)  # unknown: named in full
        done = [ops.OpResult(text, SlurmErrno.INVALID_JOB_ID) for text in missing]
        done += await ops.signal_steps(gw, steps, caller, body.signal)
        return {**_results(results), "steps": _results(done)["results"]}

    @app.post(f"/{API_VERSION}/jobs/hold")
    async def hold(request: Request, body: IdsBody) -> dict[str, Any]:
        """scontrol hold / uhold."""
        caller = _caller(request, gw)
        return _results(await ops.hold(gw, _targets(body.ids), caller, body.user_hold))

    @app.post(f"/{API_VERSION}/jobs/release")
    async def release(request: Request, body: IdsBody) -> dict[str, Any]:
        """scontrol release."""
        caller = _caller(request, gw)
        return _results(await ops.release(gw, _targets(body.ids), caller))

    @app.post(f"/{API_VERSION}/jobs/requeue")
    async def requeue(request: Request, body: IdsBody) -> dict[str, Any]:
        """scontrol requeue / requeuehold."""
        caller = _caller(request, gw)
        return _results(await ops.requeue(gw, _targets(body.ids), caller, body.hold_after))

    @app.post(f"/{API_VERSION}/jobs/update")
    async def update(request: Request, body: UpdateBody) -> dict[str, Any]:
        """scontrol update JobId=..."""
        caller = _caller(request, gw)
        targets = _targets([body.id])
        results = [await apply_update(gw, t, body.fields, caller) for t in targets]
        return _results(results)

    @app.get(f"/{API_VERSION}/accounting")
    async def accounting(
        request: Request,
        ids: Annotated[list[Annotated[int, Field(ge=0, le=MAX_ID)]] | None, Query()] = None,
        uids: Annotated[list[Annotated[int, Field(ge=0, le=MAX_ID)]] | None, Query()] = None,
        states: Annotated[list[str] | None, Query()] = None,
        start: Annotated[float | None, Query(allow_inf_nan=False)] = None,
        end: Annotated[float | None, Query(allow_inf_nan=False)] = None,
        names: Annotated[list[str] | None, Query()] = None,
        partitions: Annotated[list[str] | None, Query()] = None,
        duplicates: bool = False,
    ) -> dict[str, Any]:
        """Jobs and steps for sacct; `duplicates` (sacct -D): a requeued job's earlier runs
        too, each a record of its own before the current one, as slurmdbd keeps them."""
        _caller(request, gw)
        parsed_states = list(_states(states)) if states else None
        q = JobQuery(
            job_ids=ids,
            users=uids,
            states=parsed_states,
            start_after=start,
            end_before=end,
            names=names,
            partitions=partitions,
        )
        found = await asyncio.to_thread(gw.store.query, q)
        live = {j.job_id: j for j in gw.jobs.values()}
        merged = [live.get(j.job_id, j) for j in found]
        steps = await asyncio.to_thread(gw.store.steps, [j.job_id for j in merged])
        merged, steps = await _merge_cluster_accounting(gw, merged, steps)
        if duplicates:
            merged = await _with_attempts(gw, merged, parsed_states)
        return {
            "now": time.time(),
            "cluster": gw.config.cluster_name,
            "site": site_document(gw),
            "jobs": [job_to_dict(j) for j in merged],
            "steps": [step_to_dict(s) for s in steps],
        }

    return app
