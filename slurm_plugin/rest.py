"""The slurmrestd transport.

The API version is discovered from `GET /openapi` (22.05 serves v0.0.36, v0.0.37 and
v0.0.38; the first of `rest_versions` the server lists is used). 22.05 with
`rest_auth/local` listens on a Unix socket only and acts as the user slurmrestd runs as,
whoever connects (it accepts its own uid and root): jobs submitted through one socket all
run as that user (`rest_user`). A socket path holding `{user}` names one slurmrestd per
user. With `auth/jwt` (not packaged by Debian for 22.05) the user and token are headers.

22.05 quirks handled here: `GET /jobs?update_time=T` answers 304 when nothing changed (the
cheap poll); job updates answer 200 with a spurious "job array update ... failed" error
although they worked; `DELETE /job/{id}` has no batch-only flag and there is no requeue;
`/slurmdb/` job exit codes are wrong for non-zero exits (signals are right), so the
backend reads exit codes from slurmctld's job record while it has it.
"""

from __future__ import annotations

import http.client
import json
import socket
import threading
import time
from collections.abc import Collection, Mapping, Sequence
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlsplit

from gateway.compat.duration import time_str_to_mins
from slurm_plugin.client import Identity, JobStatus, RowFilter, SubmitRequest
from slurm_plugin.config import RestAuth, SlurmClusterConfig
from slurm_plugin.errors import SlurmError, SlurmRejected, SlurmUnreachable, errno_from_text
from slurm_plugin.from_slurm_json import (
    SlurmAccounting,
    SlurmCluster,
    cluster_from_sinfo_json,
    jobs_from_sacct_json,
    jobs_from_squeue_json,
)
from slurm_plugin.mapping import SlurmRef
from slurm_plugin.rest_job import rest_job_properties
from slurm_plugin.statuses import status_from_job

__all__ = ["RestClient"]

_HELD = 2042  # "Job is in held state, pending scheduler release": a notice, not an error


class _UnixConnection(http.client.HTTPConnection):
    def __init__(self, path: str, timeout: float) -> None:
        super().__init__("localhost", timeout=timeout)
        self._path = path

    def connect(self) -> None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(self.timeout)
        try:
            sock.connect(self._path)
        except OSError:
            sock.close()
            raise
        self.sock = sock


def _errors(doc: Any) -> list[dict[str, Any]]:
    if not isinstance(doc, dict):
        return []
    errs = doc.get("errors") or []
    return [e for e in errs if isinstance(e, dict) and e.get("error_code") != _HELD]


def _message(errors: list[dict[str, Any]]) -> str:
    parts: list[str] = []
    for e in errors:
        text = str(e.get("error") or "")
        desc = str(e.get("description") or "")
        piece = f"{text}: {desc}" if text and desc and desc not in text else (text or desc)
        if piece and piece not in parts:
            parts.append(piece)
    return "; ".join(parts) or "slurmrestd reported an error"


class RestClient:
    """SlurmClient over slurmrestd."""

    def __init__(self, config: SlurmClusterConfig) -> None:
        if not config.rest_url:
            raise ValueError(f"cluster {config.name}: no rest_url")
        self.config = config
        self.name = config.name
        self._version: str | None = None
        self._lock = threading.Lock()
        self._jobs_cache: list[JobStatus] = []
        self._jobs_time = 0  # slurmctld's last update time we have

    # --- HTTP ---------------------------------------------------------------------------

    def acts_as(self, identity: Identity) -> bool:
        """Whether a request as this user can go through slurmrestd."""
        url = self.config.rest_url or ""
        if self.config.rest_auth is RestAuth.JWT or "{user}" in url:
            return True
        return self.config.rest_user is None or self.config.rest_user == identity.user

    def _connection(self, identity: Identity | None) -> http.client.HTTPConnection:
        url = self.config.rest_url or ""
        timeout = self.config.command_timeout_s
        user = identity.user if identity is not None else (self.config.rest_user or "root")
        if url.startswith("unix:"):
            return _UnixConnection(url[5:].replace("{user}", user), timeout)
        parts = urlsplit(url)
        host = parts.hostname or "localhost"
        if parts.scheme == "https":
            return http.client.HTTPSConnection(host, parts.port or 443, timeout=timeout)
        return http.client.HTTPConnection(host, parts.port or 80, timeout=timeout)

    def _headers(self, identity: Identity | None) -> dict[str, str]:
        headers = {"Accept": "application/json", "Content-Type": "application/json"}
        if self.config.rest_auth is RestAuth.JWT:
            user = identity.user if identity is not None else (self.config.rest_user or "root")
            token_file = (self.config.rest_token_file or "").replace("{user}", user)
            try:
                token = Path(token_file).read_text().strip()
            except OSError as exc:
                raise SlurmError(f"JWT token file {token_file}: {exc.strerror}") from exc
            headers["X-SLURM-USER-NAME"] = user
            headers["X-SLURM-USER-TOKEN"] = token
        return headers

    def _request(
        self,
        method: str,
        path: str,
        body: Any = None,
        identity: Identity | None = None,
    ) -> tuple[int, Any]:
        conn = self._connection(identity)
        what = f"{method} {path}"
        try:
            conn.request(
                method,
                path,
                json.dumps(body) if body is not None else None,
                self._headers(identity),
            )
            resp = conn.getresponse()
            raw = resp.read()
        except (OSError, http.client.HTTPException) as exc:
            raise SlurmUnreachable(
                f"slurmrestd at {self.config.rest_url}: {exc}", command=(what,)
            ) from exc
        finally:
            conn.close()
        if resp.status == 304:
            return 304, None
        try:
            doc = json.loads(raw) if raw else None
        except ValueError:
            doc = raw.decode(errors="replace")
        if resp.status in (401, 403):
            raise SlurmRejected(
                f"slurmrestd refused {what}: HTTP {resp.status} {resp.reason}", command=(what,)
            )
        if resp.status >= 500 and not _errors(doc):
            raise SlurmUnreachable(f"slurmrestd: HTTP {resp.status} for {what}", command=(what,))
        return resp.status, doc

    def api(self) -> str:
        """The API version in use (discovered once from /openapi)."""
        if self._version is None:
            _status, doc = self._request("GET", "/openapi")
            paths = doc.get("paths", {}) if isinstance(doc, dict) else {}
            for version in self.config.rest_versions:
                if f"/slurm/{version}/job/submit" in paths:
                    self._version = version
                    break
            else:
                offered = sorted({p.split("/")[2] for p in paths if p.startswith("/slurm/")})
                raise SlurmError(
                    f"slurmrestd at {self.config.rest_url} offers {offered or 'no API'}, "
                    f"none of {list(self.config.rest_versions)}"
                )
        return self._version

    def _slurm(self, tail: str) -> str:
        return f"/slurm/{self.api()}/{tail}"

    def _checked(
        self, method: str, path: str, body: Any = None, identity: Identity | None = None
    ) -> Any:
        status, doc = self._request(method, path, body, identity)
        errors = _errors(doc)
        if status >= 400 or errors:
            text = _message(errors) if errors else f"HTTP {status}"
            code = next((e.get("error_number") or e.get("error_code") for e in errors), None)
            raise SlurmRejected(
                text,
                command=(f"{method} {path}",),
                errno=code if isinstance(code, int) and code > 0 else errno_from_text(text),
            )
        return doc

    # --- SlurmClient --------------------------------------------------------------------

    def ping(self) -> None:
        """GET /ping: SlurmUnreachable unless slurmctld answers UP."""
        doc = self._checked("GET", self._slurm("ping"))
        pings = doc.get("pings", []) if isinstance(doc, dict) else []
        if not any(str(p.get("ping")).upper() == "UP" for p in pings):
            raise SlurmUnreachable(f"slurmctld is not UP: {pings}")

    def version(self) -> str:
        """Slurm's release from the response meta."""
        doc = self._checked("GET", self._slurm("ping"))
        return str(doc.get("meta", {}).get("Slurm", {}).get("release", ""))

    def submit(self, request: SubmitRequest) -> SlurmRef:
        """POST /job/submit with the script and the job description."""
        job = rest_job_properties(request)
        status, doc = self._request(
            "POST",
            self._slurm("job/submit"),
            {"script": request.script, "job": job},
            request.identity,
        )
        job_id = doc.get("job_id") if isinstance(doc, dict) else None
        errors = _errors(doc)
        if not isinstance(job_id, int) or job_id <= 0 or (status >= 400 and errors):
            text = _message(errors) if errors else f"HTTP {status}"
            raise SlurmRejected(
                f"Batch job submission failed: {text}",
                command=("POST job/submit",),
                errno=errno_from_text(text),
            )
        return SlurmRef(job_id, request.array_task)

    def statuses(
        self, users: Collection[str] | None = None, keep: RowFilter | None = None
    ) -> list[JobStatus]:
        """GET /jobs (304 when nothing changed since the last answer: rows are reused)."""
        with self._lock:
            since = self._jobs_time
        query = f"?update_time={since}" if since else ""
        status, doc = self._request("GET", self._slurm("jobs") + query)
        if status == 304:
            with self._lock:
                rows = list(self._jobs_cache)
        else:
            if status >= 400:
                raise SlurmRejected(_message(_errors(doc)), command=("GET jobs",))
            rows = [status_from_job(j) for j in jobs_from_squeue_json(doc).jobs]
            with self._lock:
                self._jobs_cache = rows
                # slurmctld's update time is not in 22.05's answer: a second before now
                self._jobs_time = int(time.time()) - 1
        if users:
            wanted = set(users)
            rows = [r for r in rows if r.user in wanted]
        if keep is not None:
            rows = [
                r
                for r in rows
                if keep.keeps(int(r.extra.get("job_id", r.ref.job_id)), r.array_job_id, r.comment)
            ]
        return rows

    def status(self, refs: Sequence[SlurmRef]) -> list[JobStatus]:
        """GET /job/{id} per job."""
        out: list[JobStatus] = []
        for ref in refs:
            status, doc = self._request("GET", self._slurm(f"job/{ref.text}"))
            if status >= 400:
                errors = _errors(doc)
                if any(e.get("error_number") == 2017 for e in errors):
                    continue
                raise SlurmRejected(_message(errors), command=(f"GET job/{ref.text}",))
            for job in jobs_from_squeue_json(doc).jobs:
                row = status_from_job(job)
                if row.ref.job_id == ref.job_id or str(ref.job_id) == row.extra.get("job_id"):
                    out.append(row)
        return out

    def signal(
        self,
        ref: SlurmRef,
        signal: int | None,
        *,
        batch_only: bool = False,
        step: int | None = None,
        identity: Identity | None = None,
    ) -> None:
        """DELETE /job/{id}[?signal=N] (no batch-only nor step form in 22.05)."""
        if batch_only:
            raise SlurmRejected("slurmrestd 22.05 cannot signal the batch shell only")
        if step is not None:
            raise SlurmRejected("slurmrestd 22.05 cannot signal one step of a job")
        query = f"?signal={signal}" if signal is not None else ""
        self._checked("DELETE", self._slurm(f"job/{ref.text}") + query, identity=identity)

    def _update(self, ref: SlurmRef, body: Mapping[str, Any], identity: Identity | None) -> None:
        status, doc = self._request("POST", self._slurm(f"job/{ref.text}"), dict(body), identity)
        # 22.05 answers every update with "job array update ... failed" (no error number)
        errors = [
            e
            for e in _errors(doc)
            if e.get("error_number") or "job array update" not in str(e.get("description"))
        ]
        if status >= 400 or errors:
            raise SlurmRejected(_message(errors) if errors else f"HTTP {status}")

    def control(self, ref: SlurmRef, action: str, identity: Identity | None = None) -> None:
        """hold/uhold/release through a job update."""
        if action in ("hold", "uhold"):
            self._update(ref, {"hold": True}, identity)
        elif action == "release":
            self._update(ref, {"hold": False}, identity)
        else:
            raise SlurmRejected(f"slurmrestd 22.05 cannot {action} a job")

    def update(
        self, ref: SlurmRef, fields: Mapping[str, str], identity: Identity | None = None
    ) -> None:
        """TimeLimit, Name, Comment, Nice through a job update."""
        body: dict[str, Any] = {}
        for key, value in fields.items():
            k = key.lower()
            if k == "timelimit":
                body["time_limit"] = time_str_to_mins(value)
            elif k in ("name", "jobname"):
                body["name"] = value
            elif k == "comment":
                body["comment"] = value
            elif k == "nice":
                body["nice"] = int(value)
            else:
                raise SlurmRejected(f"slurmrestd 22.05: cannot update {key}")
        self._update(ref, body, identity)

    def accounting(self, refs: Sequence[SlurmRef]) -> SlurmAccounting:
        """GET /slurmdb/job/{id} per job (exit codes as 22.05 stores them: see module doc)."""
        docs: list[Any] = []
        for ref in refs:
            path = f"/slurmdb/{self.api()}/job/{quote(ref.text)}"
            status, doc = self._request("GET", path)
            if status < 400 and isinstance(doc, dict):
                docs.extend(doc.get("jobs") or [])
        return jobs_from_sacct_json({"jobs": docs})

    def submit_lines(self, user: str, since: float) -> dict[int, str]:
        """slurmrestd records no submit line: nothing to search."""
        return {}

    def cluster(self) -> SlurmCluster:
        """GET /nodes and /partitions."""
        nodes = self._checked("GET", self._slurm("nodes"))
        parts = self._checked("GET", self._slurm("partitions"))
        return cluster_from_sinfo_json(nodes, parts, name=self.name)
