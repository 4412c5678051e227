"""The HTTP transport to the API server: two connection pools and nothing else per request.

Owns ``Transport`` (one server, one identity; thread-safe) and ``Response`` (an answered
request: status, headers, body). A call whose whole answer is read (``fetch``: every call but a
watch) goes through the lean HTTP/1.1 pool of ``http1.py``; a watch streams through urllib3's
pool, and so does every call when a proxy is in the way. The TLS context (the cluster's CA, or
insecure-skip-tls-verify, and ``tls-server-name``) and the user's credentials
(``credentials.py``) are set up once, from a pykube-ng ``KubeConfig``; so are
``HTTPS_PROXY``/``NO_PROXY``, read from the environment as client-go's ProxyFromEnvironment
does. A 401 makes a refreshable identity (a token file, an exec
plugin) load again and the request go once more.

Why not a ``requests`` session: the session's per-request machinery (settings and environment
merge, prepared requests, hooks, cookies, adapters) was half of a reconcile's CPU
(``bench/results/profiles``); and urllib3's own per-request cost is why ``fetch`` does not use
it either (``http1.py``).

``guard(check)`` makes both pools call ``check`` before a mutating request's bytes reach the
socket (``fence.guard_pool_manager`` for urllib3's); it applies to every ``Client`` view that
shares this transport.

Side effects: network I/O; see ``credentials.py`` for token files and exec plugins.
"""

from __future__ import annotations

import ssl
import threading
import urllib.request
from collections.abc import Callable, Mapping
from typing import Any, TypeVar
from urllib.parse import urlsplit

import orjson
import pykube
import urllib3
from urllib3.exceptions import HTTPError

from nodewright.runtime.kube import errors
from nodewright.runtime.kube.credentials import Credentials, CredentialsError
from nodewright.runtime.kube.fence import guard_pool_manager, is_mutating
from nodewright.runtime.kube.http1 import ConnectionPool

__all__ = ["Response", "Transport"]

_Answer = TypeVar("_Answer")

UNAUTHORIZED = 401


class Response:
    """An answered request, its body read: the names match ``requests.Response``."""

    __slots__ = ("content", "headers", "reason", "status_code")

    def __init__(self, status_code: int, reason: str, headers: Mapping[str, str], content: bytes) -> None:
        self.status_code = status_code
        self.reason = reason
        self.headers = headers
        self.content = content

    def json(self) -> Any:
        return orjson.loads(self.content)

    @property
    def text(self) -> str:
        return self.content.decode("utf-8", errors="replace")


class Transport:
    """Requests to one API server as one identity, over one connection pool of ``pool_size``."""

    def __init__(self, config: pykube.KubeConfig, *, pool_size: int, user_agent: str = "nodewright") -> None:
        self.config = config
        self.pool_size = pool_size
        self.base_url: str = str(config.cluster["server"]).rstrip("/")
        parts = urlsplit(self.base_url)
        self._prefix = parts.path.rstrip("/")
        self.credentials = Credentials(config.user)
        self.headers: dict[str, str] = {"User-Agent": user_agent}
        """Sent with every request (tests add ``Impersonate-User`` here)."""
        self._lock = threading.Lock()
        self._check: Callable[[str], None] | None = None
        self._generation = -1
        self._manager: urllib3.PoolManager
        self._lean: ConnectionPool | None = None
        self._pool: urllib3.HTTPConnectionPool = self._connect()

    def with_own_pool(self, pool_size: int) -> Transport:
        """The same server and identity with a pool of its own (and no fence guard)."""
        return Transport(self.config, pool_size=pool_size, user_agent=self.headers["User-Agent"])

    def guard(self, check: Callable[[str], None]) -> None:
        """Make every mutating request on this transport call ``check`` at the last moment."""
        with self._lock:
            self._check = check
            guard_pool_manager(self._manager, check)
            self._pool = self._manager.connection_from_url(self.base_url)

    def request(
        self,
        method: str,
        target: str,
        *,
        body: bytes | None,
        headers: dict[str, str],
        timeout: urllib3.Timeout,
        stream: bool = False,
    ) -> urllib3.BaseHTTPResponse:
        """Send ``method target`` (a path with its query); the answer whatever its status.

        With ``stream`` the body is left to the caller to read and release. Raises
        ``errors.ConnectionFailed`` when no answer came."""
        return self._authenticated(
            lambda: self._send(method, target, body, headers, timeout=timeout, stream=stream),
            lambda response: response.status,
            _release,
        )

    def fetch(
        self,
        method: str,
        target: str,
        *,
        body: bytes | None,
        headers: dict[str, str],
        timeout: urllib3.Timeout,
    ) -> Response:
        """Send ``method target`` and read the whole answer, whatever its status (a 401 with
        newer credentials found is sent once more). Raises ``errors.ConnectionFailed`` when no
        answer came."""
        if self._lean is None:  # a proxy is in the way: urllib3's ProxyManager knows the way
            return self.answer(self.request(method, target, body=body, headers=headers, timeout=timeout))
        return self._authenticated(
            lambda: self._fetch(method, target, body, headers, timeout),
            lambda answer: answer.status_code,
            lambda _answer: None,  # read whole: nothing to release
        )

    def _authenticated(
        self,
        send: Callable[[], _Answer],
        status_of: Callable[[_Answer], int],
        release: Callable[[_Answer], None],
    ) -> _Answer:
        """``send`` with the current credentials; after a 401, once more when newer ones were
        found. Connections are made again first whenever the client certificate changed."""
        if self._generation != self.credentials.certificate_generation:
            self._reconnect()
        answer = send()
        if status_of(answer) == UNAUTHORIZED and self._refreshed():
            release(answer)
            if self._generation != self.credentials.certificate_generation:
                self._reconnect()
            answer = send()
        return answer

    def _fetch(
        self, method: str, target: str, body: bytes | None, headers: dict[str, str], timeout: urllib3.Timeout
    ) -> Response:
        pool, check = self._lean, self._check
        assert pool is not None
        path = self._prefix + target
        before_send = None
        bare_path = path.split("?", 1)[0]
        if check is not None and is_mutating(method, bare_path):
            operation = f"{method.upper()} {bare_path}"

            def before_send() -> None:
                check(operation)  # raises: the request never leaves

        try:
            answer = pool.request(
                method,
                path,
                self._all_headers(headers),
                body,
                timeout=(_seconds(timeout.connect_timeout), _seconds(timeout.read_timeout)),
                before_send=before_send,
            )
        except (OSError, ValueError) as error:
            raise errors.ConnectionFailed(f"{method} {target.split('?', 1)[0]} failed: {error}") from error
        return Response(answer.status, answer.reason, answer.headers, answer.body)

    def _all_headers(self, headers: dict[str, str]) -> dict[str, str]:
        all_headers = {**self.headers, **headers}
        try:
            authorization = self.credentials.header()
        except CredentialsError as error:  # a plugin that failed: no request can be authenticated
            raise errors.Unauthorized(str(error), code=UNAUTHORIZED) from error
        if authorization is not None:
            all_headers["Authorization"] = authorization
        return all_headers

    def _refreshed(self) -> bool:
        """After a 401: whether newer credentials were found (a failing plugin finds none)."""
        try:
            return self.credentials.refresh()
        except CredentialsError:
            return False

    def answer(self, response: urllib3.BaseHTTPResponse) -> Response:
        """The read answer of a non-streamed request."""
        return Response(response.status, response.reason or "", response.headers, response.data)

    def _send(
        self,
        method: str,
        target: str,
        body: bytes | None,
        headers: dict[str, str],
        *,
        timeout: urllib3.Timeout,
        stream: bool,
    ) -> urllib3.BaseHTTPResponse:
        all_headers = self._all_headers(headers)
        try:
            return self._pool.urlopen(
                method,
                self._prefix + target,
                body=body,
                headers=all_headers,
                retries=False,
                redirect=False,
                timeout=timeout,
                preload_content=not stream,
            )
        except (HTTPError, OSError) as error:
            raise errors.ConnectionFailed(f"{method} {target.split('?', 1)[0]} failed: {error}") from error

    def _reconnect(self) -> None:
        with self._lock:
            if self._generation == self.credentials.certificate_generation:
                return
            self._manager.clear()
            if self._lean is not None:
                self._lean.close()
            self._pool = self._connect()

    def _connect(self) -> urllib3.HTTPConnectionPool:
        """A pool manager for the server (through the environment's proxy, if any) and its pool.

        Called under ``_lock`` or from ``__init__``."""
        self._generation = self.credentials.certificate_generation
        parts = urlsplit(self.base_url)
        options: dict[str, Any] = {"maxsize": self.pool_size, "block": False}
        context, server_name = None, self.config.cluster.get("tls-server-name")
        if parts.scheme == "https":
            context = options["ssl_context"] = self._ssl_context()
            if server_name:
                options["server_hostname"] = options["assert_hostname"] = str(server_name)
        proxy = _proxy_for(parts.scheme, parts.hostname or "")
        self._lean = (
            None
            if proxy
            else ConnectionPool(
                parts.hostname or "localhost",
                parts.port or (443 if context is not None else 80),
                size=self.pool_size,
                context=context,
                server_hostname=str(server_name) if server_name and context is not None else None,
            )
        )
        manager = (
            urllib3.ProxyManager(proxy, num_pools=1, **options)
            if proxy
            else urllib3.PoolManager(1, **options)
        )
        if self._check is not None:
            guard_pool_manager(manager, self._check)
        self._manager = manager
        return manager.connection_from_url(self.base_url)

    def _ssl_context(self) -> ssl.SSLContext:
        cluster = self.config.cluster
        authority = cluster.get("certificate-authority")
        cadata = authority.bytes().decode() if authority is not None else None
        context = ssl.create_default_context(cadata=cadata)
        if cluster.get("insecure-skip-tls-verify"):
            context.check_hostname = False
            context.verify_mode = ssl.CERT_NONE
        self.credentials.load_client_certificate(context)
        return context


def _proxy_for(scheme: str, host: str) -> str | None:
    """The proxy URL the environment names for ``scheme`` unless NO_PROXY exempts ``host``."""
    proxies = urllib.request.getproxies_environment()
    proxy = proxies.get(scheme)
    if not proxy or urllib.request.proxy_bypass_environment(host, proxies):  # type: ignore[attr-defined]
        return None
    return proxy


def _seconds(value: object) -> float | None:
    """A urllib3 ``Timeout`` part as seconds (None: wait for ever, as urllib3's default)."""
    return float(value) if isinstance(value, (int, float)) else None


def _release(response: urllib3.BaseHTTPResponse) -> None:
    response.drain_conn()
    response.release_conn()
