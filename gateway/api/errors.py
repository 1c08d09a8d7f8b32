"""Validation errors as the API answers them (422, FastAPI's shape), for any input.

A request may be valid JSON yet hold values JSON cannot echo back: `1e400` parses to
infinity, and Python's parser also takes `NaN`/`Infinity`. pydantic's error reports repeat
the offending input, so the report is made JSON-safe before it is written, on both the
framework's path and the sbatch fast path.
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
            "input": json_safe(err.get("input")),
        }
        if "ctx" in err:
            item["ctx"] = {k: str(v) for k, v in err["ctx"].items()}
        out.append(item)
    return out


def install_validation_handler(app: FastAPI) -> None:
    """422 answers whose echoed input is always valid JSON."""

    async def invalid(request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, RequestValidationError)
        return JSONResponse({"detail": validation_detail(exc.errors())}, status_code=422)

    app.add_exception_handler(RequestValidationError, invalid)
