"""Scripts and environments as stored: any bytes, as sbatch takes them.

Inside the gateway a script or variable that is not UTF-8 is text with its odd bytes
escaped (surrogateescape). SQLite's TEXT and JSON cannot hold those escapes, so such a
script is stored as a BLOB of its bytes, and such an environment as JSON with `\\udcXX`
escapes; plain UTF-8, the usual case, is stored as before.
"""

from __future__ import annotations

import json
from collections.abc import Mapping

import orjson

__all__ = ["env_from_db", "env_to_db", "script_from_db", "script_to_db"]


def script_to_db(script: str) -> str | bytes:
    """TEXT when the script is UTF-8, else a BLOB of its bytes."""
    try:
        script.encode("utf-8")
    except UnicodeEncodeError:
        return script.encode("utf-8", "surrogateescape")
    return script


def script_from_db(value: str | bytes) -> str:
    """The script as the gateway holds it."""
    if isinstance(value, bytes):
        return value.decode("utf-8", "surrogateescape")
    return value


def env_to_db(env: Mapping[str, str]) -> bytes:
    """JSON of the environment (escaped bytes as `\\udcXX`, which orjson refuses)."""
    try:
        return orjson.dumps(dict(env))
    except orjson.JSONEncodeError:  # a surrogate-escaped byte
        return json.dumps(dict(env)).encode()


def env_from_db(value: bytes | str) -> dict[str, str]:
    """The environment as the gateway holds it."""
    try:
        env: dict[str, str] = orjson.loads(value)
    except orjson.JSONDecodeError:  # `\udcXX` escapes
        env = json.loads(value)
    return env
