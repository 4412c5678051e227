"""Tracing: the OpenTelemetry ``TracerProvider`` the runtime's spans go to.

Owns one process-wide provider (created on first use, with no exporter unless asked: OTLP is
not a dependency) and ``tracer()``, which the controller uses to open one span per reconcile.
``configure_tracing(console=True)`` prints finished spans; ``add_span_processor`` lets tests
and deployments attach their own exporter. The global OpenTelemetry provider is left alone.
"""

from __future__ import annotations

import threading

from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import ConsoleSpanExporter, SimpleSpanProcessor
from opentelemetry.trace import Tracer

__all__ = ["add_span_processor", "configure_tracing", "tracer", "tracer_provider"]

_lock = threading.Lock()
_provider: TracerProvider | None = None


def tracer_provider() -> TracerProvider:
    """The runtime's provider, created on first use with no exporter."""
    global _provider  # noqa: PLW0603 - one provider per process, created lazily
    with _lock:
        if _provider is None:
            _provider = TracerProvider(
                resource=Resource.create({"service.name": "nodewright"}), shutdown_on_exit=False
            )
        return _provider


def configure_tracing(*, console: bool = False) -> TracerProvider:
    """Set up the provider; with ``console`` every finished span is printed to stdout."""
    provider = tracer_provider()
    if console:
        provider.add_span_processor(SimpleSpanProcessor(ConsoleSpanExporter()))
    return provider


def add_span_processor(processor: SpanProcessor) -> None:
    """Send finished spans to ``processor`` as well (an exporter, or a test's in-memory sink)."""
    tracer_provider().add_span_processor(processor)


def tracer(name: str = "nodewright.runtime") -> Tracer:
    """A tracer on the runtime's provider."""
    return tracer_provider().get_tracer(name)
