"""A real Caldera gateway for end-to-end tests: `caldera up` in a fresh home, the shims on
PATH, and helpers that run the installed commands as a user would (optionally as another
uid through runuser).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import psutil
import pytest

from containers.proctrack import end_attempt, from_record

__all__ = [
    "Gateway",
    "discard_gateway",
    "end_jobs_left",
    "gateway",
    "running_gateway",
    "start_gateway",
    "stop_gateway",
]

CALDERA = [sys.executable, "-m", "gateway.cli.main"]


@dataclass
class Gateway:
    """A running gateway and how to talk to it."""

    home: Path
    shims: Path
    workdir: Path

    @property
    def socket(self) -> Path:
        """The API socket."""
        return self.home / "gateway.sock"

    def env(self, extra: Mapping[str, str] | None = None) -> dict[str, str]:
        """An environment whose PATH finds the shims first."""
        env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "SBATCH_"))}
        env.update(
            CALDERA_HOME=str(self.home),
            CALDERA_SOCKET=str(self.socket),
            PATH=f"{self.shims}:{env.get('PATH', '/usr/bin:/bin')}",
        )
        env.update(extra or {})
        return env

    def run(
        self,
        argv: Sequence[str] | str,
        *,
        user: str | None = None,
        cwd: Path | None = None,
        env: Mapping[str, str] | None = None,
        stdin: str | None = None,
        timeout: float = 120,
    ) -> subprocess.CompletedProcess[str]:
        """Run a command (a string goes through `sh -c`) as root or as `user`."""
        cmd = ["sh", "-c", argv] if isinstance(argv, str) else list(argv)
        full_env = self.env(env)
        if user is not None:
            keep = ",".join(sorted(full_env))
            cmd = [
                "runuser",
                "-u",
                user,
                "--",
                "env",
                *[f"{k}={v}" for k, v in full_env.items()],
                *cmd,
            ]
            del keep
        return subprocess.run(
            cmd,
            cwd=cwd or self.workdir,
            env=full_env,
            input=stdin,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )

    def ok(self, argv: Sequence[str] | str, **kw: object) -> str:
        """Run and insist on exit 0; return stdout."""
        r = self.run(argv, **kw)  # type: ignore[arg-type]
        assert r.returncode == 0, (
            f"{argv}: exit {r.returncode}\nstdout={r.stdout}\nstderr={r.stderr}"
        )
        return r.stdout

    def sbatch(self, *args: str, **kw: object) -> int:
        """`sbatch --parsable ...` -> job id."""
        return int(self.ok(["sbatch", "--parsable", *args], **kw).strip().split(";")[0])

    def api(self, path: str) -> object:
        """GET the API (as root)."""
        out = subprocess.run(
            ["curl", "-s", "--unix-socket", str(self.socket), f"http://caldera{path}"],
            capture_output=True,
            text=True,
            check=True,
            timeout=30,
        ).stdout
        return json.loads(out)

    def job(self, job_id: int) -> dict[str, object]:
        """The API's record of a job (the first record for an array)."""
        data = self.api(f"/v1/jobs/{job_id}")
        assert isinstance(data, dict)
        jobs = data["jobs"]
        return next((j for j in jobs if j["job_id"] == job_id), jobs[0])

    def wait(
        self,
        job_id: int,
        states: Sequence[str] = (
            "COMPLETED",
            "FAILED",
            "CANCELLED",
            "TIMEOUT",
            "OUT_OF_MEMORY",
            "NODE_FAIL",
        ),
        timeout: float = 60,
    ) -> dict[str, object]:
        """Wait until every record of the job is in one of `states`."""
        deadline = time.monotonic() + timeout
        while True:
            data = self.api(f"/v1/jobs/{job_id}")
            assert isinstance(data, dict)
            jobs = data["jobs"]
            if jobs and all(j["state"] in states for j in jobs):
                return self.job(job_id)
            if time.monotonic() > deadline:
                raise AssertionError(f"job {job_id} still {[j['state'] for j in jobs]}")
            time.sleep(0.1)


def start_gateway(base: Path, config: str = "") -> Gateway:
    """`caldera up` in `base/home` with an optional caldera.toml."""
    home = base / "home"
    home.mkdir(parents=True)
    os.chmod(base, 0o755)
    os.chmod(home, 0o755)
    if config:
        (home / "caldera.toml").write_text(config)
    work = base / "work"
    work.mkdir()
    os.chmod(work, 0o1777)
    env = {**os.environ, "CALDERA_HOME": str(home), "CALDERA_SOCKET": str(home / "gateway.sock")}
    shims = home / "shims"
    subprocess.run([*CALDERA, "shims", str(shims)], env=env, check=True, capture_output=True)
    up = subprocess.run([*CALDERA, "up"], env=env, capture_output=True, text=True, timeout=60)
    assert up.returncode == 0, up.stderr + up.stdout
    return Gateway(home, shims, work)


def restart(gw: Gateway) -> None:
    """`caldera up` again in the gateway's home (after a crash or `caldera down`)."""
    env = {**os.environ, "CALDERA_HOME": str(gw.home), "CALDERA_SOCKET": str(gw.socket)}
    up = subprocess.run([*CALDERA, "up"], env=env, capture_output=True, text=True, timeout=60)
    assert up.returncode == 0, up.stderr + up.stdout


def stop_gateway(gw: Gateway) -> None:
    """`caldera down`: the daemon stops, its jobs run on (a restart adopts them)."""
    env = {**os.environ, "CALDERA_HOME": str(gw.home), "CALDERA_SOCKET": str(gw.socket)}
    subprocess.run([*CALDERA, "down"], env=env, capture_output=True, timeout=60, check=False)


def end_jobs_left(home: Path, timeout: float = 5.0) -> int:
    """End every local-runner job a stopped gateway left running, and their supervisors.

    `caldera down` leaves jobs running by design, so a test that fails before its own
    scancel would leave them (and their supervisors) running into later tests' CPUs and
    node slots. Each attempt is ended through the process group its spool records (the
    runner's own proctrack), then whatever still names the spool is killed. Returns how
    many processes were ended."""
    spool = home / "spool"
    ended = 0
    for record in sorted((spool / "jobs").glob("**/proctrack.json")):
        try:
            found = from_record(json.loads(record.read_text()))
        except (OSError, ValueError):
            continue
        if found is not None:
            ended += end_attempt(found[0], found[1], timeout)[0]
    deadline = time.monotonic() + timeout
    while (left := _processes_naming(spool)) and time.monotonic() < deadline:
        time.sleep(0.1)  # supervisors write their results once their job is gone
    for proc in left:
        with contextlib.suppress(psutil.Error):
            proc.kill()
            ended += 1
    return ended


def _processes_naming(spool: Path) -> list[psutil.Process]:
    """Processes whose command line names a path in `spool` (supervisors, job scripts)."""
    prefix = str(spool) + "/"
    found = []
    for proc in psutil.process_iter(["cmdline"]):
        args = proc.info.get("cmdline") or []
        if any(a == str(spool) or a.startswith(prefix) for a in args):
            found.append(proc)
    return found


def discard_gateway(gw: Gateway, base: Path | None = None) -> None:
    """The end of a test's gateway: stopped, its jobs ended, its directory removed."""
    stop_gateway(gw)
    end_jobs_left(gw.home)
    if base is not None:
        shutil.rmtree(base, ignore_errors=True)


@contextmanager
def running_gateway(config: str = "", prefix: str = "caldera-e2e-") -> Iterator[Gateway]:
    """A gateway with this caldera.toml, stopped and removed afterwards. Its directory is
    outside pytest's private temporary tree so that other test users can reach it."""
    base = Path(tempfile.mkdtemp(prefix=prefix, dir="/tmp"))
    gw = start_gateway(base, config)
    try:
        yield gw
    finally:
        discard_gateway(gw, base)


@pytest.fixture
def gateway() -> Iterator[Gateway]:
    """A fresh gateway (time limits run 60x faster: `-t 1` is one second)."""
    with running_gateway("time_scale = 0.016666\nkill_wait_s = 2\n") as gw:
        yield gw
