"""`caldera simulate`: SWF reading, the replay through the scheduler's cycle, the metrics and
the command's output."""

from __future__ import annotations

import gzip
from pathlib import Path

import pytest
from click.testing import CliRunner

from gateway.simulate.cli import simulate_command
from gateway.simulate.engine import POLICIES, bounded_slowdown, simulate
from gateway.simulate.plot import write_plot
from gateway.simulate.swf import SwfError, parse_lines, read_trace

HEADER = "; Version: 2.2\n; MaxNodes: 4\n; MaxProcs: 4\n"


def swf(job: int, submit: int, run: int, procs: int, req_time: int, req_procs: int = -1) -> str:
    """One SWF line (18 fields; unknowns -1)."""
    fields = [job, submit, -1, run, procs, -1, -1, req_procs, req_time, -1, 1, 7, 1, -1, 1, -1]
    return " ".join(str(f) for f in [*fields, -1, -1])


# A takes 3 of 4 nodes until t=100 (limit 2 min); B needs all 4; C needs 1 for 30 s (limit
# 1 min): EASY starts C at once (it ends by t=80, before B's reservation at A's limit,
# t=120); FCFS keeps it behind B until t=160.
TRACE = HEADER + "\n".join(
    [swf(1, 0, 100, 3, 100), swf(2, 10, 60, 4, 60), swf(3, 20, 30, 1, 60), ""]
)


def test_swf_lines_become_jobs_with_minute_limits_and_the_machine_size() -> None:
    lines = [*TRACE.splitlines(), swf(4, 30, 0, 2, 60), swf(5, 31, 50, 2, 10, req_procs=1)]
    trace = parse_lines(lines)
    assert trace.max_procs == 4
    assert trace.skipped == 1  # job 4 never ran
    assert [(j.job_id, j.procs, j.limit_min) for j in trace.jobs] == [
        (1, 3, 2),
        (2, 4, 1),
        (3, 1, 1),
        (5, 1, 1),  # requested processors win; a run over its request keeps running
    ]


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("1 2 3", "t.swf:4: expected 18 fields, found 3"),
        (swf(9, 0, 10, 1, 60).replace(" 10 ", " ten ", 1), "t.swf:4: field 4 is not a number"),
        (swf(9, -5, 10, 1, 60), "t.swf:4: field 2 (submit time) is negative"),
        (swf(9, 0, 10, 1, 60).replace(" 10 ", " nan ", 1), "t.swf:4: field 4 is not a finite"),
    ],
)
def test_a_malformed_line_is_refused_by_its_line_number(line: str, message: str) -> None:
    with pytest.raises(SwfError) as err:
        parse_lines([*HEADER.splitlines(), line, swf(10, 1, 1, 1, 1)], "t.swf")
    assert str(err.value).startswith(message)


def test_gzipped_and_plain_traces_read_the_same(tmp_path: Path) -> None:
    plain, packed = tmp_path / "t.swf", tmp_path / "t.swf.gz"
    plain.write_text(TRACE)
    packed.write_bytes(gzip.compress(TRACE.encode()))
    assert read_trace(plain) == read_trace(packed)


def test_fcfs_and_easy_replays_give_the_hand_computed_waits_and_metrics() -> None:
    trace = parse_lines(TRACE.splitlines())
    fcfs = simulate(trace, 4, POLICIES["fcfs"])
    easy = simulate(trace, 4, POLICIES["easy"])
    assert (fcfs.jobs, easy.jobs) == (3, 3)
    assert fcfs.mean_wait == pytest.approx((0 + 90 + 140) / 3)
    assert easy.mean_wait == pytest.approx((0 + 90 + 0) / 3)
    assert fcfs.mean_bsld == pytest.approx((1 + 150 / 60 + 170 / 30) / 3)
    assert easy.mean_bsld == pytest.approx((1 + 150 / 60 + 1) / 3)
    assert fcfs.makespan == 190
    assert easy.makespan == 160
    assert fcfs.utilisation == pytest.approx(570 / (4 * 190))
    assert easy.utilisation == pytest.approx(570 / (4 * 160))


def test_conservative_and_caldera_policies_replay_the_same_trace() -> None:
    trace = parse_lines(TRACE.splitlines())
    for name in ("conservative", "caldera"):
        assert simulate(trace, 4, POLICIES[name]).mean_wait == pytest.approx(30.0)


def test_bounded_slowdown_uses_a_ten_second_threshold() -> None:
    assert bounded_slowdown(0, 5) == 1.0
    assert bounded_slowdown(95, 5) == 10.0  # (95 + 5) / 10
    assert bounded_slowdown(60, 30) == 3.0


def test_the_command_prints_one_summary_line_per_policy_and_a_png(tmp_path: Path) -> None:
    trace = tmp_path / "t.swf"
    trace.write_text(TRACE)
    plot = tmp_path / "plot.png"
    out = CliRunner().invoke(
        simulate_command, [str(trace), "--policy", "fcfs,easy", "--plot", str(plot)]
    )
    assert out.exit_code == 0, out.output
    lines = out.output.splitlines()
    assert lines[0] == "trace t.swf: 3 jobs replayed (0 skipped: never ran or asked for no " + (
        "processors), 4 nodes"
    )
    assert lines[1].startswith("fcfs jobs=3 mean_wait=76.7s bsld=3.06 util=0.750 makespan=190s")
    assert lines[2].startswith("easy jobs=3 mean_wait=30.0s bsld=1.50 util=0.891 makespan=160s")
    assert plot.read_bytes().startswith(b"\x89PNG\r\n\x1a\n")


def test_the_command_names_the_bad_line_and_replays_nothing(tmp_path: Path) -> None:
    trace = tmp_path / "bad.swf"
    trace.write_text(TRACE + "4 5 6\n")
    out = CliRunner().invoke(simulate_command, [str(trace)])
    assert out.exit_code == 1
    assert f"Error: {trace}:7: expected 18 fields, found 3" in out.output
    assert "fcfs" not in out.output
    assert "easy" not in out.output


def test_an_unknown_policy_is_refused() -> None:
    out = CliRunner().invoke(simulate_command, [__file__, "--policy", "sjf"])
    assert out.exit_code == 2
    assert "unknown policy sjf" in out.output


def test_the_plot_is_a_png_of_the_requested_size(tmp_path: Path) -> None:
    trace = parse_lines(TRACE.splitlines())
    path = tmp_path / "p.png"
    write_plot([simulate(trace, 4, POLICIES["easy"], sample_every=1.0)], path)
    data = path.read_bytes()
    assert data[12:16] == b"IHDR"
    assert int.from_bytes(data[16:20], "big") == 900
    assert int.from_bytes(data[20:24], "big") == 520
