"""The commands transport: sbatch, squeue, scontrol, scancel, sacct and sinfo.

JSON where 22.05's is right (`sinfo --json`, `sacct --json` for records and steps), text
where it is not or where text is much cheaper: `sacct -P` for exit codes (22.05's JSON has
return code 0 for `exit 3`), `squeue -o` for the frequent status poll (`squeue --json`
ignores `-u`/`-j` in 22.05 and dumps every job), `scontrol -o show job` for one job's exit
code, `scontrol -o show partition` for partitions (sinfo's JSON has none).

Commands run as the job's user (its uid, gid and groups: Slurm's own permission checks
and accounting then see that user), as root with `sbatch --uid`, or as the gateway.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Collection, Mapping, Sequence
from pathlib import Path
from typing import Any

from gateway.compat.fmt_common import hostlist_expand
from gateway.model.job import wait_status
from slurm_plugin.client import Identity, JobStatus, RowFilter, SubmitRequest
from slurm_plugin.config import SlurmClusterConfig, SubmitAs
from slurm_plugin.errors import SlurmError, SlurmRejected, SlurmUnreachable, classify_failure
from slurm_plugin.from_slurm_json import (
    SlurmAccounting,
    SlurmCluster,
    cluster_from_sinfo_json,
    exit_codes_from_sacct,
    jobs_from_sacct_json,
    jobs_from_squeue_json,
)
from slurm_plugin.mapping import SlurmRef, slurm_state
from slurm_plugin.scontrol_text import parse_scontrol_line, partitions_doc_from_scontrol
from slurm_plugin.statuses import status_from_job

__all__ = ["CliClient", "parse_scontrol_line", "partitions_doc_from_scontrol"]

_READ_TIMEOUT_S = 10.0
_SEP = "\x1f"  # squeue -o separator: names and comments may hold '|'
_SQUEUE_FIELDS = ("%A", "%F", "%K", "%T", "%r", "%u", "%P", "%N", "%V", "%S", "%e", "%j", "%k")
_SQUEUE_FORMAT = _SEP.join(_SQUEUE_FIELDS)
# Variables that change what sbatch does: they were folded into the request already.
SHIMS_MARKER = ".caldera-shims"  # written into `caldera shims` directories


def slurm_command_path() -> str:
    """The gateway's PATH without directories of Caldera shims."""
    dirs = os.environ.get("PATH", "/usr/bin:/bin").split(":")
    return ":".join(d for d in dirs if d and not os.path.exists(os.path.join(d, SHIMS_MARKER)))


_SCRUB = ("SBATCH_", "SLURM_", "SALLOC_", "SRUN_", "SQUEUE_", "SACCT_", "SINFO_", "SCONTROL_")


def _epoch(text: str) -> float | None:
    if not text or text in ("N/A", "Unknown", "None", "(null)"):
        return None
    try:
        return time.mktime(time.strptime(text, "%Y-%m-%dT%H:%M:%S"))
    except ValueError:
        return None


def _opt_int(text: str) -> int | None:
    return int(text) if text.isdigit() else None


def _exit_pair(text: str) -> int | None:
    code, sep, sig = text.partition(":")
    if not sep or not code.isdigit() or not sig.isdigit():
        return None
    return wait_status(int(code), int(sig))


def _status_from_scontrol(rec: Mapping[str, str]) -> JobStatus:
    job_id = int(rec["JobId"])
    task = _opt_int(rec.get("ArrayTaskId", ""))
    array_job = _opt_int(rec.get("ArrayJobId", "")) or 0
    user = rec.get("UserId", "").split("(", 1)[0]
    return JobStatus(
        ref=SlurmRef(array_job if task is not None and array_job else job_id, task),
        state=slurm_state(rec.get("JobState", "")),
        reason=rec.get("Reason", "None"),
        user=user,
        name=rec.get("JobName", ""),
        partition=rec.get("Partition", ""),
        comment="" if rec.get("Comment") in (None, "(null)") else rec["Comment"],
        nodes=hostlist_expand(rec.get("NodeList") or None),
        submit_time=_epoch(rec.get("SubmitTime", "")),
        start_time=_epoch(rec.get("StartTime", "")),
        end_time=_epoch(rec.get("EndTime", "")),
        exit_code=_exit_pair(rec.get("ExitCode", "")),
        derived_exit_code=_exit_pair(rec.get("DerivedExitCode", "")),
        restart_count=_opt_int(rec.get("Restarts", "")),
        time_limit=None,
        array_job_id=array_job if task is not None else 0,
        extra={"job_id": str(job_id)},
    )


class CliClient:
    """SlurmClient over the Slurm commands."""

    def __init__(self, config: SlurmClusterConfig) -> None:
        self.config = config
        self.name = config.name
        self._root = os.geteuid() == 0

    # --- running commands -------------------------------------------------------------

    def _env(self, base: Mapping[str, str] | None = None) -> dict[str, str]:
        if base is None:
            env = {
                k: v
                for k, v in os.environ.items()
                if k in ("PATH", "HOME", "LANG", "LC_ALL", "TZ", "MUNGE_SOCKET")
            }
        else:
            env = {k: v for k, v in base.items() if not k.startswith(_SCRUB)}
            env.setdefault("PATH", os.environ.get("PATH", "/usr/bin:/bin"))
        env.update(self.config.command_env())
        return env

    def _resolve(self, name: str) -> str:
        """The real Slurm command: from `bin_dir`, else the gateway's PATH without Caldera's
        own shims (a job's PATH may start with them, and `sbatch` there is Caldera)."""
        if self.config.bin_dir:
            return self.config.command(name)
        found = shutil.which(name, path=slurm_command_path())
        return found or name

    def _run(
        self,
        argv: Sequence[str],
        *,
        identity: Identity | None = None,
        stdin: str | None = None,
        env: Mapping[str, str] | None = None,
        check: bool = True,
        read: bool = False,
    ) -> subprocess.CompletedProcess[str]:
        """Run a command; `read`: a query, given at most _READ_TIMEOUT_S (squeue retries
        an unreachable controller for 18 s before it fails)."""
        full = [self._resolve(argv[0]), *argv[1:]]
        timeout = self.config.command_timeout_s
        if read:
            timeout = min(timeout, _READ_TIMEOUT_S)
        kwargs: dict[str, Any] = {}
        if identity is not None and self._root and identity.uid != os.geteuid():
            kwargs["user"] = identity.uid
            kwargs["group"] = identity.gid
            try:
                kwargs["extra_groups"] = os.getgrouplist(identity.user, identity.gid)
            except (KeyError, OSError):
                kwargs["extra_groups"] = [identity.gid]
        try:
            proc = subprocess.run(
                full,
                input=stdin,
                capture_output=True,
                text=True,
                errors="surrogateescape",  # a script's bytes pass through whatever they are
                env=self._env(env),
                cwd="/",
                timeout=timeout,
                check=False,
                **kwargs,
            )
        except subprocess.TimeoutExpired as exc:
            raise SlurmUnreachable(
                f"{argv[0]} did not answer within {timeout:.0f} s",
                command=full,
            ) from exc
        except FileNotFoundError as exc:
            raise SlurmError(f"{full[0]}: command not found", command=full) from exc
        except PermissionError as exc:
            raise SlurmError(f"{full[0]}: {exc.strerror}", command=full) from exc
        if check and proc.returncode != 0:
            raise classify_failure(full, proc.returncode, proc.stdout, proc.stderr)
        return proc

    # --- SlurmClient --------------------------------------------------------------------

    def ping(self) -> None:
        """`scontrol ping`: raises SlurmUnreachable when no controller is UP."""
        proc = self._run(["scontrol", "ping"], check=False, read=True)
        if proc.returncode != 0 or " is UP" not in proc.stdout:
            text = (proc.stdout + proc.stderr).strip() or "slurmctld is DOWN"
            raise SlurmUnreachable(text, command=("scontrol", "ping"))

    def version(self) -> str:
        """`sinfo --version` -> `22.05.8`."""
        return self._run(["sinfo", "--version"]).stdout.split()[-1]

    def _sbatch(self, request: SubmitRequest, *extra: str) -> tuple[list[str], Identity | None]:
        """sbatch's argv for a request, and whom to run it as."""
        argv = ["sbatch", "--parsable", *extra, *request.options]
        if request.array_task is not None:
            argv.append(f"--array={request.array_task}")
        if request.dependency:
            argv.append(f"--dependency={request.dependency}")
        identity: Identity | None = request.identity
        if self.config.submit_as is SubmitAs.UID_OPTION:
            argv += [f"--uid={request.identity.uid}", f"--gid={request.identity.gid}"]
            identity = None
        elif self.config.submit_as is SubmitAs.SERVICE:
            identity = None
        return argv, identity

    def submit(self, request: SubmitRequest) -> SlurmRef:
        """sbatch --parsable, the script on stdin (or in a file when it takes arguments)."""
        argv, identity = self._sbatch(request)
        env = dict(request.environment)
        if request.script_args:
            return self._submit_file(argv, request, env, identity)
        proc = self._run(argv, identity=identity, stdin=request.script, env=env)
        return self._parsed_id(proc.stdout, request.array_task)

    def _submit_file(
        self,
        argv: list[str],
        request: SubmitRequest,
        env: Mapping[str, str],
        identity: Identity | None,
    ) -> SlurmRef:
        tmp = Path(tempfile.mkdtemp(prefix="caldera-sbatch-"))
        try:
            path = tmp / "script"
            path.write_text(request.script, errors="surrogateescape")  # any bytes, as sbatch
            if identity is not None and self._root:
                os.chown(tmp, identity.uid, identity.gid)
                os.chown(path, identity.uid, identity.gid)
            path.chmod(0o600)
            tmp.chmod(0o700)
            proc = self._run([*argv, str(path), *request.script_args], identity=identity, env=env)
        finally:
            for child in tmp.iterdir():
                child.unlink()
            tmp.rmdir()
        return self._parsed_id(proc.stdout, request.array_task)

    def test_only(self, request: SubmitRequest) -> str:
        """`sbatch --test-only`: what Slurm's planner says of the request (its stderr line
        `sbatch: Job N to start at T ...`, T in UTC); SlurmRejected when it can never run."""
        argv, identity = self._sbatch(request, "--test-only")
        env = {**request.environment, "TZ": "UTC"}
        return self._run(argv, identity=identity, stdin=request.script, env=env, read=True).stderr

    def partition_state(self, name: str) -> str:
        """A partition's State (`UP`, `DOWN`, `DRAIN`, `INACTIVE`) from slurmctld."""
        out = self._run(["scontrol", "-o", "show", "partition", name], read=True).stdout
        return parse_scontrol_line(out.strip()).get("State", "UNKNOWN")

    @staticmethod
    def _parsed_id(stdout: str, task: int | None) -> SlurmRef:
        first = stdout.strip().splitlines()[0] if stdout.strip() else ""
        job = first.split(";", 1)[0].strip()
        if not job.isdigit():
            raise SlurmRejected(f"sbatch printed no job id: {stdout.strip()!r}")
        return SlurmRef(int(job), task)

    def statuses(
        self, users: Collection[str] | None = None, keep: RowFilter | None = None
    ) -> list[JobStatus]:
        """`squeue -t all -o ...` (one user: filtered by slurmctld, cheap)."""
        argv = ["squeue", "-h", "-t", "all", "-o", _SQUEUE_FORMAT]
        if users:
            argv += ["-u", ",".join(sorted(users))]
        proc = self._run(argv, check=False, read=True)
        if proc.returncode != 0:
            if "Invalid user" in proc.stderr:
                return []
            raise classify_failure(argv, proc.returncode, proc.stdout, proc.stderr)
        out: list[JobStatus] = []
        for line in proc.stdout.splitlines():
            f = line.split(_SEP)
            if len(f) < len(_SQUEUE_FIELDS) or not f[0].isdigit():
                continue
            task = _opt_int(f[2])
            array_job = _opt_int(f[1]) or 0
            comment = "" if f[12] == "(null)" else _SEP.join(f[12:])
            if keep is not None and not keep.keeps(int(f[0]), array_job, comment):
                continue
            ref = (
                SlurmRef(array_job, task)
                if task is not None and array_job
                else SlurmRef(int(f[0]), None)
            )
            out.append(
                JobStatus(
                    ref=ref,
                    state=slurm_state(f[3]),
                    reason=f[4],
                    user=f[5],
                    partition=f[6],
                    nodes=hostlist_expand(f[7] or None),
                    submit_time=_epoch(f[8]),
                    start_time=_epoch(f[9]) if f[3] != "PENDING" else None,
                    end_time=_epoch(f[10]),
                    name=f[11],
                    comment=comment,
                    array_job_id=array_job if task is not None else 0,
                    extra={"job_id": f[0]},
                )
            )
        return out

    def status(self, refs: Sequence[SlurmRef]) -> list[JobStatus]:
        """`scontrol -o show job` per job (a few), else one `squeue --json`."""
        if len(refs) > 8:
            wanted = {r.text for r in refs} | {str(r.job_id) for r in refs}
            doc = self._run(["squeue", "--json"], read=True).stdout
            rows = [status_from_job(j) for j in jobs_from_squeue_json(doc).jobs]
            return [r for r in rows if r.ref.text in wanted]
        out: list[JobStatus] = []
        for ref in refs:
            proc = self._run(["scontrol", "-o", "show", "job", ref.text], check=False, read=True)
            if proc.returncode != 0:
                if "Invalid job id" in proc.stderr:
                    continue
                raise classify_failure(
                    ["scontrol", "show", "job"], proc.returncode, proc.stdout, proc.stderr
                )
            for line in proc.stdout.splitlines():
                if line.startswith("JobId="):
                    out.append(_status_from_scontrol(parse_scontrol_line(line)))
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
        """scancel [-s SIG] [-b] ID[.STEP]."""
        argv = ["scancel"]
        if signal is not None:
            argv.append(f"--signal={signal}")
        if batch_only:
            argv.append("--batch")
        argv.append(ref.text if step is None else f"{ref.text}.{step}")
        proc = self._run(argv, identity=identity, check=False)
        if step is not None and proc.returncode == 2021 & 0xFF and not proc.stderr.strip():
            # a signal to a step that is not running: scancel says nothing, exits 229
            raise SlurmRejected(f"step {step} is not running", command=argv, errno=2021)
        if proc.returncode != 0 or "error" in proc.stderr:
            raise classify_failure(argv, proc.returncode or 1, proc.stdout, proc.stderr)

    def control(self, ref: SlurmRef, action: str, identity: Identity | None = None) -> None:
        """scontrol hold|uhold|release ID (a requeue ends the run with scancel instead:
        EndsAttempts, so that its end is confirmed before the next run)."""
        if action not in ("hold", "uhold", "release"):
            raise ValueError(f"unknown job action {action!r}")
        self._run(["scontrol", action, ref.text], identity=identity)

    def update(
        self, ref: SlurmRef, fields: Mapping[str, str], identity: Identity | None = None
    ) -> None:
        """scontrol update JobId=ID Key=Value..."""
        pairs = [f"{k}={v}" for k, v in fields.items()]
        self._run(["scontrol", "update", f"JobId={ref.text}", *pairs], identity=identity)

    def accounting(self, refs: Sequence[SlurmRef]) -> SlurmAccounting:
        """`sacct --json` records and steps, exit codes from `sacct -P` text."""
        if not refs:
            return SlurmAccounting(())
        ids = ",".join(r.text for r in refs)
        doc = self._run(["sacct", "--json", "-j", ids]).stdout
        text = self._run(
            ["sacct", "-P", "-n", "-j", ids, "-o", "JobIDRaw,ExitCode,DerivedExitCode"]
        ).stdout
        return jobs_from_sacct_json(json.loads(doc), exit_codes=exit_codes_from_sacct(text))

    def submit_lines(self, user: str, since: float) -> dict[int, str]:
        """`sacct -X -u USER -S TIME -o JobIDRaw,SubmitLine`."""
        start = time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(since))
        out = self._run(
            ["sacct", "-X", "-P", "-n", "-u", user, "-S", start, "-o", "JobIDRaw,SubmitLine"]
        ).stdout
        lines: dict[int, str] = {}
        for line in out.splitlines():
            job, _, submit_line = line.partition("|")
            if job.isdigit():
                lines[int(job)] = submit_line
        return lines

    def cluster(self) -> SlurmCluster:
        """`sinfo --json` (nodes) and `scontrol -o show partition`."""
        nodes = json.loads(self._run(["sinfo", "--json"]).stdout)
        parts = partitions_doc_from_scontrol(
            self._run(["scontrol", "-o", "show", "partition"]).stdout
        )
        return cluster_from_sinfo_json(nodes, parts, name=self.name)
