"""The gateway's state under storage faults, with a real gateway started by `caldera up`:
private files, a full disk (a small tmpfs as its home), a locked, a corrupt and a partly
corrupt database, a daemon that dies at once, and an answer lost after the commit.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import sqlite3
import stat
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.gateway_env import CALDERA, Gateway, start_gateway, stop_gateway

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="needs root (tmpfs, other users)")


@pytest.fixture
def base() -> Iterator[Path]:
    """A directory other users may traverse, removed (and unmounted) afterwards."""
    path = Path(tempfile.mkdtemp(prefix="h3-storage-", dir="/tmp"))
    os.chmod(path, 0o755)
    try:
        yield path
    finally:
        env = {**os.environ, "CALDERA_HOME": str(path / "home")}
        env["CALDERA_SOCKET"] = str(path / "home" / "gateway.sock")
        subprocess.run([*CALDERA, "down"], env=env, capture_output=True, timeout=60, check=False)
        subprocess.run(["umount", "-l", str(path)], capture_output=True, check=False)
        shutil.rmtree(path, ignore_errors=True)


def _env(home: Path, **extra: str) -> dict[str, str]:
    env = {**os.environ, "CALDERA_HOME": str(home), "CALDERA_SOCKET": str(home / "gateway.sock")}
    env.update(extra)
    return env


def _caldera(home: Path, *args: str, **extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*CALDERA, *args], env=_env(home, **extra), capture_output=True, text=True, timeout=60
    )


def _checkpoint(db: Path) -> None:
    """Fold the WAL into the database file (the gateway is stopped)."""
    conn = sqlite3.connect(db)
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.close()


def _can_read(user: str, path: Path) -> bool:
    code = f"open({str(path)!r}, 'rb').read(1)"
    run = subprocess.run(["runuser", "-u", user, "--", "python3", "-c", code], capture_output=True)
    return run.returncode == 0


def _fill(directory: Path) -> None:
    """Use every free block and inode of the file system holding `directory`."""
    with contextlib.suppress(OSError), (directory / "filler").open("wb") as fh:
        while True:
            fh.write(b"\0" * (1 << 20))
            fh.flush()
    with contextlib.suppress(OSError):
        for i in range(100_000):
            (directory / f"filler.{i}").write_bytes(b"x" * 512)
    assert os.statvfs(directory).f_bavail == 0


def _free(directory: Path) -> None:
    for path in directory.glob("filler*"):
        path.unlink()


def _start_over_old_files(base: Path) -> Gateway:
    """`caldera up` in a home holding an older install's world-readable database and log."""
    home = base / "home"
    home.mkdir()
    os.close(os.open(home / "caldera.db", os.O_CREAT | os.O_WRONLY, 0o644))
    os.close(os.open(home / "gateway.log", os.O_CREAT | os.O_WRONLY, 0o644))
    os.chmod(home / "caldera.db", 0o644)
    os.chmod(home / "gateway.log", 0o644)
    (home / "caldera.toml").write_text("time_scale = 0.016666\nkill_wait_s = 2\n")
    work = base / "work"
    work.mkdir()
    os.chmod(work, 0o1777)
    shims = home / "shims"
    subprocess.run([*CALDERA, "shims", str(shims)], env=_env(home), check=True)
    up = _caldera(home, "up")
    assert up.returncode == 0, up.stderr
    return Gateway(home, shims, work)


def test_state_files_are_private_to_root(base: Path) -> None:
    gw = _start_over_old_files(base)
    home = gw.home
    body = "echo $SECRET_TOKEN; sleep 3"
    job = gw.sbatch("--wrap", body, user="tester", env={"SECRET_TOKEN": "s3cr3t"})
    gw.wait(job, states=("RUNNING",))
    assert stat.S_IMODE(home.stat().st_mode) == 0o711
    assert stat.S_IMODE((home / "keys").stat().st_mode) == 0o700
    for name in ("caldera.db", "caldera.db-wal", "caldera.db-shm", "gateway.log"):
        mode = stat.S_IMODE((home / name).stat().st_mode)
        assert mode == 0o600, f"{name} is {mode:o}"
        assert not _can_read("tester2", home / name), name
    assert "caldera.db was mode 644" in (home / "gateway.log").read_text()
    # nothing in the home itself is readable by another user but what users may know (the
    # pid, the agent port, the configuration the operator wrote, as slurm.conf)
    for path in home.iterdir():
        if path.is_file() and path.name not in ("gateway.pid", "agents.endpoint", "caldera.toml"):
            assert not _can_read("tester2", path), f"{path.name} is readable by another user"
    # the job's plan, script, logs and anything else holding its environment
    secret = 0
    for path in (home / "spool" / "jobs").rglob("*"):
        if path.is_symlink() or not path.is_file():
            continue
        if b"s3cr3t" in path.read_bytes() or path.name in ("plan.json", "slurm_script"):
            secret += 1
            assert not _can_read("tester2", path), f"{path} is readable by another user"
    assert secret >= 2
    gw.wait(job)
    # the socket stays reachable: that is how users submit
    assert gw.sbatch("--hold", "--wrap", "true", user="tester2") > job


def test_full_disk_names_the_cause_and_loses_nothing(base: Path) -> None:
    subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=16m,mode=755", "tmpfs", str(base)], check=True
    )
    gw = start_gateway(base, "time_scale = 0.016666\nkill_wait_s = 2\n")
    acknowledged = [gw.sbatch("--hold", "--wrap", "true") for _ in range(5)]
    # becomes eligible while the disk is full: it must not stay RUNNING without a process
    later = gw.sbatch("--begin=now+2", "--wrap", "sleep 1")
    _fill(base)
    full = gw.run(["sbatch", "--hold", "--wrap", "true"])
    assert full.returncode == 1, full.stdout + full.stderr
    assert full.stderr == "sbatch: error: Batch job submission failed: No space left on device\n"
    assert full.stdout == ""
    time.sleep(3)
    state = gw.job(later)["state"]
    assert state in ("PENDING", "FAILED"), state
    # `caldera up` on the full disk reports the daemon's fate instead of "running"
    stop_gateway(gw)
    up = _caldera(gw.home, "up")
    assert up.returncode != 0, up.stdout
    assert "did not start" in up.stderr, up.stderr
    assert "No space left on device" in up.stderr, up.stderr
    _free(base)
    up = _caldera(gw.home, "up")
    assert up.returncode == 0, up.stderr
    for job_id in acknowledged:
        assert gw.job(job_id)["state"] == "PENDING"
    assert gw.wait(later, timeout=30)["state"] in ("COMPLETED", "FAILED")
    jobs = gw.api("/v1/jobs")
    assert isinstance(jobs, dict)
    assert [j["job_id"] for j in jobs["jobs"] if j["state"] == "RUNNING"] == []
    assert gw.sbatch("--hold", "--wrap", "true") > later


def test_locked_database_names_the_cause(base: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CALDERA_STORE_BUSY_TIMEOUT_MS", "300")
    gw = start_gateway(base)
    first = gw.sbatch("--hold", "--wrap", "true")
    holder = subprocess.Popen(
        [
            "python3",
            "-c",
            "import sqlite3, sys, time\n"
            f"c = sqlite3.connect({str(gw.home / 'caldera.db')!r}, isolation_level=None)\n"
            "c.execute('BEGIN EXCLUSIVE'); print('locked', flush=True); time.sleep(60)\n",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None
        assert holder.stdout.readline() == "locked\n"
        locked = gw.run(["sbatch", "--hold", "--wrap", "true"])
        assert locked.returncode == 1
        assert locked.stderr == (
            "sbatch: error: Batch job submission failed: database is locked (another process "
            "holds the job store)\n"
        )
        cancel = gw.run(["scancel", str(first)])
        assert cancel.returncode == 1, cancel.stderr
        assert "database is locked" in cancel.stderr, cancel.stderr
    finally:
        holder.kill()
        holder.wait()
    assert gw.sbatch("--hold", "--wrap", "true") > first
    assert gw.job(first)["state"] == "PENDING"


def test_damaged_database_is_refused_unless_forced(base: Path) -> None:
    gw = start_gateway(base)
    ids = [gw.sbatch("--hold", "--wrap", "true") for _ in range(20)]
    stop_gateway(gw)
    db = gw.home / "caldera.db"
    _checkpoint(db)
    conn = sqlite3.connect(db)
    # the event log's pages (a forced start can still serve the jobs)
    pages = conn.execute("SELECT pageno FROM dbstat WHERE name='events' AND pagetype='leaf'")
    damaged = [p for (p,) in pages.fetchall()]
    conn.close()
    assert damaged
    with db.open("r+b") as fh:
        for page in damaged:
            fh.seek((page - 1) * 4096 + 8)
            fh.write(os.urandom(2000))
    up = _caldera(gw.home, "up")
    assert up.returncode == 1, up.stdout
    assert f"the job store {db} is damaged (PRAGMA quick_check:" in up.stderr, up.stderr
    assert "caldera up --force-damaged-store" in up.stderr
    assert not gw.socket.exists()
    forced = _caldera(gw.home, "up", "--force-damaged-store")
    assert forced.returncode == 0, forced.stderr
    assert "served anyway as asked" in (gw.home / "gateway.log").read_text()
    assert [gw.job(i)["state"] for i in ids] == ["PENDING"] * len(ids)


def test_corrupt_job_record_is_logged_and_skipped(base: Path) -> None:
    gw = start_gateway(base)
    good, bad_json, bad_state = (gw.sbatch("--hold", "--wrap", "true") for _ in range(3))
    stop_gateway(gw)
    db = gw.home / "caldera.db"
    _checkpoint(db)
    conn = sqlite3.connect(db)
    conn.execute("UPDATE jobs SET doc=? WHERE job_id=?", (b"{not json", bad_json))
    conn.execute(
        "UPDATE jobs SET doc=json_set(doc, '$.state', 'BOGUS') WHERE job_id=?", (bad_state,)
    )
    conn.commit()
    conn.close()
    up = _caldera(gw.home, "up")
    assert up.returncode == 0, up.stderr
    log = (gw.home / "gateway.log").read_text()
    assert "Traceback" not in log
    assert f"job {bad_json}: its stored record cannot be read" in log
    assert f"job {bad_state}: its stored record cannot be read" in log
    assert f"cannot be read and are not served: {bad_json},{bad_state}" in log
    assert gw.job(good)["state"] == "PENDING"
    shown = gw.ok(["squeue", "-h", "-o", "%i"]).split()
    assert shown == [str(good)]
    assert gw.sbatch("--hold", "--wrap", "true") > bad_state  # no id is reused


def test_up_reports_a_daemon_that_dies_at_once(base: Path) -> None:
    home = base / "home"
    home.mkdir()
    sock = "/proc/h3-no-such-dir/gateway.sock"  # cannot be created, even by root
    up = subprocess.run(
        [*CALDERA, "up"],
        env={**_env(home), "CALDERA_SOCKET": sock},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert up.returncode == 1, up.stdout
    assert "caldera: error: the gateway did not start:" in up.stderr
    assert "exit status 1" in up.stderr, up.stderr
    assert "last lines of" in up.stderr, up.stderr
    (home / "caldera.toml").write_text("bogus_setting = 1\n")
    up = _caldera(home, "up")
    assert up.returncode == 1, up.stdout
    assert "unknown setting 'bogus_setting'" in up.stderr, up.stderr


def test_answer_lost_after_commit_is_retried_to_the_same_job(
    base: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The gateway is killed (SIGKILL) between storing a submission and answering it. A
    real gateway cannot be made to die at that instant on demand, so a test-only hook
    (CALDERA_TEST_CRASH_AFTER_COMMIT) makes it kill itself there; the rest is real."""
    monkeypatch.setenv("CALDERA_TEST_CRASH_AFTER_COMMIT", "1")
    gw = start_gateway(base)
    pid = int((gw.home / "gateway.pid").read_text())
    sbatch = subprocess.Popen(
        ["sbatch", "--parsable", "--hold", "--wrap", "true"],
        env=gw.env(),
        cwd=gw.workdir,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 10
    while Path(f"/proc/{pid}").exists():
        assert time.monotonic() < deadline, "the hook did not kill the gateway"
        time.sleep(0.02)
    monkeypatch.delenv("CALDERA_TEST_CRASH_AFTER_COMMIT")
    up = _caldera(gw.home, "up")
    assert up.returncode == 0, up.stderr
    out, err = sbatch.communicate(timeout=30)
    assert sbatch.returncode == 0, err
    job_id = int(out.strip())
    assert "retrying" in err
    jobs = gw.api("/v1/jobs")
    assert isinstance(jobs, dict)
    assert [j["job_id"] for j in jobs["jobs"]] == [job_id]
    conn = sqlite3.connect(gw.home / "caldera.db")
    assert conn.execute("SELECT job_id FROM jobs").fetchall() == [(job_id,)]
    conn.close()


def test_sbatch_reports_a_closed_pipe_instead_of_dying_of_sigpipe(base: Path) -> None:
    gw = start_gateway(base)
    read_end, write_end = os.pipe()
    os.close(read_end)  # `sbatch ... | head -c0`: nobody reads the job id
    try:
        done = subprocess.run(
            ["sbatch", "--hold", "--wrap", "true"],
            env=gw.env(),
            cwd=gw.workdir,
            stdout=write_end,
            stderr=subprocess.PIPE,
            text=True,
            timeout=60,
        )
    finally:
        os.close(write_end)
    assert done.returncode == 1, done.returncode  # not 141 (-SIGPIPE)
    assert done.stderr == "sbatch: error: write error: Broken pipe\n"
