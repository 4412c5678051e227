"""The harness's own access to the API server, independent of nodewright's runtime.

Owns ``Api`` (a thread-safe JSON-over-HTTPS client on a pykube-ng session with a large
connection pool), ``create_many`` (parallel creates that record each object's client-side send
time), ``install_crd``, and ``ConvergenceWatch``: a background list-and-watch of one
namespace's Widgets that notes the moment each one is first seen converged. The harness uses
it to judge every contender the same way, whatever the contender is built on.

Side effects: network I/O to the API server; ``ConvergenceWatch`` runs a thread.
"""

from __future__ import annotations

import contextlib
import json
import socket
import threading
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pykube
import requests

from bench.workload import is_converged

__all__ = ["Api", "ApiError", "ConvergenceWatch", "create_many", "install_crd"]


class ApiError(RuntimeError):
    """The API server answered with an error status."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(f"{status}: {message}")
        self.status = status


class Api:
    """JSON requests to one API server, safe to share between threads."""

    def __init__(self, kubeconfig: Path, pool_size: int = 64) -> None:
        self.kubeconfig = kubeconfig
        config = pykube.KubeConfig.from_file(str(kubeconfig))
        adapter = pykube.http.KubernetesHTTPAdapter(config, pool_connections=4, pool_maxsize=pool_size)
        self.http = pykube.HTTPClient(config, http_adapter=adapter)
        self.session: requests.Session = self.http.session
        self.base_url: str = self.http.url.rstrip("/")

    def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        params: dict[str, str] | None = None,
        content_type: str = "application/json",
        timeout: float = 60.0,
    ) -> dict[str, Any]:
        """Send one request; return the decoded JSON answer or raise ``ApiError``."""
        data = None if body is None else json.dumps(body, separators=(",", ":")).encode()
        response = self.session.request(
            method,
            self.base_url + path,
            data=data,
            params=params,
            headers={"Content-Type": content_type, "Accept": "application/json"},
            timeout=timeout,
        )
        if response.status_code >= 400:
            raise ApiError(response.status_code, response.text[:300])
        result: dict[str, Any] = response.json() if response.content else {}
        return result

    def create_namespace(self, name: str) -> None:
        self.request("POST", "/api/v1/namespaces", {"metadata": {"name": name}})

    def delete_namespace(self, name: str) -> None:
        """Delete the namespace's Widgets and Pods, then the namespace (best effort)."""
        for path in (
            f"/apis/bench.nodewright.io/v1alpha1/namespaces/{name}/widgets",
            f"/api/v1/namespaces/{name}/pods",
            f"/api/v1/namespaces/{name}",
        ):
            with contextlib.suppress(ApiError, requests.RequestException):
                self.request("DELETE", path, timeout=600)

    def list_all(self, path: str, page_size: int = 500) -> tuple[list[dict[str, Any]], str]:
        """Every item under ``path`` (paginated) and the list's resourceVersion."""
        items: list[dict[str, Any]] = []
        params = {"limit": str(page_size)}
        while True:
            page = self.request("GET", path, params=params)
            items.extend(page.get("items") or ())
            metadata = page.get("metadata") or {}
            if not metadata.get("continue"):
                return items, str(metadata.get("resourceVersion", ""))
            params = {"limit": str(page_size), "continue": metadata["continue"]}


def install_crd(api: Api, crd: dict[str, Any], timeout: float = 60.0) -> None:
    """Create the CRD unless it exists and wait until it is Established and served."""
    name = crd["metadata"]["name"]
    try:
        api.request("POST", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", crd)
    except ApiError as error:
        if error.status != 409:
            raise
    group, version = crd["spec"]["group"], crd["spec"]["versions"][0]["name"]
    plural = crd["spec"]["names"]["plural"]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        current = api.request("GET", f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{name}")
        conditions = (current.get("status") or {}).get("conditions") or ()
        if any(c.get("type") == "Established" and c.get("status") == "True" for c in conditions):
            with contextlib.suppress(ApiError):
                api.request("GET", f"/apis/{group}/{version}/{plural}", params={"limit": "1"})
                return
        time.sleep(0.2)
    raise TimeoutError(f"CRD {name} was not established within {timeout:g} s")


def create_many(
    api: Api,
    collection_path: str,
    bodies: Iterable[dict[str, Any]],
    *,
    workers: int = 16,
    field_manager: str = "bench-harness",
) -> dict[str, float]:
    """POST every body with ``workers`` threads; returns name -> monotonic time it was sent.

    Side effects: creates the objects. Raises the first error met.
    """
    sent: dict[str, float] = {}
    lock = threading.Lock()
    params = {"fieldManager": field_manager}

    def create(body: dict[str, Any]) -> None:
        started = time.monotonic()
        api.request("POST", collection_path, body, params=params)
        with lock:
            sent[body["metadata"]["name"]] = started

    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="create") as pool:
        for future in [pool.submit(create, body) for body in bodies]:
            future.result()
    return sent


class ConvergenceWatch:
    """Lists, then watches, one collection and records when each object is first converged.

    ``converged`` maps name -> monotonic time first seen converged (objects converged already
    at the first list count from that moment). ``wait_for(names, timeout)`` blocks until all
    of ``names`` converged.
    """

    def __init__(
        self,
        api: Api,
        collection_path: str,
        predicate: Callable[[dict[str, Any]], bool] = is_converged,
    ) -> None:
        self.api = api
        self.path = collection_path
        self.predicate = predicate
        self.converged: dict[str, float] = {}
        self.events = 0
        self._condition = threading.Condition()
        self._stopping = threading.Event()
        self._response: requests.Response | None = None
        self._thread = threading.Thread(target=self._run, name="convergence-watch", daemon=True)
        self._listed = threading.Event()
        self.error: BaseException | None = None

    def start(self) -> ConvergenceWatch:
        self._thread.start()
        if not self._listed.wait(60):
            raise TimeoutError("the convergence watch could not list")
        return self

    def stop(self) -> None:
        self._stopping.set()
        response = self._response
        if response is not None:
            raw = getattr(response.raw, "_connection", None) or getattr(response.raw, "connection", None)
            sock = getattr(raw, "sock", None)
            if sock is not None:
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)
            with contextlib.suppress(Exception):
                response.close()
        self._thread.join(10)

    def count(self, names: Iterable[str]) -> int:
        with self._condition:
            return sum(1 for name in names if name in self.converged)

    def wait_for(
        self, names: Iterable[str], timeout: float, alive: Callable[[], bool] = lambda: True
    ) -> bool:
        """Block until every name converged; False on timeout, if the watch died, or once
        ``alive()`` turns False (checked every second)."""
        wanted = list(names)
        deadline = time.monotonic() + timeout
        with self._condition:
            while True:
                missing = [name for name in wanted if name not in self.converged]
                if not missing:
                    return True
                wanted = missing
                remaining = deadline - time.monotonic()
                if remaining <= 0 or self.error is not None or not alive():
                    return False
                self._condition.wait(min(remaining, 1.0))

    def _note(self, obj: dict[str, Any], now: float) -> None:
        name = (obj.get("metadata") or {}).get("name", "")
        if name and name not in self.converged and self.predicate(obj):
            with self._condition:
                self.converged[name] = now
                self._condition.notify_all()

    def _run(self) -> None:
        try:
            items, resource_version = self.api.list_all(self.path)
            now = time.monotonic()
            for item in items:
                self._note(item, now)
            self._listed.set()
            while not self._stopping.is_set():
                resource_version = self._watch(resource_version)
        except BaseException as error:
            if not self._stopping.is_set():
                self.error = error
                with self._condition:
                    self._condition.notify_all()

    def _watch(self, resource_version: str) -> str:
        params = {
            "watch": "1",
            "resourceVersion": resource_version,
            "allowWatchBookmarks": "true",
            "timeoutSeconds": "3600",
        }
        response = self.api.session.get(
            self.api.base_url + self.path, params=params, stream=True, timeout=(10, 3700)
        )
        self._response = response
        try:
            if response.status_code >= 400:
                raise ApiError(response.status_code, response.text[:300])
            for line in response.iter_lines(chunk_size=65536):
                if not line:
                    continue
                now = time.monotonic()
                event = json.loads(line)
                obj = event.get("object") or {}
                if event.get("type") == "ERROR":
                    raise ApiError(int(obj.get("code", 500)), str(obj.get("message")))
                self.events += 1
                resource_version = str((obj.get("metadata") or {}).get("resourceVersion", resource_version))
                if event.get("type") in ("ADDED", "MODIFIED"):
                    self._note(obj, now)
        except (requests.RequestException, OSError, AttributeError, ValueError):
            if not self._stopping.is_set():
                raise
        finally:
            self._response = None
            response.close()
        return resource_version
