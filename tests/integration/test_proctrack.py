"""Process tracking on this machine's real cgroups (v2 and the v1 freezer) and by sessions:
every process of an attempt is found and killed, double-forked daemons and racing forks
included, and the group is confirmed empty and removed."""

from __future__ import annotations

import os
import signal
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from containers.proctrack import (
    ATTEMPT_VAR,
    Cgroup2Tracker,
    FreezerTracker,
    ProcessTracker,
    SessionTracker,
    end_attempt,
    from_record,
    select_tracker,
)

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="cgroups need root")

# a daemon that leaves the session (double fork + setsid) and a loop that keeps forking
SCRIPT = """
setsid sh -c 'sleep 1000 & exec sleep 1001' </dev/null >/dev/null 2>&1 &
( while :; do sleep 1002 & sleep 0.01; done ) &
echo started > "$1"
exec sleep 1003
"""
ATTEMPTS = ("job_7.1", "job_8.0", "job_9.3")


@pytest.fixture(params=["cgroup2", "freezer", "session"])
def tracker(request: pytest.FixtureRequest) -> Iterator[ProcessTracker]:
    namespace = f"h1a-test-{uuid.uuid4().hex[:8]}"
    try:
        chosen = select_tracker(namespace, request.param)
    except OSError as exc:
        pytest.skip(str(exc))
    yield chosen
    for attempt in ATTEMPTS:  # whatever a failed test left behind
        end_attempt(chosen, attempt, 2.0)
        chosen.remove(attempt)


def _start(tracker: ProcessTracker, attempt: str, marker: Path) -> subprocess.Popen[bytes]:
    env = {**os.environ, ATTEMPT_VAR: f"{tracker.namespace}/{attempt}"}
    proc = subprocess.Popen(
        ["sh", "-c", SCRIPT, "sh", str(marker)],
        env=env,
        preexec_fn=lambda: tracker.add(attempt, os.getpid()),  # joins before exec, as the runner
        start_new_session=True,
    )
    deadline = time.monotonic() + 10
    while not marker.exists():
        assert time.monotonic() < deadline
        time.sleep(0.02)
    return proc


def _sleepers() -> set[int]:
    out = set()
    for p in psutil.process_iter(["cmdline"]):
        cmd = p.info["cmdline"] or []
        if len(cmd) == 2 and cmd[0] == "sleep" and cmd[1] in ("1000", "1001", "1002", "1003"):
            out.add(p.pid)
    return out


def test_every_process_of_an_attempt_is_found_killed_and_confirmed_gone(
    tracker: ProcessTracker, tmp_path: Path
) -> None:
    attempt = "job_7.1"
    tracker.create(attempt)
    before = _sleepers()
    proc = _start(tracker, attempt, tmp_path / "started")
    time.sleep(0.2)
    mine = _sleepers() - before  # first: the loop adds sleepers all the time
    found = set(tracker.pids(attempt))
    assert proc.pid in found
    assert mine, "the job's sleepers are running"
    assert mine <= found  # the setsid daemon and its child included
    escaped = [
        p for p in mine if os.getsid(p) != proc.pid
    ]  # left the job's session: only a cgroup (or the marker) still knows them
    assert escaped
    assert not tracker.ended(attempt)

    killed, confirmed = end_attempt(tracker, attempt, 5.0)
    proc.wait(timeout=5)
    assert confirmed
    assert killed >= len(mine)
    assert tracker.ended(attempt)
    assert tracker.pids(attempt) == []
    assert not (_sleepers() - before), "a process of the attempt survived"
    tracker.remove(attempt)
    if isinstance(tracker, Cgroup2Tracker | FreezerTracker):
        assert not tracker.dir(attempt).exists()
        assert not tracker.root.exists()  # the namespace goes with its last group


def test_signal_reaches_processes_outside_the_session(
    tracker: ProcessTracker, tmp_path: Path
) -> None:
    attempt = "job_8.0"
    tracker.create(attempt)
    before = _sleepers()
    proc = _start(tracker, attempt, tmp_path / "started")
    time.sleep(0.1)
    tracker.signal(attempt, signal.SIGTERM)
    proc.wait(timeout=5)
    deadline = time.monotonic() + 5
    while tracker.pids(attempt) and time.monotonic() < deadline:
        tracker.signal(attempt, signal.SIGTERM)  # the forking loop may add one meanwhile
        time.sleep(0.05)
    assert tracker.ended(attempt)
    assert not (_sleepers() - before)


def test_a_record_names_the_same_group(tracker: ProcessTracker) -> None:
    attempt = "job_9.3"
    tracker.create(attempt)
    found = from_record(tracker.record(attempt))
    assert found is not None
    again, name = found
    assert name == attempt
    assert type(again) is type(tracker)
    assert again.namespace == tracker.namespace
    if isinstance(tracker, Cgroup2Tracker | FreezerTracker):
        assert isinstance(again, Cgroup2Tracker | FreezerTracker)
        assert again.dir(attempt) == tracker.dir(attempt)
    assert from_record({**tracker.record(attempt), "attempt": "../x"}) is None
    assert from_record({"kind": "nonsense", "namespace": "n", "attempt": "a"}) is None
    tracker.remove(attempt)


def test_auto_selection_prefers_cgroup2_then_the_freezer() -> None:
    mounts = Path("/proc/self/mounts").read_text()
    chosen = select_tracker(f"h1a-auto-{uuid.uuid4().hex[:8]}")
    if " cgroup2 " in mounts:
        assert isinstance(chosen, Cgroup2Tracker)
    elif "freezer" in mounts:
        assert isinstance(chosen, FreezerTracker)
    else:
        assert isinstance(chosen, SessionTracker)
    if isinstance(chosen, Cgroup2Tracker | FreezerTracker):
        assert not chosen.root.exists()  # made with the first group, not before
