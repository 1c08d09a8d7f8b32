"""The progress line: drawn on a terminal (a real pseudo-terminal here) while a long call
runs, and cleared after it; nothing at all into a pipe, where scripts read what real Slurm's
commands print."""

from __future__ import annotations

import os
import pty
import time

import pytest

from gateway.cli.progress import Ticker, bar_line


def _read_all(fd: int) -> str:
    os.set_blocking(fd, False)
    out = b""
    while True:
        try:
            chunk = os.read(fd, 65536)
        except (BlockingIOError, OSError):
            break
        if not chunk:
            break
        out += chunk
    return out.decode()


def test_the_bar_fills_with_the_work_done() -> None:
    assert bar_line("x", 0, 10, width=10) == "x [..........]"
    assert bar_line("x", 5, 10, width=10) == "x [#####.....]"
    assert bar_line("x", 25, 10, width=10) == "x [##########]"
    assert bar_line("x", 3, 0, width=4) == "x [####]"


def test_a_terminal_sees_the_line_while_the_work_runs_and_not_after() -> None:
    leader, follower = pty.openpty()
    with os.fdopen(follower, "w") as term:
        with Ticker(
            "scancel: cancelling 7_[0-4999]", stream=term, delay_s=0.0, interval_s=0.02
        ) as t:
            time.sleep(0.3)
        drawn = t.drawn
    text = _read_all(leader)
    os.close(leader)
    assert drawn >= 3
    assert "scancel: cancelling 7_[0-4999]" in text
    assert text.endswith("\r")  # the last thing written blanks the line
    last = text.rstrip("\r").rsplit("\r", 1)[-1]
    assert last.strip() == ""


def test_a_deadline_is_shown_as_a_bar() -> None:
    leader, follower = pty.openpty()
    with (
        os.fdopen(follower, "w") as term,
        Ticker("caldera: starting the gateway", 20.0, term, 0.0, 0.02),
    ):
        time.sleep(0.1)
    text = _read_all(leader)
    os.close(leader)
    assert "caldera: starting the gateway [" in text
    assert "/20s" in text


def test_a_pipe_gets_nothing() -> None:
    r, w = os.pipe()
    with (
        os.fdopen(w, "w") as pipe,
        Ticker("scancel: cancelling 7", stream=pipe, delay_s=0.0, interval_s=0.01) as t,
    ):
        time.sleep(0.1)
    assert t.drawn == 0
    with os.fdopen(r) as out:
        assert out.read() == ""


def test_a_quick_call_draws_nothing() -> None:
    leader, follower = pty.openpty()
    with os.fdopen(follower, "w") as term, Ticker("scancel: cancelling 7", stream=term) as t:
        pass
    assert t.drawn == 0
    assert _read_all(leader) == ""
    os.close(leader)


def test_scontrol_release_of_a_large_array_shows_progress_on_a_terminal(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from gateway.cli import scontrol_cmd

    def slow_call(method: str, url: str, body: object) -> dict[str, object]:
        time.sleep(0.9)  # the gateway releasing thousands of tasks
        return {"results": [{"id": "113", "error": None}]}

    monkeypatch.setattr(scontrol_cmd, "call", slow_call)
    leader, follower = pty.openpty()
    with os.fdopen(follower, "w") as term:
        monkeypatch.setattr("sys.stderr", term)
        assert scontrol_cmd.main(["release", "113"]) == 0
    text = _read_all(leader)
    os.close(leader)
    assert "scontrol: release 113" in text
    assert text.endswith("\r")  # and the line is cleared afterwards


def test_a_slow_sbatch_answer_shows_progress_on_a_terminal_only(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """`sbatch -M a,b` waits while the gateway routes the job: a line on a terminal."""
    from gateway.cli import sbatch_cmd

    def slow(client: object, body: object) -> dict[str, object]:
        time.sleep(0.9)
        return {"job_id": 7}

    monkeypatch.setattr(sbatch_cmd, "_submit_retrying", slow)
    leader, follower = pty.openpty()
    saved = os.dup(2)
    try:
        os.dup2(follower, 2)  # sbatch asks whether fd 2 is a terminal
        with os.fdopen(follower, "w") as term:
            monkeypatch.setattr("sys.stderr", term)
            assert sbatch_cmd._submit_call(object(), {}) == {"job_id": 7}  # type: ignore[arg-type]
    finally:
        os.dup2(saved, 2)
        os.close(saved)
    text = _read_all(leader)
    os.close(leader)
    assert "sbatch: submitting" in text
    r, w = os.pipe()
    saved = os.dup(2)
    try:
        os.dup2(w, 2)
        assert sbatch_cmd._submit_call(object(), {}) == {"job_id": 7}  # type: ignore[arg-type]
    finally:
        os.dup2(saved, 2)
        os.close(saved)
        os.close(w)
    assert _read_all(r) == ""
    os.close(r)
