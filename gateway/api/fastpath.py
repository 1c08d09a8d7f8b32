"""POST /v1/sbatch without the framework's middleware stack: the one hot route.

Submissions dominate the API's load (pipelines of sbatch calls, scripts submitted in
loops), and FastAPI's general machinery costs about as much per call as parsing the
script. This ASGI wrapper answers that route itself, with the same pydantic model, the same
handler and the same error shapes as the framework (422 with `loc` starting at "body", 413
over the size limit, 500 on a bug), and passes every other request, and any sbatch request
that is not plainly JSON, to the FastAPI app, whose OpenAPI document still describes it.
"""

from __future__ import annotations

import json
import logging

import orjson
from pydantic import ValidationError
from starlette.types import ASGIApp, Receive, Scope, Send

from gateway.api.app import (
    MAX_BODY,
    AccessDenied,
    SbatchBody,
    caller_from_scope,
    submit_answer,
)
from gateway.api.errors import validation_detail
from gateway.control.gateway import Gateway

__all__ = ["MAX_BODY", "sbatch_fast_path"]

log = logging.getLogger("caldera.api")

_PATH = "/v1/sbatch"


def _is_json(scope: Scope) -> bool:
    for name, value in scope.get("headers", ()):
        if name == b"content-type":
            return bool(value.split(b";", 1)[0].strip().lower() == b"application/json")
    return False


def _dumps(payload: object) -> bytes:
    try:
        return orjson.dumps(payload)
    except orjson.JSONEncodeError:  # an echoed input orjson cannot hold (an int past 64 bits)
        return json.dumps(payload, default=str).encode()


async def _answer(send: Send, status: int, payload: object) -> None:
    body = _dumps(payload) if status != 500 else b"Internal Server Error"
    kind = b"application/json" if status != 500 else b"text/plain; charset=utf-8"
    headers = [(b"content-type", kind), (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


async def _read_body(receive: Receive) -> bytes | None:
    """The whole request body, or None once it passes MAX_BODY."""
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return b""
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > MAX_BODY:
            return None
        chunks.append(chunk)
        if not message.get("more_body", False):
            return b"".join(chunks)


def sbatch_fast_path(app: ASGIApp, gw: Gateway) -> ASGIApp:
    """`app` with POST /v1/sbatch answered directly."""

    async def asgi(scope: Scope, receive: Receive, send: Send) -> None:
        if (
            scope["type"] != "http"
            or scope["path"] != _PATH
            or scope["method"] != "POST"
            or not _is_json(scope)
        ):
            await app(scope, receive, send)
            return
        raw = await _read_body(receive)
        if raw is None:
            await _answer(send, 413, {"detail": "Request body too large"})
            return
        try:
            caller = caller_from_scope(scope, gw)
            body = SbatchBody.model_validate_json(raw)
            answer = await submit_answer(gw, caller, body)
        except AccessDenied as exc:
            await _answer(send, 401, {"detail": exc.detail})
            return
        except ValidationError as exc:
            await _answer(
                send, 422, {"detail": validation_detail(exc.errors(include_url=False), ("body",))}
            )
            return
        except Exception:
            log.exception("POST %s failed", _PATH)
            await _answer(send, 500, None)
            return
        await _answer(send, 200, answer)

    return asgi
