"""Typed API errors: what the Kubernetes API server answered, as exceptions.

Owns ``ApiError`` and its subclasses, chosen from the ``reason`` of the ``Status`` object the
server returns (``NotFound``, ``AlreadyExists``, ``Conflict``, ``Expired``...) and only from the
HTTP code when the body carries no reason. Two 409s differ by reason: ``AlreadyExists`` is not a
``Conflict``, so ``retry_on_conflict`` never retries a create. ``is_transient`` names the ones
that are expected and pass (connection lost, server restarting or busy, Conflict). The client
(``client.py``) raises these for every failed request; the reflector (``informer.py``) raises
them for ``ERROR`` watch events, which arrive as a ``Status`` inside a 200 stream.
"""

# ruff: noqa: N818 - the names mirror the Kubernetes Status reasons (k8s.io/apimachinery errors)

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from typing import Any, Protocol

__all__ = [
    "AlreadyExists",
    "ApiError",
    "BadRequest",
    "Conflict",
    "ConnectionFailed",
    "Forbidden",
    "Gone",
    "HttpAnswer",
    "InternalError",
    "Invalid",
    "MethodNotAllowed",
    "NotFound",
    "ServerTimeout",
    "ServiceUnavailable",
    "TooManyRequests",
    "Unauthorized",
    "error_from_status",
    "is_resource_version_too_large",
    "is_transient",
    "raise_for_status",
]


class ApiError(Exception):
    """A request the API server refused or failed.

    ``code`` is the HTTP status, ``reason`` the Status reason (``"NotFound"``, ``"Expired"``...),
    ``message`` the server's human-readable text and ``status`` the whole Status body (empty
    when the server sent something else, such as an HTML error page from a proxy).
    """

    default_code = 0

    def __init__(
        self,
        message: str,
        *,
        code: int | None = None,
        reason: str = "",
        status: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(message)
        self.code = self.default_code if code is None else code
        self.reason = reason
        self.message = message
        self.status: dict[str, Any] = status or {}

    @property
    def details(self) -> dict[str, Any]:
        """The Status ``details`` (name, kind, causes, retryAfterSeconds), or an empty dict."""
        details = self.status.get("details")
        return details if isinstance(details, dict) else {}

    def __str__(self) -> str:
        return f"{self.code} {self.reason or type(self).__name__}: {self.message}"


class BadRequest(ApiError):
    """400: the request was malformed (for example an unparsable selector or patch)."""

    default_code = 400


class Unauthorized(ApiError):
    """401: the credentials were missing or rejected."""

    default_code = 401


class Forbidden(ApiError):
    """403: the caller is authenticated but RBAC or an admission rule refused the request."""

    default_code = 403


class NotFound(ApiError):
    """404: the object (or the resource type) does not exist."""

    default_code = 404


class MethodNotAllowed(ApiError):
    """405: the resource does not support this verb."""

    default_code = 405


class Conflict(ApiError):
    """409 Conflict: the write lost an optimistic-concurrency race (stale resourceVersion)."""

    default_code = 409


class AlreadyExists(ApiError):
    """409 AlreadyExists: a create found an object of the same name. Not a ``Conflict``."""

    default_code = 409


class Gone(ApiError):
    """410 Gone or Expired: the resourceVersion or continue token was compacted away; relist."""

    default_code = 410


class Invalid(ApiError):
    """422: validation failed; ``causes`` says which fields."""

    default_code = 422

    @property
    def causes(self) -> list[dict[str, Any]]:
        causes = self.details.get("causes")
        return causes if isinstance(causes, list) else []


class TooManyRequests(ApiError):
    """429: throttled, or an eviction blocked by a PodDisruptionBudget.

    ``retry_after`` is the server's advice in seconds (``Retry-After`` header or the Status
    ``details.retryAfterSeconds``), or None.
    """

    default_code = 429

    def __init__(
        self,
        message: str,
        *,
        code: int | None = None,
        reason: str = "",
        status: dict[str, Any] | None = None,
        retry_after: float | None = None,
    ) -> None:
        super().__init__(message, code=code, reason=reason, status=status)
        if retry_after is None:
            seconds = self.details.get("retryAfterSeconds")
            retry_after = float(seconds) if isinstance(seconds, int | float) else None
        self.retry_after = retry_after


class InternalError(ApiError):
    """500: the server failed."""

    default_code = 500


class ServiceUnavailable(ApiError):
    """503: the server (or an aggregated API behind it) is not available right now."""

    default_code = 503


class ServerTimeout(ApiError):
    """504, or reason Timeout/ServerTimeout: the server gave up; the request may be retried."""

    default_code = 504


_BY_REASON: dict[str, type[ApiError]] = {
    "BadRequest": BadRequest,
    "Unauthorized": Unauthorized,
    "Forbidden": Forbidden,
    "NotFound": NotFound,
    "MethodNotAllowed": MethodNotAllowed,
    "Conflict": Conflict,
    "AlreadyExists": AlreadyExists,
    "Gone": Gone,
    "Expired": Gone,
    "Invalid": Invalid,
    "TooManyRequests": TooManyRequests,
    "InternalError": InternalError,
    "ServiceUnavailable": ServiceUnavailable,
    "Timeout": ServerTimeout,
    "ServerTimeout": ServerTimeout,
}

_BY_CODE: dict[int, type[ApiError]] = {
    400: BadRequest,
    401: Unauthorized,
    403: Forbidden,
    404: NotFound,
    405: MethodNotAllowed,
    409: Conflict,
    410: Gone,
    422: Invalid,
    429: TooManyRequests,
    500: InternalError,
    503: ServiceUnavailable,
    504: ServerTimeout,
}


def error_from_status(
    status: dict[str, Any], code: int | None = None, retry_after: float | None = None
) -> ApiError:
    """The typed error for one ``Status`` object (from a response body or an ERROR watch event).

    The reason decides the class; the HTTP code is the fallback for reasons we do not know.
    """
    reason = str(status.get("reason") or "")
    if code is None:
        raw_code = status.get("code")
        code = raw_code if isinstance(raw_code, int) else 0
    message = str(status.get("message") or reason or f"HTTP {code}")
    error_type = _BY_REASON.get(reason) or _BY_CODE.get(code) or ApiError
    if error_type is TooManyRequests:
        return TooManyRequests(message, code=code, reason=reason, status=status, retry_after=retry_after)
    return error_type(message, code=code, reason=reason, status=status)


class HttpAnswer(Protocol):
    """What ``raise_for_status`` reads of an answered request (``transport.Response``)."""

    status_code: int
    reason: str
    headers: Mapping[str, str]
    content: bytes

    def json(self) -> Any: ...

    @property
    def text(self) -> str: ...


def raise_for_status(response: HttpAnswer) -> None:
    """Raise the typed ``ApiError`` for a failed response; return quietly for 2xx and 3xx."""
    if response.status_code < 400:
        return
    status: dict[str, Any] = {}
    with contextlib.suppress(ValueError):
        body = response.json()
        if isinstance(body, dict) and body.get("kind") == "Status":
            status = body
    retry_after: float | None = None
    header = response.headers.get("Retry-After")
    if header:
        with contextlib.suppress(ValueError):
            retry_after = float(header)
    if not status:
        text = response.text[:512].strip() or (response.reason or "")
        status = {"code": response.status_code, "message": text}
    raise error_from_status(status, code=response.status_code, retry_after=retry_after)


def is_resource_version_too_large(error: ApiError) -> bool:
    """Whether the server refused a resourceVersion newer than it has seen (after a restore).

    The reflector relists on this as on 410 Gone.
    """
    causes = error.details.get("causes")
    if isinstance(causes, list) and any(
        isinstance(cause, dict) and cause.get("reason") == "ResourceVersionTooLarge" for cause in causes
    ):
        return True
    return "too large resource version" in error.message.lower()


class ConnectionFailed(ApiError):
    """The server could not be reached or the connection broke (refused, reset, timed out).

    ``code`` is 0: no HTTP answer arrived. Retrying later is the usual cure.
    """

    default_code = 0


def is_transient(error: BaseException) -> bool:
    """Whether ``error`` is an expected, passing failure that retrying later cures and whose
    traceback would say nothing: no answer (``ConnectionFailed``: refused or reset while the API
    server restarts), a busy or failing server (429, any 5xx, such as "apiserver is shutting
    down"), or a write that lost an optimistic-concurrency race (``Conflict``). Callers log these
    in one line, without a traceback."""
    if isinstance(error, ConnectionFailed | TooManyRequests | Conflict):
        return True
    return isinstance(error, ApiError) and error.code >= 500
