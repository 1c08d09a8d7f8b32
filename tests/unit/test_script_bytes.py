"""Scripts and environments as bytes, the API's echo-free errors, and slurmctld's storage of
a negative time limit and of a dependency on jobs it has no record of (pure parts; the
end-to-end and differential tests are in tests/e2e and tests/differential)."""

from __future__ import annotations

import base64
import json

import pytest
from pydantic import ValidationError

from gateway.api.app import SbatchBody
from gateway.api.errors import validation_detail
from gateway.api.wire import wire_script
from gateway.compat.dependency import parse_dependency
from gateway.compat.sbatch import parse_sbatch
from gateway.compat.script import MAX_SCRIPT_BYTES, script_too_long
from gateway.scheduler.dependencies import prune_missing
from gateway.store.textcodec import env_from_db, env_to_db, script_from_db, script_to_db
from k8s_bridge.render import _script_data
from tests.unit.test_compat_sbatch import CTX

ODD = b"#!/bin/sh\necho caf\xe9 \xff\n".decode("utf-8", "surrogateescape")
SECRET = "do-not-echo-0xC0FFEE"


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def test_script_and_environment_bytes_survive_the_wire_and_the_store():
    env = {"PLAIN": "é", "ODD": "\udce9t\udce9"}
    wire = wire_script(ODD, env)
    assert "script" not in wire
    assert wire["env"] == {"PLAIN": "é"}
    body = SbatchBody.model_validate_json(json.dumps({"argv": ["sbatch"], "cwd": "/", **wire}))
    assert body.script == ODD
    assert body.env == env
    assert body.script_b64 is None
    assert script_from_db(script_to_db(ODD)) == ODD
    assert isinstance(script_to_db("#!/bin/sh\n"), str)  # UTF-8 stays TEXT
    assert env_from_db(env_to_db(env)) == env


def test_a_script_over_4_mib_of_bytes_is_too_long_and_4_mib_is_not():
    assert not script_too_long("#" * MAX_SCRIPT_BYTES)
    assert script_too_long("#" * (MAX_SCRIPT_BYTES + 1))
    two_bytes = "é" * (MAX_SCRIPT_BYTES // 2)
    assert not script_too_long(two_bytes)
    assert script_too_long(two_bytes + "#")
    assert script_too_long("\udcff" * (MAX_SCRIPT_BYTES // 2) + "é" * (MAX_SCRIPT_BYTES // 4 + 1))


@pytest.mark.parametrize(
    "body",
    [
        b'{"argv":["s"],"cwd":"/","env":{"T":"' + SECRET.encode() + b'\xff"}}',
        json.dumps({"cwd": "/", "env": {"T": SECRET}, "script": SECRET}).encode(),
        json.dumps({"argv": ["s"], "cwd": "/", "env": {"T": 1, "U": SECRET}}).encode(),
        json.dumps({"argv": ["s"], "cwd": "/", "script_b64": SECRET}).encode(),
        json.dumps({"argv": ["s"], "cwd": "/", "env_b64": [_b64(SECRET.encode())]}).encode(),
        json.dumps({"argv": ["s"], "cwd": 7, "script": SECRET}).encode(),
    ],
)
def test_validation_errors_name_the_field_and_never_echo_script_or_environment(body: bytes):
    with pytest.raises(ValidationError) as info:
        SbatchBody.model_validate_json(body)
    detail = validation_detail(info.value.errors(include_url=False), ("body",))
    assert detail
    assert all(d["loc"][0] == "body" and d["msg"] for d in detail)
    assert SECRET not in json.dumps(detail)


def test_a_negative_time_is_kept_as_slurms_uint32():
    req = parse_sbatch(["sbatch", "--time=-5", "--wrap", "true"], None, {}, CTX)
    assert req.spec.time_limit == 2**32 - 7199  # shown 2982611-04:17:00, as scontrol does


def test_dependencies_on_unknown_jobs_are_dropped_and_lift_an_or():
    known = {7}.__contains__
    assert prune_missing(parse_dependency("afterok:99999"), known) is None
    kept = prune_missing(parse_dependency("afterok:99999,afterany:7"), known)
    assert kept is not None
    assert kept.render() == "afterany:7"
    assert prune_missing(parse_dependency("afterok:99999?afterany:7"), known) is None
    whole = parse_dependency("afterany:7,singleton")
    assert prune_missing(whole, known) is whole


def test_a_script_that_is_not_utf8_goes_to_kubernetes_as_binary_data():
    data = _script_data(ODD, "h\n")
    assert data == {
        "data": {"hostfile": "h\n"},
        "binaryData": {"script": _b64(ODD.encode("utf-8", "surrogateescape"))},
    }
    assert _script_data("#!/bin/sh\n", "h\n") == {
        "data": {"script": "#!/bin/sh\n", "hostfile": "h\n"}
    }
