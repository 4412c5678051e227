"""Tracing: the OpenTelemetry ``TracerProvider`` the runtime's spans go to.

Owns one process-wide provider (created on first use, with no exporter unless asked: OTLP is
not a dependency) and ``tracer()``, which the controller uses to open one span per reconcile.
``configure_tracing(console=True)`` prints finished spans; ``add_span_processor`` lets tests
and deployments attach their own exporter. Until a processor is attached nobody would see a
span, so ``tracer()`` hands out a no-op tracer (a recorded span cost 3 % of a reconcile's CPU) and
``recording()`` says so, for callers that can skip even the no-op span; tracers are cached per
name. The global OpenTelemetry provider is left alone.
"""

from __future__ import annotations

import threading

from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import ConsoleSpanExporter, SimpleSpanProcessor
from opentelemetry.trace import NoOpTracer, Tracer

__all__ = ["add_span_processor", "configure_tracing", "recording", "tracer", "tracer_provider"]

_lock = threading.Lock()
_provider: TracerProvider | None = None
_tracers: dict[str, Tracer] = {}
"""Tracers by name; emptied when a processor is attached (then they record)."""
_recording = False
"""Whether a processor was attached through ``add_span_processor``."""
_NO_OP = NoOpTracer()


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
        add_span_processor(SimpleSpanProcessor(ConsoleSpanExporter()))
    return provider


def add_span_processor(processor: SpanProcessor) -> None:
    """Send finished spans to ``processor`` as well (an exporter, or a test's in-memory sink)."""
    global _recording  # noqa: PLW0603 - one provider per process
    tracer_provider().add_span_processor(processor)
    with _lock:
        _recording = True
        _tracers.clear()


def recording() -> bool:
    """Whether spans go anywhere (a processor is attached): callers may skip making them."""
    return _recording


def tracer(name: str = "nodewright.runtime") -> Tracer:
    """A tracer on the runtime's provider; a no-op one while no processor is attached."""
    found = _tracers.get(name)
    if found is not None:
        return found
    provider = tracer_provider()
    with _lock:
        return _tracers.setdefault(name, provider.get_tracer(name) if _recording else _NO_OP)
