"""Who may read ``/metrics``: the API server decides, as controller-runtime's
``WithAuthenticationAndAuthorization`` filter does.

Owns ``MetricsAuthorizer``: a request's bearer token is checked with a TokenReview
(authentication.k8s.io/v1) and the user it names with a SubjectAccessReview for the
non-resource URL and verb (authorization.k8s.io/v1). No token or an unknown token answers 401,
a known user without the permission 403, an API server that cannot be asked 503. Decisions are
cached for ``cache_seconds`` under a SHA-256 of the token (the token itself is never kept or
logged). Side effects: two POSTs to the API server per uncached token.

The manager's ServiceAccount needs ``create`` on tokenreviews and subjectaccessreviews
(config/rbac/metrics_auth_role.yaml); readers need ``get`` on the URL (ClusterRole
nodewright-metrics-reader).
"""

from __future__ import annotations

import hashlib
import threading
import time
from dataclasses import dataclass
from typing import Any

from nodewright.runtime.kube import errors
from nodewright.runtime.kube.client import Client
from nodewright.runtime.observe.logs import get_logger

__all__ = ["Decision", "MetricsAuthorizer"]

log = get_logger(__name__)

TOKEN_REVIEWS = "/apis/authentication.k8s.io/v1/tokenreviews"  # noqa: S105 - a URL path, no secret
SUBJECT_ACCESS_REVIEWS = "/apis/authorization.k8s.io/v1/subjectaccessreviews"


@dataclass(frozen=True, slots=True)
class Decision:
    """The HTTP status to answer with (200, 401, 403 or 503) and a one-line reason."""

    status: int
    reason: str


class MetricsAuthorizer:
    """Authenticates and authorizes scrapes through the API server, with a short cache."""

    def __init__(self, client: Client, *, cache_seconds: float = 10.0) -> None:
        self._client = client
        self._cache_seconds = cache_seconds
        self._cache: dict[tuple[str, str, str], tuple[float, Decision]] = {}
        self._lock = threading.Lock()

    def decide(self, authorization: str | None, path: str, verb: str = "get") -> Decision:
        """The decision for one request's ``Authorization`` header, URL path and verb."""
        scheme, _, token = (authorization or "").partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            return Decision(401, "Unauthorized: a bearer token is required")
        key = (hashlib.sha256(token.strip().encode()).hexdigest(), path, verb)
        now = time.monotonic()
        with self._lock:
            cached = self._cache.get(key)
            if cached is not None and cached[0] > now:
                return cached[1]
        decision = self._review(token.strip(), path, verb)
        if decision.status != 503:  # never cache "could not ask"
            with self._lock:
                if len(self._cache) > 1024:
                    self._cache.clear()
                self._cache[key] = (now + self._cache_seconds, decision)
        return decision

    def _review(self, token: str, path: str, verb: str) -> Decision:
        try:
            user = self._authenticate(token)
            if user is None:
                return Decision(401, "Unauthorized: the token was not accepted")
            if not self._authorize(user, path, verb):
                name = user.get("username", "")
                return Decision(403, f"Forbidden: user {name!r} may not {verb} {path}")
        except (errors.ApiError, OSError, ValueError) as error:
            log.warning("Failed to review a metrics request", error=type(error).__name__)
            return Decision(503, "Service Unavailable: could not reach the API server to authorize")
        return Decision(200, "OK")

    def _authenticate(self, token: str) -> dict[str, Any] | None:
        review = self._client.request(
            "POST",
            TOKEN_REVIEWS,
            body={"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview", "spec": {"token": token}},
        ).json()
        status = review.get("status") or {}
        if not status.get("authenticated"):
            return None
        user: dict[str, Any] = status.get("user") or {}
        return user

    def _authorize(self, user: dict[str, Any], path: str, verb: str) -> bool:
        spec: dict[str, Any] = {
            "user": user.get("username", ""),
            "groups": user.get("groups") or [],
            "nonResourceAttributes": {"path": path, "verb": verb},
        }
        if user.get("uid"):
            spec["uid"] = user["uid"]
        if user.get("extra"):
            spec["extra"] = user["extra"]
        review = self._client.request(
            "POST",
            SUBJECT_ACCESS_REVIEWS,
            body={"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview", "spec": spec},
        ).json()
        return bool((review.get("status") or {}).get("allowed"))
