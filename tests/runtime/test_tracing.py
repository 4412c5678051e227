"""Spans cost nothing until someone can see them: before a processor is attached ``tracer()``
hands out a no-op tracer; once one is attached, reconcile spans record and reach it. Run in a
fresh interpreter, since the provider is process-wide."""

from __future__ import annotations

import subprocess
import sys

PROGRAM = """
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from nodewright.runtime import tracing

with tracing.tracer().start_as_current_span("before") as span:
    print("before", span.is_recording())
assert tracing.tracer() is tracing.tracer()
exporter = InMemorySpanExporter()
tracing.add_span_processor(SimpleSpanProcessor(exporter))
with tracing.tracer().start_as_current_span("after") as span:
    print("after", span.is_recording())
print("exported", [s.name for s in exporter.get_finished_spans()])
"""


def test_spans_record_only_once_a_processor_is_attached() -> None:
    done = subprocess.run(
        [sys.executable, "-c", PROGRAM], capture_output=True, text=True, timeout=60, check=True
    )
    assert done.stdout.splitlines() == ["before False", "after True", "exported ['after']"], done.stderr
