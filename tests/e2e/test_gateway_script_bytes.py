"""A batch script is bytes, as sbatch takes it: not UTF-8 is fine, errors never echo it.

Real sbatch submits any bytes (checked on the test cluster: a Latin-1 script is accepted;
one byte past 4 MiB is refused with "Pathname of a file, directory or other parameter too
long"). Through Caldera's sbatch and API the same script runs and prints its bytes
unchanged, an oversized one gets Slurm's one-line refusal, and a malformed request is
answered naming the field, without repeating the script or any variable's value.
"""

from __future__ import annotations

import base64
import json
import os
import subprocess
from pathlib import Path

from tests.support.gateway_env import Gateway

SECRET = "h9-secret-value-3141"
# Latin-1 text, and binary that is neither UTF-8 nor NUL-bearing (sbatch refuses NUL)
LATIN1 = "résumé — naïve".encode("latin-1", "replace")
BLOB = bytes(b for b in range(1, 256) if b not in (0x0A, 0x27)) * 4


def _script(payload: bytes) -> bytes:
    return b"#!/bin/sh\n#SBATCH -J bytes\nprintf '%s' '" + payload + b"'\n"


def _write(gw: Gateway, name: str, data: bytes) -> Path:
    path = gw.workdir / name
    path.write_bytes(data)
    os.chown(path, 1001, 1001)
    return path


def _sbatch(
    gw: Gateway, *args: str, env: dict[bytes, bytes] | None = None
) -> subprocess.CompletedProcess[bytes]:
    """The installed sbatch as `tester`, with extra (byte) variables."""
    full = {k.encode(): v.encode() for k, v in gw.env().items()} | (env or {})
    argv = [b"runuser", b"-u", b"tester", b"--", b"env", *[k + b"=" + v for k, v in full.items()]]
    return subprocess.run(
        [*argv, b"sbatch", *[a.encode() for a in args]],
        cwd=gw.workdir,
        capture_output=True,
        timeout=60,
        check=False,
    )


def test_a_script_of_any_bytes_runs_and_prints_them_unchanged(gateway: Gateway) -> None:
    gw = gateway
    payload = LATIN1 + b"\n" + BLOB
    script = _write(gw, "latin1.sh", _script(payload))
    r = _sbatch(gw, "--parsable", "-o", "out-%j.txt", str(script))
    assert r.returncode == 0, r.stderr
    job = int(r.stdout.strip())
    done = gw.wait(job)
    assert done["state"] == "COMPLETED", done
    assert (gw.workdir / f"out-{job}.txt").read_bytes() == payload
    stored = gw.api(f"/v1/jobs/{job}/script")  # as stored, for its owner and operators
    assert isinstance(stored, dict)
    assert base64.b64decode(stored["script_b64"]) == script.read_bytes()
    # a variable that is not UTF-8 reaches the job byte for byte
    env_script = _write(gw, "env.sh", b"#!/bin/sh\nprintf '%s' \"$H9_ODD\"\n")
    r = _sbatch(gw, "--parsable", "-o", "env-%j.txt", str(env_script), env={b"H9_ODD": b"caf\xe9"})
    assert r.returncode == 0, r.stderr
    job = int(r.stdout.strip())
    assert gw.wait(job)["state"] == "COMPLETED"
    assert (gw.workdir / f"env-{job}.txt").read_bytes() == b"caf\xe9"
    stored = gw.api(f"/v1/jobs/{job}/script")
    assert isinstance(stored, dict)
    assert [base64.b64decode(e) for e in stored["environment_b64"]] == [b"H9_ODD=caf\xe9"]
    assert "H9_ODD" not in stored["environment"]


def test_an_oversized_script_gets_slurms_short_refusal_without_an_echo(gateway: Gateway) -> None:
    gw = gateway
    line = b"#" + SECRET.encode() + b"\xe9\n"  # not UTF-8 either
    for size in (4 * 1024 * 1024 + 1, 20 * 1024 * 1024):  # just over; past the API's body
        body = b"#!/bin/sh\n" + line * (size // len(line)) + b"true\n"
        assert len(body) > 4 * 1024 * 1024
        r = _sbatch(gw, str(_write(gw, "big.sh", body)))
        assert r.returncode == 1
        assert r.stderr == (
            b"sbatch: error: Batch job submission failed: "
            b"Pathname of a file, directory or other parameter too long\n"
        )
        assert r.stdout == b""
    # exactly 4 MiB is still accepted, as by slurmctld
    exact = b"#!/bin/sh\n" + b"#" * (4 * 1024 * 1024 - 16) + b"\ntrue\n"
    assert len(exact) == 4 * 1024 * 1024
    r = _sbatch(gw, "--hold", "--parsable", str(_write(gw, "exact.sh", exact)))
    assert r.returncode == 0, r.stderr[:300]


def _post(gw: Gateway, body: bytes) -> tuple[int, str]:
    out = subprocess.run(
        [
            "curl",
            "-s",
            "-o",
            "-",
            "-w",
            "\n%{http_code}",
            "--unix-socket",
            str(gw.socket),
            "-H",
            "Content-Type: application/json",
            "--data-binary",
            "@-",
            "http://caldera/v1/sbatch",
        ],
        input=body,
        capture_output=True,
        timeout=60,
        check=True,
    ).stdout.decode("utf-8", "replace")
    text, _, code = out.rpartition("\n")
    return int(code), text


def test_a_bad_request_names_the_field_and_never_echoes_script_or_environment(
    gateway: Gateway,
) -> None:
    gw = gateway
    env = {"H9_TOKEN": SECRET}
    script = f"#!/bin/sh\n# {SECRET}\ntrue\n"
    cases = {
        # not UTF-8 inside JSON text (a client that did not use script_b64)
        "raw-bytes": b'{"argv":["sbatch"],"cwd":"/tmp","env":{"H9_TOKEN":"'
        + SECRET.encode()
        + b'\xff"},"script":"#!/bin/sh\\n'
        + SECRET.encode()
        + b'\\n"}',
        "missing-argv": json.dumps({"cwd": "/tmp", "env": env, "script": script}).encode(),
        "env-not-text": json.dumps(
            {
                "argv": ["sbatch"],
                "cwd": "/tmp",
                "env": {"H9_TOKEN": 5, "X": SECRET},
                "script": script,
            }
        ).encode(),
        "bad-base64": json.dumps(
            {"argv": ["sbatch"], "cwd": "/tmp", "env": env, "script_b64": SECRET + "!"}
        ).encode(),
        "script-too-big-for-the-wire": json.dumps(
            {
                "argv": ["sbatch"],
                "cwd": "/tmp",
                "env": env,
                "script": script * (13 * 1024 * 1024 // len(script)),
            }
        ).encode(),
    }
    fields = {
        "raw-bytes": [["body"]],
        "missing-argv": [["body", "argv"]],
        "env-not-text": [["body", "env", "H9_TOKEN"]],
        "bad-base64": [["body", "script_b64"]],
        "script-too-big-for-the-wire": [["body", "script"]],
    }
    for name, body in cases.items():
        code, text = _post(gw, body)
        assert code == 422, (name, code, text[:300])
        assert SECRET not in text, (name, text[:300])
        assert len(text) < 2000, name
        detail = json.loads(text)["detail"]
        assert [d["loc"] for d in detail] == fields[name], (name, detail)
        assert all(d["msg"] for d in detail)
