"""Spans for ARM requests: ``ArmSpanPolicy`` opens one client span per HTTP attempt to ARM, a
child of whatever span is current (a reconcile's, when the request is made inside one).

``cloud`` knows nothing of the runtime's tracer provider (layers), so whoever builds the clients
hands each policy a ``TracerSource``: a function that returns the tracer to use, or None while
nobody records spans (then the policy costs one call and makes no span; ``no_tracer`` always says
None). A span is named ``ARM <method>
<resource type>`` (``ARM PUT virtualMachineScaleSets``) and carries the method, the URL path
(resource IDs, never the query or headers) and the status code; a status of 400 and above marks it
an error. Uses only the OpenTelemetry API. Side effects: none besides the spans.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any
from urllib.parse import urlsplit

from azure.core.pipeline import PipelineRequest, PipelineResponse
from azure.core.pipeline.policies import HTTPPolicy
from opentelemetry.trace import SpanKind, Status, StatusCode, Tracer

__all__ = ["ArmSpanPolicy", "TracerSource", "no_tracer", "span_name"]

TracerSource = Callable[[], Tracer | None]
"""Returns the tracer ARM spans go to now, or None for no span."""


def no_tracer() -> Tracer | None:
    """The ``TracerSource`` of clients nobody traces."""
    return None


def span_name(method: str, path: str) -> str:
    """``ARM <method> <resource type>``: the last type segment of an ARM path. Pure."""
    segments = [segment for segment in path.split("/") if segment]
    lowered = [segment.lower() for segment in segments]
    kind = "subscription"
    if "providers" in lowered:
        after = segments[lowered.index("providers") + 1 :]
        types = after[1::2]  # namespace, then type, name, type, name ...
        kind = types[-1] if types else (after[0] if after else "providers")
    elif "resourcegroups" in lowered:
        kind = "resourceGroups"
    return f"ARM {method.upper()} {kind}"


class ArmSpanPolicy(HTTPPolicy):  # type: ignore[type-arg]
    """One client span per attempt of ``tracer``'s (put first among the per-retry policies)."""

    def __init__(self, tracer: TracerSource = no_tracer) -> None:
        super().__init__()
        self._tracer = tracer

    def send(self, request: PipelineRequest[Any]) -> PipelineResponse[Any, Any]:
        tracer = self._tracer()
        if tracer is None:
            return self.next.send(request)
        http = request.http_request
        path = urlsplit(http.url).path
        attributes = {
            "http.request.method": http.method,
            "url.path": path,
            "server.address": urlsplit(http.url).hostname or "",
        }
        with tracer.start_as_current_span(
            span_name(http.method, path),
            kind=SpanKind.CLIENT,
            attributes=attributes,
            record_exception=False,
            set_status_on_exception=False,
        ) as span:
            try:
                response = self.next.send(request)
            except Exception as error:
                span.set_status(Status(StatusCode.ERROR, type(error).__name__))
                raise
            status = response.http_response.status_code
            span.set_attribute("http.response.status_code", status)
            if status >= 400:
                span.set_status(Status(StatusCode.ERROR, str(status)))
            return response
