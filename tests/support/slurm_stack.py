"""Drive the project's real Slurm 22.05 test cluster (``testenv/slurm``) from tests.

The cluster is started by ``testenv/slurm/up.sh`` (munge, MariaDB + slurmdbd, slurmctld, four
real slurmd nodes ``node01..node04`` in network namespaces, 100 virtual nodes ``big001..big100``
that never run a slurmd, and slurmrestd on a Unix socket). Everything here runs the real
commands (``sbatch``, ``scontrol``, ``squeue``, ``scancel``, ``sacct``) with ``SLURM_CONF``
pointing at the cluster's generated configuration.

Use the session fixture from a ``conftest.py``::

    from tests.support.slurm_stack import slurm_cluster  # noqa: F401  (re-exported fixture)

The fixture starts the cluster when it is not up and leaves it RUNNING at the end of the
session: the cluster is shared (other test sessions and developers use it at the same time)
and starting it costs ~10 s. Stopping it is the CI script's job: ``testenv/slurm/down.sh``
(or :func:`down`). Starting needs root.
"""

from __future__ import annotations

import http.client
import json
import os
import re
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from tests.support.shared_data import CORPUS_DIR, REPO_ROOT

if TYPE_CHECKING:
    from tests.support.slurm_burst import SlurmClusters

__all__ = [
    "CORPUS_DIR",
    "REAL_NODES",
    "SlurmCommandError",
    "SlurmStack",
    "SlurmStackError",
    "cancel",
    "cancel_all",
    "down",
    "ensure_up",
    "job_id_from_sbatch",
    "parse_scontrol_records",
    "rest_get",
    "run_sbatch",
    "sacct_job",
    "scontrol_lines",
    "show_job",
    "show_jobs",
    "slurm_burst_cluster",
    "slurm_cluster",
    "slurm_env",
    "stack",
    "wait_job",
]

TESTENV = REPO_ROOT / "testenv" / "slurm"
DEFAULT_BASE = Path("/tmp/caldera-slurm")
REAL_NODES: tuple[str, ...] = ("node01", "node02", "node03", "node04")

# Environment variables that change what sbatch/srun do; never leak them from the caller.
_SCRUB_PREFIXES = ("SLURM_", "SBATCH_", "SALLOC_", "SRUN_", "SQUEUE_", "SACCT_", "SINFO_", "PMIX_")
_COMMAND_TIMEOUT = 120.0


class SlurmStackError(RuntimeError):
    """The test cluster could not be installed, started or stopped."""

    def __init__(self, what: str, returncode: int | None = None, output: str = "") -> None:
        detail = f" (exit {returncode})" if returncode is not None else ""
        tail = f"\n{output.strip()}" if output.strip() else ""
        super().__init__(f"{what}{detail}{tail}")
        self.what = what
        self.returncode = returncode
        self.output = output


class SlurmCommandError(RuntimeError):
    """A Slurm command exited non-zero; carries the argv, exit code and both streams."""

    def __init__(self, argv: Sequence[str], returncode: int, stdout: str, stderr: str) -> None:
        message = stderr.strip() or stdout.strip()
        super().__init__(f"{' '.join(argv)} exited {returncode}: {message}")
        self.argv = list(argv)
        self.returncode = returncode
        self.stdout = stdout
        self.stderr = stderr


@dataclass(frozen=True)
class SlurmStack:
    """Where the running cluster lives and how to talk to it."""

    base: Path
    slurm_conf: Path
    rest_socket: Path
    env: Mapping[str, str] = field(repr=False)
    nodes: tuple[str, ...] = REAL_NODES

    @property
    def log_dir(self) -> Path:
        return self.base / "log"

    @property
    def jobs_dir(self) -> Path:
        """A world-writable (1777) directory for job output shared by every node."""
        return self.base / "jobs"

    @property
    def mpi_hello(self) -> Path:
        """An MPI program (built by up.sh) that allreduces the ranks and prints its host."""
        return self.base / "bin" / "mpi_hello"

    def env_dict(self) -> dict[str, str]:
        """A fresh, mutable copy of :attr:`env`."""
        return dict(self.env)


def base_dir() -> Path:
    """The cluster's base directory: ``$CALDERA_SLURM_BASE`` or ``/tmp/caldera-slurm``."""
    return Path(os.environ.get("CALDERA_SLURM_BASE", str(DEFAULT_BASE)))


def slurm_env(base: Path | None = None) -> dict[str, str]:
    """The caller's environment without any SLURM_*/SBATCH_*/... variable, plus SLURM_CONF."""
    root = base if base is not None else base_dir()
    env = {k: v for k, v in os.environ.items() if not k.startswith(_SCRUB_PREFIXES)}
    env["SLURM_CONF"] = str(root / "etc" / "slurm.conf")
    env["CALDERA_SLURM_BASE"] = str(root)
    return env


def stack(base: Path | None = None) -> SlurmStack:
    """Paths and environment of the cluster (does not start or check anything)."""
    root = base if base is not None else base_dir()
    return SlurmStack(
        base=root,
        slurm_conf=root / "etc" / "slurm.conf",
        rest_socket=root / "rest" / "slurmrestd.sock",
        env=slurm_env(root),
    )


def _script_env(base: Path) -> dict[str, str]:
    env = dict(os.environ)
    env["CALDERA_SLURM_BASE"] = str(base)
    env.pop("CALDERA_SLURM_LOCKED", None)
    return env


def _run_script(name: str, base: Path, args: Sequence[str] = (), timeout: float = 900) -> str:
    argv = [str(TESTENV / name), *args]
    try:
        proc = subprocess.run(
            argv,
            env=_script_env(base),
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
    except subprocess.TimeoutExpired as exc:
        raise SlurmStackError(f"{name} timed out after {timeout:.0f} s") from exc
    if proc.returncode != 0:
        raise SlurmStackError(f"{name} failed", proc.returncode, proc.stdout + proc.stderr)
    return proc.stdout


def _installed() -> bool:
    if not Path("/usr/sbin/slurmctld").exists() or shutil.which("sbatch") is None:
        return False
    try:
        import pwd

        pwd.getpwnam("tester")
        pwd.getpwnam("tester2")
    except KeyError:
        return False
    return Path("/usr/sbin/mariadbd").exists() and Path("/usr/sbin/slurmrestd").exists()


def ensure_up(base: Path | None = None) -> SlurmStack:
    """Install (when packages or users are missing) and start the cluster; return its paths.

    ``up.sh`` is a ~0.1 s no-op when the cluster is already healthy, and it takes a lock, so
    concurrent callers are safe. Needs root. Raises :class:`SlurmStackError` on failure.
    """
    root = base if base is not None else base_dir()
    if os.geteuid() != 0:
        raise SlurmStackError("the Slurm test cluster needs root to start (testenv/slurm/up.sh)")
    if not _installed():
        _run_script("install.sh", root, timeout=1800)
    _run_script("up.sh", root)
    return stack(root)


def down(base: Path | None = None, *, purge: bool = False) -> None:
    """Stop the cluster (``down.sh``); with ``purge`` also delete its base directory."""
    root = base if base is not None else base_dir()
    _run_script("down.sh", root, ["--purge"] if purge else [])


def _run(
    argv: Sequence[str],
    *,
    env: Mapping[str, str] | None = None,
    cwd: Path | None = None,
    user: str | None = None,
    timeout: float = _COMMAND_TIMEOUT,
) -> subprocess.CompletedProcess[str]:
    full = list(argv)
    if user is not None:
        full = ["runuser", "-u", user, "--", *full]
    return subprocess.run(
        full,
        env=dict(env) if env is not None else slurm_env(),
        cwd=str(cwd) if cwd is not None else None,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def _checked(argv: Sequence[str], **kwargs: Any) -> str:
    proc = _run(argv, **kwargs)
    if proc.returncode != 0:
        raise SlurmCommandError(argv, proc.returncode, proc.stdout, proc.stderr)
    return proc.stdout


def run_sbatch(
    script_text: str | None,
    argv: list[str],
    env: dict[str, str] | None = None,
    cwd: Path | None = None,
    *,
    script_args: Sequence[str] = (),
    script_path: Path | None = None,
    user: str | None = None,
    timeout: float = _COMMAND_TIMEOUT,
) -> subprocess.CompletedProcess[str]:
    """Run real ``sbatch``; never raises on a non-zero exit (rejections are results too).

    ``argv`` are sbatch's own arguments. When ``script_text`` is given it is written to
    ``script_path`` (kept) or to a temporary file in ``cwd`` (removed once sbatch returned;
    sbatch sends the script's text to slurmctld, so the job does not need the file), and its
    path is appended after ``argv``, followed by ``script_args``. Without ``script_text`` the
    command is ``sbatch *argv *script_args`` (pass the script path in ``argv``, or ``--wrap``).

    ``env`` is the complete environment (default :func:`slurm_env`); ``SLURM_CONF`` is added
    when missing, so ``slurm_env() | {"SBATCH_PARTITION": "gpu"}`` and bare dicts both work.
    ``user`` runs sbatch as that user through ``runuser`` (needs root). ``cwd`` defaults to
    the cluster's shared jobs directory.
    """
    run_env = dict(env) if env is not None else slurm_env()
    run_env.setdefault("SLURM_CONF", str(stack().slurm_conf))
    workdir = cwd if cwd is not None else stack().jobs_dir
    temp: Path | None = None
    cmd = ["sbatch", *argv]
    if script_text is not None:
        if script_path is not None:
            target = script_path
            target.write_text(script_text)
        else:
            fd, name = tempfile.mkstemp(prefix="sbatch-", suffix=".sh", dir=workdir)
            with os.fdopen(fd, "w") as fh:
                fh.write(script_text)
            target = temp = Path(name)
        target.chmod(0o644)
        cmd.append(str(target))
    cmd.extend(script_args)
    try:
        return _run(cmd, env=run_env, cwd=workdir, user=user, timeout=timeout)
    finally:
        if temp is not None:
            temp.unlink(missing_ok=True)


_SUBMITTED = re.compile(r"Submitted batch job (\d+)")


def job_id_from_sbatch(stdout: str) -> str:
    """The job id in sbatch output: ``Submitted batch job N`` or --parsable's ``N[;cluster]``."""
    match = _SUBMITTED.search(stdout)
    if match:
        return match.group(1)
    first = stdout.strip().splitlines()[0] if stdout.strip() else ""
    job_id = first.split(";", 1)[0].strip()
    if not job_id.isdigit():
        raise ValueError(f"no job id in sbatch output: {stdout!r}")
    return job_id


def scontrol_lines(args: Sequence[str], *, env: Mapping[str, str] | None = None) -> str:
    """``scontrol *args`` stdout; raises :class:`SlurmCommandError` when it fails."""
    return _checked(["scontrol", *args], env=env)


# Keys that scontrol (22.05, multi-line format) prints last on their line and whose values
# may contain spaces (or anything else): their value is the rest of the line.
_REST_OF_LINE_KEYS = frozenset(
    {
        "JobName",
        "Dependency",
        "Command",
        "WorkDir",
        "StdErr",
        "StdIn",
        "StdOut",
        "Comment",
        "AdminComment",
        "SystemComment",
        "Power",
    }
)
# A key starts a line or follows whitespace: JobId, MCS_label, CPUs/Task, ReqB:S:C:T, AllocNode:Sid
_KEY = re.compile(r"(?:(?<=\s)|^)([A-Z][A-Za-z0-9_]*(?:[:/][A-Za-z0-9_]+)*)=")


def _parse_line(line: str, into: dict[str, str]) -> None:
    matches = list(_KEY.finditer(line))
    if not matches:  # a continuation of the previous value (not printed by 22.05)
        return
    for i, match in enumerate(matches):
        key = match.group(1)
        if key in _REST_OF_LINE_KEYS:
            into[key] = line[match.end() :].rstrip()
            return
        end = matches[i + 1].start() if i + 1 < len(matches) else len(line)
        into[key] = line[match.end() : end].strip()


def parse_scontrol_records(text: str) -> list[dict[str, str]]:
    """Parse ``scontrol show job|node|partition|reservation`` output into one dict per record.

    Expects scontrol's default multi-line format (not ``-o``): records are separated by blank
    lines, each ``Key=value`` pair is on an indented line with others. Values keep their
    spaces: a value runs until the next ``Key=`` that follows whitespace, and the keys in
    ``_REST_OF_LINE_KEYS`` (Command, WorkDir, Std*, Comment, JobName, ...) take the rest of
    their line. Values such as ``TRES=cpu=8,mem=800M`` keep their inner ``=``.
    """
    records: list[dict[str, str]] = []
    current: dict[str, str] = {}
    for raw in text.splitlines():
        line = raw.rstrip("\n")
        if not line.strip():
            if current:
                records.append(current)
                current = {}
            continue
        _parse_line(line.strip(), current)
    if current:
        records.append(current)
    return records


def show_jobs(job_id: str, *, env: Mapping[str, str] | None = None) -> list[dict[str, str]]:
    """Every record ``scontrol show job <id>`` prints (an array job prints one per task group)."""
    return parse_scontrol_records(scontrol_lines(["show", "job", job_id], env=env))


def show_job(job_id: str, *, env: Mapping[str, str] | None = None) -> dict[str, str]:
    """``scontrol show job <id>`` as key -> value.

    For an array job id (``46``) this is the record whose ``JobId`` is that id (the pending
    meta record, ``ArrayTaskId=0-99``), else the first; for ``46_7`` it is that task.
    """
    records = show_jobs(job_id, env=env)
    if not records:
        raise SlurmCommandError(["scontrol", "show", "job", job_id], 0, "", "no job record")
    if "_" in job_id:
        array_id, task = job_id.split("_", 1)
        for rec in records:
            if rec.get("ArrayJobId") == array_id and rec.get("ArrayTaskId") == task:
                return rec
    for rec in records:
        if rec.get("JobId") == job_id:
            return rec
    return records[0]


def cancel(*job_ids: str, env: Mapping[str, str] | None = None) -> None:
    """``scancel`` the given jobs (ignores jobs that already ended)."""
    if job_ids:
        _run(["scancel", *job_ids], env=env)


_ACTIVE_STATES = "PD,R,CG,CF,S,ST,RQ,RH,RF,RS,SE,SO,RD"


def cancel_all(
    *, user: str | None = None, wait: float = 30.0, env: Mapping[str, str] | None = None
) -> list[str]:
    """Cancel every active job (of ``user`` when given) and wait until none is running.

    The cluster is shared: without ``user`` this cancels other sessions' jobs too.
    Returns the cancelled job ids.
    """
    argv = ["squeue", "-h", "-t", _ACTIVE_STATES, "-o", "%A"]
    if user is not None:
        argv += ["-u", user]
    ids = sorted(set(_checked(argv, env=env).split()), key=int)
    if not ids:
        return []
    _run(["scancel", *ids], env=env)
    deadline = time.monotonic() + wait
    while time.monotonic() < deadline:
        left = _checked(
            ["squeue", "-h", "-t", _ACTIVE_STATES, "-o", "%A", "-j", ",".join(ids)], env=env
        )
        if not left.strip():
            break
        time.sleep(0.2)
    return ids


_FINISHED = re.compile(
    r"^(COMPLETED|FAILED|CANCELLED|TIMEOUT|OUT_OF_MEMORY|NODE_FAIL|PREEMPTED|BOOT_FAIL|DEADLINE)"
)


def wait_job(
    job_id: str, timeout: float = 120.0, *, env: Mapping[str, str] | None = None
) -> dict[str, str]:
    """Poll ``scontrol show job`` until the job has finished; return its last record."""
    deadline = time.monotonic() + timeout
    while True:
        rec = show_job(job_id, env=env)
        if _FINISHED.match(rec.get("JobState", "")):
            return rec
        if time.monotonic() > deadline:
            raise TimeoutError(
                f"job {job_id} still {rec.get('JobState')} ({rec.get('Reason')}) after"
                f" {timeout:.0f} s; the cluster is shared, other sessions' jobs may hold the nodes"
            )
        time.sleep(0.2)


def sacct_job(
    job_id: str, timeout: float = 30.0, *, env: Mapping[str, str] | None = None
) -> dict[str, str]:
    """The job's allocation line from ``sacct -X -P`` once slurmdbd has it (it lags a little)."""
    fields = "JobID,JobName,User,Account,Partition,QOS,State,ExitCode,NodeList,AllocTRES"
    deadline = time.monotonic() + timeout
    while True:
        out = _checked(["sacct", "-X", "-P", "-n", "-j", job_id, "-o", fields], env=env)
        for line in out.splitlines():
            values = line.split("|")
            rec = dict(zip(fields.split(","), values, strict=False))
            # slurmdbd can briefly hold a finished record without its partition: wait for it
            if (
                rec.get("JobID") == job_id
                and _FINISHED.match(rec.get("State", ""))
                and rec.get("Partition")
            ):
                return rec
        if time.monotonic() > deadline:
            raise TimeoutError(f"sacct has no finished record for job {job_id}: {out!r}")
        time.sleep(0.3)


class _UnixHTTPConnection(http.client.HTTPConnection):
    def __init__(self, path: Path, timeout: float) -> None:
        super().__init__("localhost", timeout=timeout)
        self._path = path

    def connect(self) -> None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(self.timeout)
        sock.connect(str(self._path))
        self.sock = sock


def rest_get(path: str, *, socket_path: Path | None = None, timeout: float = 30.0) -> Any:
    """GET ``path`` from slurmrestd over its Unix socket and decode the JSON body.

    slurmrestd runs as ``tester`` with ``rest_auth/local``: it accepts connections from its own
    uid and from root, and rejects other users (HTTP 401 ``Authentication failure``).
    """
    conn = _UnixHTTPConnection(socket_path or stack().rest_socket, timeout)
    try:
        conn.request("GET", path, headers={"Accept": "application/json"})
        resp = conn.getresponse()
        body = resp.read().decode()
    finally:
        conn.close()
    if resp.status != 200:
        raise SlurmCommandError(["GET", path], resp.status, body, resp.reason)
    return json.loads(body)


@pytest.fixture(scope="session")
def slurm_cluster() -> SlurmStack:
    """The running test cluster (started when needed; left running after the session)."""
    if os.geteuid() != 0:
        pytest.skip("the Slurm test cluster needs root (testenv/slurm/up.sh)")
    return ensure_up()


@pytest.fixture(scope="session")
def slurm_burst_cluster() -> SlurmClusters:
    """Both real clusters, caldera and burst (tests/support/slurm_burst.py; started when
    needed, left running after the session)."""
    if os.geteuid() != 0:
        pytest.skip("the Slurm test clusters need root (testenv/slurm/up.sh)")
    from tests.support.slurm_burst import ensure_burst_up

    return ensure_burst_up()
