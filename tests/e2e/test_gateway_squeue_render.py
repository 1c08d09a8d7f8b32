"""squeue rendered by the gateway (POST /v1/squeue/render) prints, byte for byte, what the
command prints when it renders itself from GET /v1/jobs, for every view and filter; and the
command still says what is wrong when there is no gateway.

The command renders itself when its TZ differs from the gateway's: TZ=":/etc/localtime" is
the gateway's zone (TZ unset) under another name, so the same times print both ways.
"""

from __future__ import annotations

import subprocess
from collections.abc import Sequence

import pytest

from gateway.cli.fastclient import FastClient
from tests.support.gateway_env import Gateway

SAME_ZONE = {"TZ": ":/etc/localtime"}  # != the gateway's TZ (unset): the command renders


def _squeue(
    gateway: Gateway, argv: Sequence[str], extra: dict[str, str] | None = None
) -> tuple[int, bytes, bytes]:
    r = subprocess.run(
        ["squeue", *argv],
        env=gateway.env(extra),
        capture_output=True,
        timeout=60,
        check=False,
    )
    return r.returncode, r.stdout, r.stderr


@pytest.fixture(autouse=True)
def _gateway_zone_unset(monkeypatch: pytest.MonkeyPatch) -> None:
    """The gateway (started after this) and the commands run with TZ unset, so that
    SAME_ZONE names the gateway's zone a second way whatever the caller's TZ."""
    monkeypatch.delenv("TZ", raising=False)


def test_gateway_rendering_is_byte_identical_to_the_commands(gateway: Gateway) -> None:
    mine = gateway.sbatch("-H", "-J", "held", "--wrap", "true")
    theirs = gateway.sbatch("-H", "-J", "aéééé", "--wrap", "true", user="tester")
    array = gateway.sbatch("--array=0-9%2", "--begin=now+1hour", "-J", "arr", "--wrap", "true")
    gateway.ok(["scontrol", "hold", f"{array}_[3-4]"])  # two task records of their own
    running = gateway.sbatch("-J", "sleeper", "--wrap", "sleep 60")
    done = gateway.sbatch("-J", "quick", "--wrap", "true")
    gateway.wait(done)
    gateway.wait(running, ("RUNNING",))
    views: list[list[str]] = [
        [],
        ["-l"],
        ["-h"],
        ["-r"],
        ["--array-unique"],
        ["-t", "all"],
        ["-t", "PD", "-S", "-i,j"],
        ["--start"],
        ["-o", "%.18i %9P %j %u %t %M %L %e %V %S %D %R %r"],
        ["-O", "jobid,name:.5,username,state,timeused,pendingtime,endtime,arraytaskid"],
        ["-u", "tester"],
        ["-u", "nosuchuser"],
        ["--me"],
        ["-j", str(array)],
        ["-j", f"{array}_3,{mine}"],
        ["-j", "99999"],
        ["-j", "99999", "-t", "all"],
        ["-n", "arr,HELD"],
        ["-p", "debug", "-t", "R,PD"],
        ["-S", "Z"],  # refused while sorting: the command's own error either way
        ["--json"],
        ["-s"],
    ]
    for argv in views:
        first = _squeue(gateway, argv)
        here = _squeue(gateway, argv, SAME_ZONE)
        # a running job's TIME moves on a second boundary: one of two calls around `here`
        # was in the same second
        assert here in (first, _squeue(gateway, argv)), argv
    assert b"a\xc3\xa9\xc3\xa9\xc3" in _squeue(gateway, [])[1]  # a name cut mid-character
    assert _squeue(gateway, ["-j", "99999"])[0] == 1
    assert str(theirs).encode() in _squeue(gateway, ["-h", "-u", "tester", "-o", "%i"])[1]
    pending = ["squeue", "-h", "-t", "PD", "-o", "%i %u %j"]  # another user sees every job
    assert gateway.run(pending, user="tester").stdout == gateway.ok(pending)
    assert f"{mine} root held" in gateway.ok(pending)
    gateway.ok(["scancel", str(running)])


def test_another_zone_or_no_gateway_leaves_the_rendering_to_the_command(
    gateway: Gateway,
) -> None:
    gateway.sbatch("-H", "--wrap", "true")
    client = FastClient(str(gateway.socket))
    status, answer = client.request("POST", "/v1/squeue/render", {"tz": "UTC+5"})
    assert (status, answer) == (200, {"fallback": True})
    status, answer = client.request("POST", "/v1/squeue/render", {"tz": None, "noheader": True})
    assert (status, answer["exit_code"], answer["stderr"]) == (200, 0, "")
    assert "(JobHeldUser)" in answer["stdout"]
    client.close()
    gone = str(gateway.home / "nothing-here.sock")
    code, out, err = _squeue(gateway, [], {"CALDERA_SOCKET": gone})
    assert (code, out) == (1, b"")
    assert err.startswith(
        b"slurm_load_jobs error: Unable to contact slurm controller (connect failure)"
    ), err
