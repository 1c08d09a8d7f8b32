"""Validation errors as the API answers them (422, FastAPI's shape), for any input.

A report names the field and the problem. pydantic's reports repeat the offending input;
that echo is kept only for a short plain value of a field that holds nothing private: never
a batch script or an environment (passwords, tokens), never a whole body or object (a
missing field or malformed JSON would otherwise echo every variable), never more than a
line. A request may also be valid JSON yet hold values JSON cannot echo back: `1e400`
parses to infinity, and Python's parser also takes `NaN`/`Infinity`; what is echoed is made
JSON-safe, on both the framework's path and the sbatch fast path.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse

__all__ = ["install_validation_handler", "json_safe", "validation_detail"]


def json_safe(value: object) -> object:
    """`value` with what strict JSON cannot hold turned into text (bytes, inf, nan)."""
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if isinstance(value, bytes | bytearray):
        return bytes(value).decode("utf-8", "replace")
    if isinstance(value, Mapping):
        return {str(k): json_safe(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [json_safe(v) for v in value]
    if value is None or isinstance(value, str | int | float | bool):
        return value
    return str(value)


_PRIVATE = frozenset({"script", "script_b64", "env", "env_b64", "environment"})
_ECHO_MAX = 200  # characters of an echoed value


def _echo(err: Mapping[str, Any]) -> object:
    """The input to repeat in a report, or None when it must not be repeated."""
    value = err.get("input")
    if err["type"] == "json_invalid" or any(part in _PRIVATE for part in err["loc"]):
        return None
    if isinstance(value, Mapping | list | tuple | bytes | bytearray):
        return None
    if isinstance(value, str) and len(value) > _ECHO_MAX:
        return value[:_ECHO_MAX] + "..."
    return json_safe(value)


def validation_detail(
    errors: Iterable[Mapping[str, Any]], prefix: tuple[str, ...] = ()
) -> list[dict[str, Any]]:
    """pydantic's errors as FastAPI reports them, `loc` prefixed (e.g. with "body")."""
    out = []
    for err in errors:
        item: dict[str, Any] = {
            "type": err["type"],
            "loc": [*prefix, *err["loc"]],
            "msg": err["msg"],
            "input": _echo(err),
        }
        if "ctx" in err and err["type"] != "json_invalid":  # its ctx quotes the input
            item["ctx"] = {k: str(v)[:_ECHO_MAX] for k, v in err["ctx"].items()}
        out.append(item)
    return out


def install_validation_handler(app: FastAPI) -> None:
    """422 answers whose echoed input is always valid JSON."""

    async def invalid(request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, RequestValidationError)
        return JSONResponse({"detail": validation_detail(exc.errors())}, status_code=422)

    app.add_exception_handler(RequestValidationError, invalid)
