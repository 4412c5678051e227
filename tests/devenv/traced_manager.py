"""``nodewright run`` with an in-memory span exporter: what the trace test runs as the manager.

``python -m tests.devenv.traced_manager run --config FILE --spans FILE`` attaches an OpenTelemetry
``InMemorySpanExporter`` to the runtime's tracer provider, appends every finished span to the
spans file once a second as a JSON line (name, trace and span IDs, parent, attributes), and runs
the manager exactly as ``nodewright run`` does on the main thread.
"""

from __future__ import annotations

import json
import sys
import threading
import time
from pathlib import Path

from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from nodewright.controllers.main import main
from nodewright.runtime import tracing


def _dump(exporter: InMemorySpanExporter, path: Path) -> None:
    """Append spans finished since the last pass to ``path`` (side effect), every second."""
    written = 0
    while True:
        spans = exporter.get_finished_spans()
        with path.open("a") as out:
            for span in spans[written:]:
                context = span.get_span_context()
                record = {
                    "name": span.name,
                    "trace": f"{context.trace_id:032x}" if context else "",
                    "span": f"{context.span_id:016x}" if context else "",
                    "parent": f"{span.parent.span_id:016x}" if span.parent else None,
                    "attributes": dict(span.attributes or {}),
                }
                out.write(json.dumps(record, default=str) + "\n")
        written = len(spans)
        time.sleep(1.0)  # the period of the span file's writer


def run(argv: list[str]) -> int:
    index = argv.index("--spans")
    spans_file = Path(argv[index + 1])
    del argv[index : index + 2]
    exporter = InMemorySpanExporter()
    tracing.add_span_processor(SimpleSpanProcessor(exporter))
    threading.Thread(target=_dump, args=(exporter, spans_file), daemon=True, name="span-dump").start()
    return main(argv)


if __name__ == "__main__":
    sys.exit(run(sys.argv[1:]))
