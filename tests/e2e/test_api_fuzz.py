"""Every route of the gateway's OpenAPI document, fuzzed: never a 5xx, never a traceback.

Requests are drawn by Hypothesis from the document itself (parameters and body schemas),
with values a client could send that the schema does not expect: integers past 64 bits,
`Infinity`/`NaN` (Python's JSON and 1e400), wrong types, invalid UTF-8, deep nesting.
They come from user `tester` (a helper connects as that user, tests/support/peer_sockets.py),
so any job the fuzz manages to submit is an unprivileged one, and held. The budget is fixed
(at most 40 requests per route); the `ci` Hypothesis profile replays the same ones each run.
"""

from __future__ import annotations

import json
import math
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlencode

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.support.gateway_env import Gateway, discard_gateway, start_gateway
from tests.support.peer_sockets import UserSockets, http_request

PER_ROUTE = 40


def _text(max_size: int) -> st.SearchStrategy[str]:
    """Strings UTF-8 can carry (a lone surrogate would only test the JSON parser)."""
    return st.text(st.characters(codec="utf-8"), max_size=max_size)


_HUGE = [2**63, 2**64 + 1, -(2**63) - 1, 10**30, 99999999999999999999999]
_WILD: st.SearchStrategy[Any] = (
    st.sampled_from(
        [*_HUGE, math.inf, -math.inf, math.nan, 1e308, -1, 0, 1.5, "", "\x00", "\u2603", [], {}]
    )
    | st.none()
    | st.booleans()
)

# sbatch words that reach the option parsers with values past their ranges
_SBATCH_WORDS = st.sampled_from(
    [
        "--wrap",
        "true",
        "--parsable",
        "--nice=99999999999999999999999",
        "--array=0-99999999999999999999",
        "--array=1-3%99999999999999999999",
        "-t",
        "99999999999999999999",
        "--time-min=Infinity",
        "--mem=1e400",
        "--mem-per-cpu=NaN",
        "-N",
        "99999999999999999999-99999999999999999999",
        "--ntasks=99999999999999999999",
        "--cpus-per-task=-1",
        "--gpus=99999999999999999999",
        "--begin=now+99999999999999999999",
        "--signal=B:99999999999999999999@99999999999999999999",
        "--dependency=afterok:99999999999999999999",
        "--priority=99999999999999999999",
        "--uid=99999999999999999999",
        "--gid=99999999999999999999",
        "--exclusive",
        "-o",
        "/tmp/%j-%a-%99999999999999999999A",
    ]
)


@pytest.fixture(scope="module")
def fuzzed() -> Iterator[Gateway]:
    """A gateway of its own (the fuzz leaves held jobs behind)."""
    base = Path(tempfile.mkdtemp(prefix="h2-fuzz-", dir="/tmp"))
    gw = start_gateway(base, "time_scale = 0.016666\nkill_wait_s = 2\n")
    try:
        yield gw
    finally:
        discard_gateway(gw, base)


def _strategy(schema: dict[str, Any], defs: dict[str, Any], wild: bool, name: str = "") -> Any:
    """Values for a JSON schema; with `wild`, any leaf may be a value it does not expect."""
    if "$ref" in schema:
        return _strategy(defs[schema["$ref"].rsplit("/", 1)[-1]], defs, wild, name)
    if "anyOf" in schema:
        return st.one_of([_strategy(s, defs, wild, name) for s in schema["anyOf"]])
    kind = schema.get("type")
    base: st.SearchStrategy[Any]
    if name == "argv":
        base = st.lists(_SBATCH_WORDS | _text(max_size=12), max_size=6).map(
            lambda words: ["sbatch", "-H", *words]
        )
    elif name == "cwd":
        base = st.sampled_from(["/tmp", "/"]) | _text(max_size=20)
    elif kind == "string":
        base = _text(max_size=min(int(schema.get("maxLength", 30)), 30))
    elif kind == "integer":
        base = st.integers(schema.get("minimum"), schema.get("maximum")) | st.integers()
    elif kind == "number":
        base = st.floats()
    elif kind == "boolean":
        base = st.booleans()
    elif kind == "null":
        base = st.none()
    elif kind == "array":
        items = _strategy(schema.get("items", {}), defs, wild)
        base = st.lists(items, max_size=min(int(schema.get("maxItems", 4)), 4))
    elif kind == "object":
        props = schema.get("properties", {})
        required = set(schema.get("required", ()))
        fixed = {k: _strategy(v, defs, wild, k) for k, v in props.items() if k in required}
        optional = {k: _strategy(v, defs, wild, k) for k, v in props.items() if k not in required}
        base = st.fixed_dictionaries(fixed, optional=optional)
        extra = schema.get("additionalProperties")
        if isinstance(extra, dict):
            base = st.dictionaries(_text(max_size=8), _strategy(extra, defs, wild), max_size=4)
        return base  # the document's shape is kept; its values may go wild
    else:
        return _WILD
    return st.one_of(base, _WILD) if wild else base


def _body(schema: dict[str, Any] | None, defs: dict[str, Any]) -> Any:
    """Request bodies: from the schema, or bytes no schema describes."""
    raw = st.sampled_from(
        [
            b"[" * 5000 + b"]" * 5000,
            b'{"ids": ["1\xff"], "argv": ["\xc3\x28"]}',
            b'{"ids": ["1"], "signal": Infinity, "user_hold": NaN}',
            b"-9223372036854775809",
            b"",
        ]
    ) | st.binary(max_size=60)
    if schema is None:
        return raw

    def encode(value: Any) -> bytes:
        return json.dumps(value).encode()

    shaped = _strategy(schema, defs, wild=False).map(encode)
    return st.one_of(shaped, _strategy(schema, defs, wild=True).map(encode), raw)


def _param(schema: dict[str, Any], defs: dict[str, Any]) -> Any:
    return _strategy(schema, defs, wild=True) | st.sampled_from(
        [*_HUGE, "Infinity", "NaN", "1e400", "x"]
    )


def _request(op: dict[str, Any], path: str, defs: dict[str, Any]) -> Any:
    """(path with query, body or None) for one operation."""
    parts: dict[str, Any] = {}
    for p in op.get("parameters", ()):
        parts[f"{p['in']}:{p['name']}"] = _param(p.get("schema", {}), defs)
    content = op.get("requestBody", {}).get("content", {}).get("application/json")
    body = _body(content["schema"], defs) if content else st.none()

    def build(values: dict[str, Any], payload: bytes | None) -> tuple[str, bytes | None]:
        url = path
        query: list[tuple[str, str]] = []
        for key, value in values.items():
            where, name = key.split(":", 1)
            if where == "path":
                url = url.replace("{" + name + "}", quote(str(value), safe=""))
            elif isinstance(value, list):
                query.extend((name, str(v)) for v in value)
            elif value is not None:
                query.append((name, str(value)))
        return (url + ("?" + urlencode(query) if query else "")), payload

    return st.builds(build, st.fixed_dictionaries(parts), body)


def _fuzz_route(
    tester: UserSockets, method: str, path: str, requests: Any, seen: dict[str, set[int]]
) -> None:
    """PER_ROUTE requests to one operation, each on a fresh connection of `tester`."""

    @settings(
        max_examples=PER_ROUTE,
        deadline=None,
        database=None,
        suppress_health_check=list(HealthCheck),
    )
    @given(req=requests)
    def one(req: tuple[str, bytes | None]) -> None:
        url, body = req
        (conn,) = tester.connect(1)
        try:
            status, answer = http_request(conn, method, url, body)
        finally:
            conn.close()
        assert status < 500, (method, url, body, answer[:300])
        seen.setdefault(f"{method} {path}", set()).add(status)

    one()


def test_no_route_answers_a_fuzzed_request_with_a_server_error(fuzzed: Gateway) -> None:
    doc = fuzzed.api("/openapi.json")
    assert isinstance(doc, dict)
    defs = doc.get("components", {}).get("schemas", {})
    operations = [
        (method.upper(), path, op)
        for path, methods in sorted(doc["paths"].items())
        for method, op in sorted(methods.items())
    ]
    assert len(operations) >= 12  # every route the gateway serves is in the document
    seen: dict[str, set[int]] = {}
    with UserSockets("tester", str(fuzzed.socket)) as tester:
        for method, path, op in operations:
            _fuzz_route(tester, method, path, _request(op, path, defs), seen)
    assert len(seen) == len(operations)
    log = (fuzzed.home / "gateway.log").read_text()
    assert "Traceback" not in log, log[log.index("Traceback") - 300 :][:3000]
