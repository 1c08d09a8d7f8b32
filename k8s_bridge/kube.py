"""A small, typed, rate-limited client for the few API calls Caldera makes.

Built on the official `kubernetes` client's ApiClient (authentication from a kubeconfig or a
URL + bearer token + CA, TLS, connection pool) but speaking JSON dicts over the REST paths,
so core objects and Volcano's custom resources go through one code path and nothing is
converted to and from the generated model classes. Every request takes a token from the
bucket first. Errors are BackendErrors that say what failed and whether retrying may help:
no answer (connection refused, timeout), 429 and 5xx are retryable; the server refusing an
object (403, 404, 422...) is not, and carries the server's own message.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
import urllib3
from kubernetes import client as k8s_client
from kubernetes import config as k8s_config
from kubernetes.client.exceptions import ApiException

from gateway.model.backend import BackendError
from k8s_bridge.ratelimit import TokenBucket

__all__ = [
    "BINDINGS",
    "CONFIGMAPS",
    "NODES",
    "PODGROUPS",
    "PODS",
    "RESOURCE_QUOTAS",
    "SERVICES",
    "VCJOBS",
    "KubeClient",
    "KubeError",
    "Resource",
    "api_client_from_kubeconfig",
    "api_client_from_token",
]

Obj = dict[str, Any]


@dataclass(frozen=True, slots=True)
class Resource:
    """A REST resource: group ("" for core), version, plural, kind."""

    group: str
    version: str
    plural: str
    kind: str
    namespaced: bool = True

    @property
    def api_version(self) -> str:
        """`v1` or `group/version`."""
        return f"{self.group}/{self.version}" if self.group else self.version

    def path(self, namespace: str | None = None, name: str | None = None, sub: str = "") -> str:
        """The URL path of the collection, an object, or an object's subresource."""
        root = f"/apis/{self.group}/{self.version}" if self.group else f"/api/{self.version}"
        if self.namespaced and namespace is not None:
            root += f"/namespaces/{namespace}"
        root += f"/{self.plural}"
        if name is not None:
            root += f"/{name}"
        if sub:
            root += f"/{sub}"
        return root


PODS = Resource("", "v1", "pods", "Pod")
CONFIGMAPS = Resource("", "v1", "configmaps", "ConfigMap")
SERVICES = Resource("", "v1", "services", "Service")
NODES = Resource("", "v1", "nodes", "Node", namespaced=False)
RESOURCE_QUOTAS = Resource("", "v1", "resourcequotas", "ResourceQuota")
BINDINGS = Resource("", "v1", "bindings", "Binding")
PODGROUPS = Resource("scheduling.volcano.sh", "v1beta1", "podgroups", "PodGroup")
VCJOBS = Resource("batch.volcano.sh", "v1alpha1", "jobs", "Job")

_RESOURCES_BY_KIND = {
    (r.api_version, r.kind): r for r in (PODS, CONFIGMAPS, SERVICES, PODGROUPS, VCJOBS)
}


class KubeError(BackendError):
    """An API call failed: `status` 0 means no answer (unreachable or timed out)."""

    def __init__(self, message: str, *, status: int, reason: str = "", retryable: bool) -> None:
        super().__init__(message, retryable=retryable)
        self.status = status
        self.reason = reason

    @property
    def unreachable(self) -> bool:
        """No HTTP answer at all."""
        return self.status == 0


def _retryable(status: int) -> bool:
    return status == 0 or status == 429 or status >= 500


def api_client_from_kubeconfig(
    path: str | Path | None = None, context: str | None = None, pool: int = 16
) -> k8s_client.ApiClient:
    """An ApiClient from a kubeconfig file (None: $KUBECONFIG or ~/.kube/config)."""
    cfg = k8s_client.Configuration()
    k8s_config.load_kube_config(  # type: ignore[no-untyped-call]
        config_file=str(path) if path is not None else None,
        context=context,
        client_configuration=cfg,
    )
    cfg.connection_pool_maxsize = pool
    return k8s_client.ApiClient(cfg)


def api_client_from_token(
    server: str,
    token: str,
    ca_file: str | Path | None = None,
    *,
    verify: bool = True,
    pool: int = 16,
) -> k8s_client.ApiClient:
    """An ApiClient for `server` with a bearer token and the CA that signed its cert."""
    cfg = k8s_client.Configuration(
        host=server,
        api_key={"authorization": token},
        api_key_prefix={"authorization": "Bearer"},
    )
    if ca_file is not None:
        cfg.ssl_ca_cert = str(ca_file)
    cfg.verify_ssl = verify
    cfg.connection_pool_maxsize = pool
    return k8s_client.ApiClient(cfg)


def _server_message(status: int, body: bytes) -> tuple[str, str]:
    """The `message` and `reason` of a metav1.Status body (or the raw text)."""
    try:
        doc = orjson.loads(body)
    except orjson.JSONDecodeError:
        return body.decode(errors="replace").strip()[:500], ""
    if isinstance(doc, dict):
        return str(doc.get("message") or doc), str(doc.get("reason") or "")
    return str(doc), ""


class KubeClient:
    """JSON over the API server's REST paths, rate limited, with typed errors."""

    def __init__(
        self, api: k8s_client.ApiClient, limiter: TokenBucket, timeout_s: float = 15.0
    ) -> None:
        self.api = api
        self.limiter = limiter
        self.timeout_s = timeout_s
        self.requests = 0

    @property
    def server(self) -> str:
        """The API server's URL."""
        return str(self.api.configuration.host)

    # --- the one request path -----------------------------------------------------

    def _send(
        self,
        method: str,
        path: str,
        *,
        query: list[tuple[str, str]] | None = None,
        body: Any = None,
        content_type: str | None = None,
        timeout: float | tuple[float, float] | None = None,
        what: str = "",
    ) -> Any:
        self.limiter.acquire()
        self.requests += 1
        headers = {"Accept": "application/json"}
        if content_type:
            headers["Content-Type"] = content_type
        try:
            _, url, header_params, serialized, _ = self.api.param_serialize(
                method,
                path,
                query_params=query or None,
                header_params=headers,
                body=body,
                auth_settings=["BearerToken"],
            )
            resp = self.api.call_api(
                method,
                url,
                header_params=header_params,
                body=serialized,
                _request_timeout=timeout or (min(5.0, self.timeout_s), self.timeout_s),
            )
        except (urllib3.exceptions.HTTPError, ApiException, OSError) as exc:
            status = getattr(exc, "status", 0) if isinstance(exc, ApiException) else 0
            raise KubeError(
                f"{what or method + ' ' + path}: API server {self.server} did not answer: "
                f"{type(exc).__name__}: {exc}".strip(),
                status=int(status or 0),
                retryable=True,
            ) from exc
        return resp

    def request(
        self,
        method: str,
        path: str,
        *,
        query: list[tuple[str, str]] | None = None,
        body: Any = None,
        content_type: str | None = None,
        what: str = "",
        timeout: tuple[float, float] | None = None,
    ) -> Obj:
        """One call; the decoded JSON answer, or a KubeError (`timeout`: connect and read
        seconds, default the client's)."""
        resp = self._send(
            method,
            path,
            query=query,
            body=body,
            content_type=content_type,
            timeout=timeout,
            what=what,
        )
        try:
            data = resp.read()
        except (urllib3.exceptions.HTTPError, OSError) as exc:
            raise KubeError(
                f"{what or method + ' ' + path}: reading the answer failed: {exc}",
                status=0,
                retryable=True,
            ) from exc
        finally:
            with contextlib.suppress(Exception):
                resp.response.release_conn()
        status = int(resp.status)
        if status >= 300:
            message, reason = _server_message(status, data or b"")
            raise KubeError(
                f"{what or method + ' ' + path}: {status} {reason or resp.reason}: {message}",
                status=status,
                reason=reason,
                retryable=_retryable(status),
            )
        if not data:
            return {}
        doc = orjson.loads(data)
        return doc if isinstance(doc, dict) else {"items": doc}

    # --- verbs ----------------------------------------------------------------------

    def create(self, resource: Resource, namespace: str, body: Obj) -> tuple[Obj, bool]:
        """Create if absent: (the object, True) or (the one already there, False).
        409 AlreadyExists is success: retries after a lost answer are idempotent."""
        name = str(body["metadata"]["name"])
        what = f"create {resource.kind} {namespace}/{name}"
        try:
            return self.request("POST", resource.path(namespace), body=body, what=what), True
        except KubeError as exc:
            if exc.status != 409 or exc.reason != "AlreadyExists":
                raise
        existing = self.get(resource, namespace, name)
        if existing is None:  # deleted in between: try once more
            return self.request("POST", resource.path(namespace), body=body, what=what), True
        return existing, False

    def create_object(self, namespace: str, body: Obj) -> tuple[Obj, bool]:
        """`create` for a manifest of a kind this client knows."""
        resource = _RESOURCES_BY_KIND[(str(body["apiVersion"]), str(body["kind"]))]
        return self.create(resource, namespace, body)

    def get(self, resource: Resource, namespace: str | None, name: str) -> Obj | None:
        """The object, or None when it does not exist."""
        try:
            return self.request(
                "GET", resource.path(namespace, name), what=f"get {resource.kind} {name}"
            )
        except KubeError as exc:
            if exc.status == 404:
                return None
            raise

    def list(
        self,
        resource: Resource,
        namespace: str | None,
        *,
        label_selector: str | None = None,
        field_selector: str | None = None,
        page: int = 500,
    ) -> tuple[list[Obj], str]:
        """Every matching object (paged) and the list's resourceVersion."""
        items: list[Obj] = []
        cont = ""
        while True:
            query = [("limit", str(page))]
            if label_selector:
                query.append(("labelSelector", label_selector))
            if field_selector:
                query.append(("fieldSelector", field_selector))
            if cont:
                query.append(("continue", cont))
            doc = self.request(
                "GET", resource.path(namespace), query=query, what=f"list {resource.plural}"
            )
            items.extend(doc.get("items") or [])
            meta = doc.get("metadata") or {}
            cont = str(meta.get("continue") or "")
            if not cont:
                return items, str(meta.get("resourceVersion") or "")

    def delete(
        self,
        resource: Resource,
        namespace: str,
        name: str,
        *,
        propagation: str = "Background",
        grace_s: int | None = None,
        resource_version: str | None = None,
    ) -> bool:
        """Delete (dependents by `propagation`); False when it was already gone. With
        `resource_version`, only that version of it (a KubeError 409 once it changed)."""
        body: Obj = {"apiVersion": "v1", "kind": "DeleteOptions", "propagationPolicy": propagation}
        if grace_s is not None:
            body["gracePeriodSeconds"] = grace_s
        if resource_version is not None:
            body["preconditions"] = {"resourceVersion": resource_version}
        try:
            self.request(
                "DELETE",
                resource.path(namespace, name),
                body=body,
                what=f"delete {resource.kind} {namespace}/{name}",
            )
        except KubeError as exc:
            if exc.status == 404:
                return False
            raise
        return True

    def delete_collection(
        self, resource: Resource, namespace: str, label_selector: str, grace_s: int | None = None
    ) -> None:
        """Delete every object matching the selector. The grace goes in the body: the API
        server reads DeleteOptions from the body when there is one, ignoring the query."""
        body: Obj = {"apiVersion": "v1", "kind": "DeleteOptions", "propagationPolicy": "Background"}
        if grace_s is not None:
            body["gracePeriodSeconds"] = grace_s
        self.request(
            "DELETE",
            resource.path(namespace),
            query=[("labelSelector", label_selector)],
            body=body,
            what=f"delete {resource.plural} {label_selector}",
        )

    def patch(self, resource: Resource, namespace: str | None, name: str, body: Obj) -> Obj:
        """A JSON merge patch."""
        return self.request(
            "PATCH",
            resource.path(namespace, name),
            body=body,
            content_type="application/merge-patch+json",
            what=f"patch {resource.kind} {name}",
        )

    def bind(self, namespace: str, pod: str, node: str, uid: str | None = None) -> None:
        """Bind a pod to a node (pods/binding), as a scheduler does."""
        meta: Obj = {"name": pod, "namespace": namespace}
        if uid:
            meta["uid"] = uid
        self.request(
            "POST",
            PODS.path(namespace, pod, "binding"),
            body={
                "apiVersion": "v1",
                "kind": "Binding",
                "metadata": meta,
                "target": {"apiVersion": "v1", "kind": "Node", "name": node},
            },
            what=f"bind pod {namespace}/{pod} to {node}",
        )

    def served(self, group_version: str) -> bool:
        """Whether the server serves an API group version (e.g. Volcano's)."""
        try:
            self.request("GET", f"/apis/{group_version}", what=f"discover {group_version}")
        except KubeError as exc:
            if exc.status == 404:
                return False
            raise
        return True

    def watch(
        self,
        resource: Resource,
        namespace: str | None,
        resource_version: str,
        *,
        label_selector: str | None = None,
        field_selector: str | None = None,
        timeout_s: int = 240,
    ) -> Iterator[Obj]:
        """Watch events ({type, object}) from `resource_version` until the server ends the
        stream; raises KubeError when it cannot be opened or breaks."""
        query = [
            ("watch", "true"),
            ("resourceVersion", resource_version),
            ("allowWatchBookmarks", "true"),
            ("timeoutSeconds", str(timeout_s)),
        ]
        if label_selector:
            query.append(("labelSelector", label_selector))
        if field_selector:
            query.append(("fieldSelector", field_selector))
        resp = self._send(
            "GET",
            resource.path(namespace),
            query=query,
            timeout=(min(5.0, self.timeout_s), timeout_s + 30.0),
            what=f"watch {resource.plural}",
        )
        raw = resp.response
        try:
            if int(resp.status) >= 300:
                message, reason = _server_message(int(resp.status), raw.read())
                raise KubeError(
                    f"watch {resource.plural}: {resp.status} {reason}: {message}",
                    status=int(resp.status),
                    reason=reason,
                    retryable=True,
                )
            buffer = b""
            for chunk in raw.stream(65536, decode_content=True):
                buffer += chunk
                while b"\n" in buffer:
                    line, buffer = buffer.split(b"\n", 1)
                    if line.strip():
                        event = orjson.loads(line)
                        if isinstance(event, dict):
                            yield event
        except (urllib3.exceptions.HTTPError, OSError) as exc:
            raise KubeError(
                f"watch {resource.plural}: stream broke: {type(exc).__name__}: {exc}",
                status=0,
                retryable=True,
            ) from exc
        finally:
            with contextlib.suppress(Exception):
                raw.release_conn()
            with contextlib.suppress(Exception):
                raw.close()
