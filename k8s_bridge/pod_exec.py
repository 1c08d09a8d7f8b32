"""A command run in a pod's container through the API server's `exec` (a WebSocket that the
API server passes to the pod's kubelet, which authenticates it), as `kubectl exec` does: the
only way to reach a pod's processes other than deleting it. scancel's signals use it
(pod_signal.py).

The `kubernetes` client's own `stream()` swaps the shared ApiClient's request function for
the call's duration, which the controller's concurrent requests would go through; here the
WebSocket is opened directly (its ws_client), with the request's URL and authorisation
serialised by the ApiClient, as every other call of KubeClient is. The call takes a token
from the client's rate limiter like any request.
"""

from __future__ import annotations

import contextlib
import json
import logging
import re
from collections.abc import Sequence
from dataclasses import dataclass

from kubernetes.client.exceptions import ApiException
from kubernetes.stream import ws_client

from k8s_bridge.kube import PODS, KubeClient, KubeError

__all__ = ["ExecResult", "exec_in_pod"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ExecResult:
    """The command's exit status and what it wrote (stdout and stderr together)."""

    status: int
    output: str


def exec_in_pod(
    client: KubeClient,
    namespace: str,
    pod: str,
    container: str,
    argv: Sequence[str],
    timeout_s: float = 20.0,
) -> ExecResult:
    """Run `argv` (no shell: as given) in the container; a KubeError when the pod cannot be
    reached (not found, not running, refused: not retryable; no answer: retryable)."""
    client.limiter.acquire()
    client.requests += 1
    path = PODS.path(namespace, pod, "exec")
    query = [("container", container), ("stdout", "true"), ("stderr", "true")]
    query += [("command", arg) for arg in argv]
    what = f"exec in pod {namespace}/{pod}"
    try:
        _, url, headers, _, _ = client.api.param_serialize(
            "GET", path, header_params={}, auth_settings=["BearerToken"]
        )
        ws = ws_client.websocket_call(  # type: ignore[no-untyped-call]
            client.api.configuration,
            "GET",
            url,
            query_params=query,
            headers=headers,
            _preload_content=False,
        )
    except ApiException as exc:  # websocket_call's wrapping of every failure
        raise _refused(what, str(exc.reason or exc)) from exc
    try:
        ws.run_forever(timeout=timeout_s)
        if ws.is_open():
            raise KubeError(f"{what}: no end after {timeout_s:g} s", status=0, retryable=True)
        answer = ws.read_channel(ws_client.ERROR_CHANNEL)  # before read_all empties it
        status = exit_status(answer)
        if status is None:
            message = _message(answer)
            raise KubeError(f"{what}: {message[:300]}", status=0, retryable=False)
        output = ws.read_all()
    finally:
        ws.close()
    log.debug("%s %s: %s %r", what, list(argv), status, output)
    return ExecResult(status, str(output))


def exit_status(error_channel: str) -> int | None:
    """The command's exit status from the exec's status channel (a metav1.Status): 0 for
    Success, the code of NonZeroExitCode, None when the command did not run at all."""
    try:
        doc = json.loads(error_channel)
    except ValueError:
        return None
    if not isinstance(doc, dict):
        return None
    if doc.get("status") == "Success":
        return 0
    if doc.get("reason") == "NonZeroExitCode":
        for cause in (doc.get("details") or {}).get("causes") or []:
            if isinstance(cause, dict) and cause.get("reason") == "ExitCode":
                with contextlib.suppress(ValueError):
                    return int(str(cause.get("message")))
    return None


def _message(text: str) -> str:
    """A metav1.Status's message, or the text itself."""
    with contextlib.suppress(ValueError, AttributeError):
        return str(json.loads(text).get("message") or text).strip()
    return text.strip()


def _refused(what: str, reason: str) -> KubeError:
    """The handshake's refusal with the server's message (`pods "x" not found`): not
    retryable when the server answered, retryable when it did not."""
    status_text = reason.rpartition(" -+-+- ")[2]  # websocket-client: status, headers, body
    match = re.search(r"Handshake status (\d+)", reason)
    if match is None:
        return KubeError(f"{what}: {reason}", status=0, retryable=True)
    code = int(match.group(1))
    return KubeError(f"{what}: {code}: {_message(status_text)}", status=code, retryable=code >= 500)
