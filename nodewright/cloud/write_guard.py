"""A write guard for the Azure SDK pipeline: a hook that may refuse any mutating ARM request.

Owns ``WriteGuardPolicy``, an azure-core per-retry policy that calls an injected
``WriteGuard`` (``Callable[[str], None]``) with the operation (``"PUT /subscriptions/..."``)
before every attempt whose method is not GET, HEAD or OPTIONS. The guard refuses by raising:
the exception propagates unchanged to the caller and nothing is sent. Because the policy runs
per attempt, after the mutation token bucket and the Retry-After gate (``throttle.py``), a
retry that waited for a token or a Retry-After is checked again at the moment it would go out.

The cloud layer knows nothing of what the guard checks (leadership lives in the runtime layer);
the composition root (``controllers/cloud_access.py``) injects it through ``build_cloud``.
Side effects: none of its own.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from azure.core.pipeline import PipelineRequest
from azure.core.pipeline.policies import SansIOHTTPPolicy

__all__ = ["WriteGuard", "WriteGuardPolicy"]

WriteGuard = Callable[[str], None]
"""Called with ``"METHOD URL-path"`` before a mutating request; raises to refuse it."""

_READ_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})


class WriteGuardPolicy(SansIOHTTPPolicy[Any, Any]):
    """Asks ``guard`` before each mutating attempt; a raise stops the request unsent."""

    def __init__(self, guard: WriteGuard) -> None:
        self.guard = guard

    def on_request(self, request: PipelineRequest[Any]) -> None:
        method = request.http_request.method.upper()
        if method in _READ_METHODS:
            return
        url = request.http_request.url
        path = url.split("?", 1)[0]
        if "://" in path:
            path = "/" + path.split("://", 1)[1].partition("/")[2]
        self.guard(f"{method} {path}")
