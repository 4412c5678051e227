"""The API client: every write, and the few reads that must be fresh, go through here.

Owns ``Client``, a thin typed layer over a ``Transport`` (``transport.py``: one urllib3 pool):
get, list (paginated), create, update (PUT with ``metadata.resourceVersion``), status update,
patch (merge, JSON, strategic and server-side apply), delete, eviction, and the raw ``watch``
stream (``watch_stream.py``) that the reflector in ``informer.py`` builds on; list pages are
requested one ahead (``list_pager.py``) and decoded with the garbage collector paused
(``collector_paused``). Objects are plain dictionaries. Every failure is raised as a typed error
from ``errors.py``; transport failures become ``ConnectionFailed``.

The client is the "uncached reader": reads through it go to the API server. Controllers read
from the shared cache (``cache.py``) and use the client for writes.

Every mutating request (any method but GET, HEAD and OPTIONS, so create, update, status, patch,
delete, eviction, and the Events the recorder writes; not the review APIs, whose POSTs store
nothing: ``fence.is_mutating``) first passes the client's ``WriteFence``
(``fence.py``) when it has one: a refused write raises ``FencedWriteError`` and sends nothing.
``with_fence`` gives a fenced view and makes the transport's connections check the fence again
right before the bytes go out; the manager hands that view to reconcilers, and the Lease itself
is written through ``with_own_connections``, a client with a pool the fence does not guard.
``with_own_writes(recorder)`` gives a view that hands each write's answer to a ``WriteRecorder``
(a controller's ``OwnWrites``, ``recent_writes.py``): the manager gives each controller such a
client, and the controller's cache view reads its own writes through the same record.
A write the API server's own leader fence denies (the ValidatingAdmissionPolicy of
config/fence, ``fence.is_server_fence_refusal``) raises ``FencedWriteError`` too (``by="server"``),
counted and logged by the client's fence, so reconcilers treat both refusals alike.

Side effects: network I/O to the API server.
"""

from __future__ import annotations

import contextlib
import gc
import os
import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, Protocol
from urllib.parse import urlencode

import orjson
import pykube
import urllib3

from nodewright.runtime.kube import errors
from nodewright.runtime.kube.credentials import in_cluster_config
from nodewright.runtime.kube.fence import WriteFence, is_mutating, is_server_fence_refusal
from nodewright.runtime.kube.kinds import Kind
from nodewright.runtime.kube.list_pager import prefetched_pages
from nodewright.runtime.kube.transport import Response, Transport
from nodewright.runtime.kube.watch_stream import WatchEvent, WatchStream

__all__ = [
    "DEFAULT_FIELD_MANAGER",
    "DEFAULT_POOL_SIZE",
    "DEFAULT_TIMEOUT",
    "Client",
    "ObjectList",
    "PatchType",
    "WatchEvent",
    "WatchStream",
    "WriteRecorder",
    "collector_paused",
]

PatchType = Literal["merge", "json", "strategic", "apply"]

DEFAULT_FIELD_MANAGER = "nodewright"
DEFAULT_POOL_SIZE = 64
"""Connections kept per host: enough for many worker threads plus one watch per informer."""
DEFAULT_TIMEOUT: tuple[float, float] = (10.0, 60.0)
"""(connect, read) seconds for ordinary requests. Watches set their own read timeout."""
WATCH_READ_MARGIN = 60.0
"""A watch's socket read timeout is the server's timeoutSeconds plus this margin."""
LIST_PAGE_SIZE = 500

_CONTENT_TYPES: dict[str, str] = {
    "merge": "application/merge-patch+json",
    "json": "application/json-patch+json",
    "strategic": "application/strategic-merge-patch+json",
    "apply": "application/apply-patch+yaml",
}


class WriteRecorder(Protocol):
    """What a client tells of its writes (``OwnWrites`` in ``recent_writes.py`` keeps them):
    the answer of each create, update and patch; a delete before it is sent (``key`` is
    ``namespace/name``, ``uid`` the precondition's or ""), and then its answer or its failure."""

    def wrote(self, kind: Kind, answer: dict[str, Any]) -> None: ...
    def deleting(self, kind: Kind, key: str, uid: str) -> None: ...
    def deleted(self, kind: Kind, key: str, answer: dict[str, Any]) -> None: ...
    def delete_failed(self, kind: Kind, key: str) -> None: ...


@dataclass(frozen=True, slots=True)
class ObjectList:
    """The items of one list call and the resourceVersion to watch from."""

    items: list[dict[str, Any]]
    resource_version: str


def _object_of(body: bytes, request: str) -> dict[str, Any]:
    """A response body as a JSON object, or the ``ApiError`` that says it is not one."""
    try:
        result = orjson.loads(body)
    except ValueError as error:
        raise errors.ApiError(f"{request} answered with a body that is not JSON", code=200) from error
    if not isinstance(result, dict):
        raise errors.ApiError(f"{request} answered with a non-object", code=200)
    return result


_collector_lock = threading.Lock()
_collector_pausers = 0
_collector_was_enabled = True


@contextlib.contextmanager
def collector_paused() -> Iterator[None]:
    """Pause Python's cyclic garbage collector while a large body is decoded.

    Every object the decoder makes is reachable until it returns, so the collections its
    allocations trigger only walk them: they halved orjson's rate on a 500-Pod list page. The
    collector is process-wide: it runs again once the last thread inside has left (unless it
    was off before the first came in).
    """
    global _collector_pausers, _collector_was_enabled  # noqa: PLW0603 - one collector per process
    with _collector_lock:
        if _collector_pausers == 0:
            _collector_was_enabled = gc.isenabled()
            gc.disable()
        _collector_pausers += 1
    try:
        yield
    finally:
        with _collector_lock:
            _collector_pausers -= 1
            if _collector_pausers == 0 and _collector_was_enabled:
                gc.enable()


class Client:
    """Typed access to the Kubernetes API over a ``Transport``.

    Thread-safe: one client is shared by all informers and workers. ``field_manager`` names us
    in managedFields for every write (required by server-side apply).
    """

    def __init__(
        self,
        transport: Transport,
        *,
        field_manager: str = DEFAULT_FIELD_MANAGER,
        timeout: tuple[float, float] = DEFAULT_TIMEOUT,
        fence: WriteFence | None = None,
        recorder: WriteRecorder | None = None,
    ) -> None:
        self.transport = transport
        self.field_manager = field_manager
        self.timeout = timeout
        self._timeout = urllib3.Timeout(connect=timeout[0], read=timeout[1])
        self.fence = fence
        """Checked before every mutating request; None sends writes unchecked."""
        self.recorder = recorder
        """Told of every write's answer (``with_own_writes``); None for the shared client."""

    def with_fence(self, fence: WriteFence) -> Client:
        """The same client (same connections) whose writes pass ``fence`` first.

        Side effect: the shared transport's connections check the fence again at the last
        moment, before each chunk of a mutating request reaches the socket
        (``Transport.guard``), so every mutating request on it is fenced, through any view.
        """
        self.transport.guard(fence.guard("kubernetes"))
        return Client(
            self.transport,
            field_manager=self.field_manager,
            timeout=self.timeout,
            fence=fence,
            recorder=self.recorder,
        )

    def with_own_writes(self, recorder: WriteRecorder) -> Client:
        """The same client (same connections and fence) that tells ``recorder`` of each write:
        one controller's client, whose cache view reads its own writes."""
        return Client(
            self.transport,
            field_manager=self.field_manager,
            timeout=self.timeout,
            fence=self.fence,
            recorder=recorder,
        )

    def with_own_connections(self, pool_size: int = 4) -> Client:
        """A client for the same server and credentials with a connection pool of its own
        (the leader elector's: its Lease writes must not pass the fence they feed)."""
        return Client(
            self.transport.with_own_pool(pool_size), field_manager=self.field_manager, timeout=self.timeout
        )

    # ---- construction ---------------------------------------------------------------------
    @classmethod
    def from_config(
        cls,
        config: pykube.KubeConfig,
        *,
        pool_size: int = DEFAULT_POOL_SIZE,
        field_manager: str = DEFAULT_FIELD_MANAGER,
    ) -> Client:
        """A client for a loaded kubeconfig with a connection pool of ``pool_size``."""
        return cls(Transport(config, pool_size=pool_size), field_manager=field_manager)

    @classmethod
    def from_kubeconfig(
        cls,
        path: str | Path,
        *,
        pool_size: int = DEFAULT_POOL_SIZE,
        field_manager: str = DEFAULT_FIELD_MANAGER,
    ) -> Client:
        """A client for the current context of the kubeconfig file at ``path``."""
        config = pykube.KubeConfig.from_file(str(path))
        return cls.from_config(config, pool_size=pool_size, field_manager=field_manager)

    @classmethod
    def from_environment(
        cls, *, pool_size: int = DEFAULT_POOL_SIZE, field_manager: str = DEFAULT_FIELD_MANAGER
    ) -> Client:
        """``$KUBECONFIG`` when set, else the in-cluster service account, else ~/.kube/config."""
        path = os.environ.get("KUBECONFIG")
        if path:
            return cls.from_kubeconfig(path, pool_size=pool_size, field_manager=field_manager)
        if os.environ.get("KUBERNETES_SERVICE_HOST"):
            config = in_cluster_config()
        else:
            config = pykube.KubeConfig.from_file()
        return cls.from_config(config, pool_size=pool_size, field_manager=field_manager)

    # ---- raw requests ---------------------------------------------------------------------
    def request(
        self,
        method: str,
        path: str,
        *,
        params: dict[str, Any] | None = None,
        body: Any = None,
        content_type: str = "application/json",
        timeout: tuple[float, float | None] | None = None,
    ) -> Response:
        """Send one request to ``path`` (for example ``/api/v1/pods``) and read the answer;
        raise a typed error on failure. The raw building block of every other method.

        A mutating ``method`` passes the fence first (``FencedWriteError``, nothing sent)."""
        target, data, headers, bound = self._prepared(
            method, path, params, body, content_type=content_type, timeout=timeout
        )
        response = self.transport.fetch(method, target, body=data, headers=headers, timeout=bound)
        if response.status_code >= 400:
            try:
                errors.raise_for_status(response)
            except errors.ApiError as error:
                if self.fence is not None and is_server_fence_refusal(error.code, error.message):
                    raise self.fence.refused_by_server(f"{method} {path}", error.message) from None
                raise
        return response

    def _send(
        self,
        method: str,
        path: str,
        params: dict[str, Any] | None,
        body: Any,
        *,
        content_type: str = "application/json",
        timeout: tuple[float, float | None] | None,
        stream: bool = False,
    ) -> urllib3.BaseHTTPResponse:
        target, data, headers, bound = self._prepared(
            method, path, params, body, content_type=content_type, timeout=timeout
        )
        return self.transport.request(
            method, target, body=data, headers=headers, timeout=bound, stream=stream
        )

    def _prepared(
        self,
        method: str,
        path: str,
        params: dict[str, Any] | None,
        body: Any,
        *,
        content_type: str,
        timeout: tuple[float, float | None] | None,
    ) -> tuple[str, bytes | None, dict[str, str], urllib3.Timeout]:
        """The request target (path and query), body, headers and timeout of a call, once a
        mutating ``method`` has passed the fence (``FencedWriteError``, nothing sent)."""
        if self.fence is not None and is_mutating(method, path):
            self.fence.check("kubernetes", f"{method} {path}")
        headers = {"Accept": "application/json"}
        data: bytes | None = None
        if body is not None:
            data = orjson.dumps(body, option=orjson.OPT_NON_STR_KEYS)
            headers["Content-Type"] = content_type
        target = path
        if params:
            target += "?" + urlencode({k: v for k, v in params.items() if v is not None}, doseq=True)
        bound = self._timeout if timeout is None else urllib3.Timeout(connect=timeout[0], read=timeout[1])
        return target, data, headers, bound

    def _json(
        self,
        method: str,
        path: str,
        *,
        params: dict[str, Any] | None = None,
        body: Any = None,
        content_type: str = "application/json",
        timeout: float | None = None,
    ) -> dict[str, Any]:
        """The answer as a JSON object."""
        bounded = None if timeout is None else (timeout, timeout)
        response = self.request(
            method, path, params=params, body=body, content_type=content_type, timeout=bounded
        )
        return _object_of(response.content, f"{method} {path}")

    @staticmethod
    def _namespace_of(kind: Kind, obj: dict[str, Any], namespace: str | None) -> str | None:
        if not kind.namespaced:
            return None
        return namespace or obj.get("metadata", {}).get("namespace") or None

    # ---- reads ----------------------------------------------------------------------------
    def get(
        self, kind: Kind, name: str, namespace: str | None = None, *, timeout: float | None = None
    ) -> dict[str, Any]:
        """Read one object from the API server (uncached). Raises ``errors.NotFound``.

        ``timeout`` (seconds) bounds connecting and each read instead of the client default."""
        return self._json("GET", kind.path(namespace, name), timeout=timeout)

    def list_pages(
        self,
        kind: Kind,
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
        *,
        limit: int = LIST_PAGE_SIZE,
        resource_version: str | None = None,
    ) -> Iterator[ObjectList]:
        """List page by page (``limit``/``continue``); each page carries the list's RV so far.

        Items get ``apiVersion`` and ``kind`` filled in (list responses omit them). Raises
        ``errors.Gone`` when a continue token expires between pages; the caller starts over.
        """
        params: dict[str, Any] = {"limit": limit}
        if label_selector:
            params["labelSelector"] = label_selector
        if field_selector:
            params["fieldSelector"] = field_selector
        if resource_version is not None:
            params["resourceVersion"] = resource_version
        path = kind.path(namespace)

        def fetch(page_params: dict[str, Any]) -> bytes:
            return self.request("GET", path, params=page_params).content

        def decode(body: bytes) -> dict[str, Any]:
            with collector_paused():
                return _object_of(body, f"GET {path}")

        for page in prefetched_pages(fetch, decode, params):
            items = page.get("items") or []
            for item in items:
                item["apiVersion"] = kind.api_version
                item["kind"] = kind.kind
            yield ObjectList(items, str((page.get("metadata") or {}).get("resourceVersion", "")))

    def list(
        self,
        kind: Kind,
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
    ) -> ObjectList:
        """List every matching object (all pages) with a consistent read; uncached."""
        items: list[dict[str, Any]] = []
        resource_version = ""
        for page in self.list_pages(kind, namespace, label_selector, field_selector):
            items.extend(page.items)
            resource_version = page.resource_version
        return ObjectList(items, resource_version)

    # ---- writes ---------------------------------------------------------------------------
    def _write_params(self, field_manager: str | None, dry_run: bool) -> dict[str, Any]:
        params: dict[str, Any] = {"fieldManager": field_manager or self.field_manager}
        if dry_run:
            params["dryRun"] = "All"
        return params

    def create(
        self,
        kind: Kind,
        obj: dict[str, Any],
        namespace: str | None = None,
        *,
        field_manager: str | None = None,
        dry_run: bool = False,
        timeout: float | None = None,
    ) -> dict[str, Any]:
        """Create ``obj``; returns the stored object. Raises ``errors.AlreadyExists``."""
        body = {"apiVersion": kind.api_version, "kind": kind.kind, **obj}
        path = kind.path(self._namespace_of(kind, obj, namespace))
        params = self._write_params(field_manager, dry_run)
        answer = self._json("POST", path, params=params, body=body, timeout=timeout)
        if self.recorder is not None and not dry_run:
            self.recorder.wrote(kind, answer)
        return answer

    def update(
        self,
        kind: Kind,
        obj: dict[str, Any],
        *,
        field_manager: str | None = None,
        timeout: float | None = None,
    ) -> dict[str, Any]:
        """Replace ``obj`` (PUT). Its ``metadata.resourceVersion`` guards against lost updates:
        a stale one raises ``errors.Conflict``."""
        return self._put(kind, obj, "", field_manager, timeout)

    def update_status(
        self, kind: Kind, obj: dict[str, Any], *, field_manager: str | None = None
    ) -> dict[str, Any]:
        """Replace the status subresource of ``obj`` (PUT ``.../status``)."""
        return self._put(kind, obj, "/status", field_manager, None)

    def _put(
        self, kind: Kind, obj: dict[str, Any], suffix: str, field_manager: str | None, timeout: float | None
    ) -> dict[str, Any]:
        name = obj["metadata"]["name"]
        path = kind.path(self._namespace_of(kind, obj, None), name) + suffix
        body = {"apiVersion": kind.api_version, "kind": kind.kind, **obj}
        params = self._write_params(field_manager, False)
        answer = self._json("PUT", path, params=params, body=body, timeout=timeout)
        if self.recorder is not None:
            self.recorder.wrote(kind, answer)
        return answer

    def patch(
        self,
        kind: Kind,
        name: str,
        body: Any,
        namespace: str | None = None,
        *,
        patch_type: PatchType = "merge",
        field_manager: str | None = None,
        force: bool = False,
        subresource: str | None = None,
    ) -> dict[str, Any]:
        """Patch one object; returns the result.

        ``patch_type``: ``merge`` (RFC 7386), ``json`` (RFC 6902, ``body`` is a list of
        operations), ``strategic`` (built-in kinds only) or ``apply`` (server-side apply; ``body``
        is the full intent with apiVersion and kind, ``force`` takes fields from other managers).
        ``subresource`` is for example ``"status"``.
        """
        path = kind.path(namespace if kind.namespaced else None, name)
        if subresource:
            path = f"{path}/{subresource}"
        params = self._write_params(field_manager, False)
        if patch_type == "apply":
            if force:
                params["force"] = "true"
            if isinstance(body, dict):
                body = {"apiVersion": kind.api_version, "kind": kind.kind, **body}
        answer = self._json("PATCH", path, params=params, body=body, content_type=_CONTENT_TYPES[patch_type])
        if self.recorder is not None:
            self.recorder.wrote(kind, answer)
        return answer

    def delete(
        self,
        kind: Kind,
        name: str,
        namespace: str | None = None,
        *,
        propagation_policy: Literal["Foreground", "Background", "Orphan"] | None = None,
        grace_period_seconds: int | None = None,
        preconditions: dict[str, str] | None = None,
        ignore_not_found: bool = False,
    ) -> dict[str, Any] | None:
        """Delete one object; returns what the server answered (the object while finalizers
        hold it, else a Status). ``preconditions`` is ``{"uid": ...}`` and/or
        ``{"resourceVersion": ...}``. With ``ignore_not_found`` a missing object returns None."""
        options: dict[str, Any] = {"apiVersion": "v1", "kind": "DeleteOptions"}
        if propagation_policy:
            options["propagationPolicy"] = propagation_policy
        if grace_period_seconds is not None:
            options["gracePeriodSeconds"] = grace_period_seconds
        if preconditions:
            options["preconditions"] = preconditions
        scope = namespace if kind.namespaced else None
        key = f"{scope}/{name}" if scope else name
        if self.recorder is not None:
            self.recorder.deleting(kind, key, (preconditions or {}).get("uid", ""))
        try:
            answer = self._json("DELETE", kind.path(scope, name), body=options)
        except BaseException as error:
            if self.recorder is not None:  # not deleted by us (NotFound: by someone else before)
                self.recorder.delete_failed(kind, key)
            if ignore_not_found and isinstance(error, errors.NotFound):
                return None
            raise
        if self.recorder is not None:
            self.recorder.deleted(kind, key, answer)
        return answer

    def evict(self, name: str, namespace: str, delete_options: dict[str, Any] | None = None) -> None:
        """Evict a Pod through the policy/v1 Eviction subresource, honouring disruption budgets.

        A budget that forbids the eviction raises ``errors.TooManyRequests``.
        """
        body: dict[str, Any] = {
            "apiVersion": "policy/v1",
            "kind": "Eviction",
            "metadata": {"name": name, "namespace": namespace},
        }
        if delete_options:
            body["deleteOptions"] = delete_options
        self.request("POST", f"/api/v1/namespaces/{namespace}/pods/{name}/eviction", body=body)

    def service_account_token(
        self, name: str, namespace: str, audiences: Sequence[str], expiration_seconds: int = 600
    ) -> str:
        """A token for the ServiceAccount through the authentication.k8s.io/v1 TokenRequest
        subresource (a write: the fence applies). Never logged."""
        body = {
            "apiVersion": "authentication.k8s.io/v1",
            "kind": "TokenRequest",
            "spec": {"audiences": list(audiences), "expirationSeconds": expiration_seconds},
        }
        answer = self._json("POST", f"/api/v1/namespaces/{namespace}/serviceaccounts/{name}/token", body=body)
        return str((answer.get("status") or {}).get("token") or "")

    # ---- watch ----------------------------------------------------------------------------
    def watch(
        self,
        kind: Kind,
        namespace: str | None = None,
        *,
        resource_version: str,
        timeout_seconds: int,
        label_selector: str | None = None,
        field_selector: str | None = None,
        allow_bookmarks: bool = True,
        read_timeout: float | None = None,
    ) -> WatchStream:
        """Open a watch from ``resource_version`` that the server ends after ``timeout_seconds``.

        The socket read timeout defaults to the server timeout plus a margin, so only a stream
        that stays silent past the server's own deadline (a dead connection) fails the read.
        """
        params: dict[str, Any] = {
            "watch": "1",
            "resourceVersion": resource_version,
            "timeoutSeconds": str(timeout_seconds),
        }
        if allow_bookmarks:
            params["allowWatchBookmarks"] = "true"
        if label_selector:
            params["labelSelector"] = label_selector
        if field_selector:
            params["fieldSelector"] = field_selector
        read = read_timeout if read_timeout is not None else timeout_seconds + WATCH_READ_MARGIN
        response = self._send(
            "GET", kind.path(namespace), params, None, timeout=(self.timeout[0], read), stream=True
        )
        if response.status >= 400:
            answer = self.transport.answer(response)
            response.release_conn()
            errors.raise_for_status(answer)
        return WatchStream(response)
