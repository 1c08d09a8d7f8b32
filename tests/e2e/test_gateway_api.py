"""The HTTP API under malformed and fuzzed requests: a clear 4xx, never a 500, nothing lost.

POST /v1/sbatch is answered by the fast path (gateway/api/fastpath.py) and everything else
by FastAPI; both must give the same error shapes.
"""

from __future__ import annotations

import http.client
import json
import socket
from typing import Any

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from tests.support.gateway_env import Gateway


class _UnixHTTP(http.client.HTTPConnection):
    def __init__(self, path: str) -> None:
        super().__init__("caldera", timeout=30)
        self._path = path

    def connect(self) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.connect(self._path)


def _post(gw: Gateway, path: str, body: bytes, ctype: str = "application/json") -> tuple[int, Any]:
    conn = _UnixHTTP(str(gw.socket))
    try:
        conn.request("POST", path, body=body, headers={"Content-Type": ctype})
        resp = conn.getresponse()
        raw = resp.read()
    finally:
        conn.close()
    try:
        return resp.status, json.loads(raw)
    except ValueError:
        return resp.status, raw


def test_malformed_submissions_get_framework_shaped_errors(gateway: Gateway) -> None:
    status, out = _post(gateway, "/v1/sbatch", b'{"argv": ["sbatch"')
    assert status == 422
    assert out["detail"][0]["type"] == "json_invalid"
    assert out["detail"][0]["loc"][0] == "body"

    status, out = _post(gateway, "/v1/sbatch", json.dumps({"argv": ["sbatch"]}).encode())
    assert status == 422
    assert {"type": "missing", "loc": ["body", "cwd"]}.items() <= out["detail"][0].items()

    bad_env = {"argv": ["sbatch", "--wrap", "true"], "cwd": "/tmp", "env": {"A": 1}}
    status, out = _post(gateway, "/v1/sbatch", json.dumps(bad_env).encode())
    assert status == 422
    assert out["detail"][0]["loc"] == ["body", "env", "A"]

    status, out = _post(gateway, "/v1/sbatch", b"x" * (17 * 1024 * 1024))
    assert status == 413

    # not JSON by its content type: the framework answers, with the same shape
    status, out = _post(gateway, "/v1/sbatch", b"argv=sbatch", ctype="text/plain")
    assert status == 422
    assert out["detail"][0]["loc"][0] == "body"


def test_a_valid_submission_through_the_api_answers_as_sbatch(gateway: Gateway) -> None:
    body = {
        "argv": ["sbatch", "-H", "--parsable", "--wrap", "true"],
        "cwd": "/tmp",
        "env": {"PATH": "/usr/bin:/bin"},
    }
    status, out = _post(gateway, "/v1/sbatch", json.dumps(body).encode())
    assert status == 200
    assert out["exit_code"] == 0
    assert out["stdout"] == f"{out['job_id']}\n"
    assert gateway.job(out["job_id"])["reason"] == "JobHeldUser"
    bad = {"argv": ["sbatch", "--time=abc", "--wrap", "true"], "cwd": "/tmp"}
    status, out = _post(gateway, "/v1/sbatch", json.dumps(bad).encode())
    assert status == 200
    assert out["job_id"] is None
    assert out["exit_code"] == 255
    assert out["stderr"] == "sbatch: error: Invalid --time specification\n"
    schema = gateway.api("/openapi.json")
    assert isinstance(schema, dict)
    assert "/v1/sbatch" in schema["paths"]


_json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=20),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=12,
)
_bodies = st.one_of(
    st.binary(max_size=200),
    _json_values.map(lambda v: json.dumps(v).encode()),
    st.fixed_dictionaries(
        {"argv": st.lists(st.text(max_size=30), max_size=6), "cwd": st.text(max_size=20)},
        optional={
            "env": st.dictionaries(st.text(max_size=8), st.text(max_size=8)),
            "script": st.text(max_size=200),
        },
    ).map(lambda v: json.dumps(v).encode()),
)


@example(body=b"-9223372036854775809", path="/v1/sbatch")  # echoed past orjson's range
@settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))
@given(
    body=_bodies,
    path=st.sampled_from(["/v1/sbatch", "/v1/sbatch/locate", "/v1/jobs/signal", "/v1/jobs/update"]),
)
def test_fuzzed_bodies_never_crash_the_api(gateway: Gateway, body: bytes, path: str) -> None:
    status, out = _post(gateway, path, body)
    assert status in (200, 400, 404, 422), (status, out)
    if path == "/v1/sbatch" and status == 200:
        assert out["exit_code"] in (0, 1, 255) or out["exit_code"] > 0
        if out["job_id"] is not None:
            # anything accepted is stored: the API knows it at once
            assert gateway.job(out["job_id"])["job_id"] == out["job_id"]
