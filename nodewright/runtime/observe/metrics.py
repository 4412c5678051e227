"""Prometheus metrics under controller-runtime's metric names, in a registry per manager.

Owns ``Metrics``: a private ``prometheus_client`` registry, so two managers in one process never
share or clash over series. The controller-runtime and client-go work-queue series, updated on
every reconcile and queue operation, are cheap series of our own (``series.py``); other layers
create OpenTelemetry instruments on the manager's ``metrics.provider``, a ``MeterProvider`` whose
``PrometheusMetricReader`` writes into the same registry. ``Metrics`` hands a work queue its
``QueueMetrics`` hooks (``queue_metrics``), observes queue depth and running times at scrape
time (``watch_queue``), and serves ``/metrics`` over plain HTTP (``serve``; the manager serves
it over HTTPS behind authentication through ``metrics_server.serve_metrics`` unless the config
asks for plain HTTP).

Scraped names equal controller-runtime's: counters carry the ``_total`` name, histograms and
gauges no unit suffix, and the OpenTelemetry exporter's scope labels and ``target_info`` are
turned off.
"""

from __future__ import annotations

import ssl
import sys
import threading
import weakref
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import TYPE_CHECKING, Any

from opentelemetry.exporter.prometheus import PrometheusMetricReader
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.resources import Resource
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

from nodewright.runtime.observe.logs import get_logger
from nodewright.runtime.observe.series import (
    CounterFamily,
    GaugeFamily,
    HistogramFamily,
    ObservedGaugeFamily,
    SeriesCollector,
)

if TYPE_CHECKING:
    from nodewright.runtime.control.workqueue import WorkQueue

__all__ = ["HttpServer", "Metrics", "PlainHandler", "QueueMetricsRecorder", "parse_address"]

log = get_logger(__name__)

RECONCILE_TIME_BUCKETS = (
    0.005, 0.01, 0.025, 0.05, 0.1, 0.15, 0.2, 0.25, 0.3, 0.35, 0.4, 0.45, 0.5, 0.6, 0.7, 0.8, 0.9,
    1.0, 1.25, 1.5, 1.75, 2.0, 2.5, 3.0, 3.5, 4.0, 4.5, 5.0, 6.0, 7.0, 8.0, 9.0, 10.0, 15.0, 20.0,
    25.0, 30.0, 40.0, 50.0, 60.0,
)  # fmt: skip
QUEUE_BUCKETS = tuple(1e-8 * 10**exponent for exponent in range(12))  # 10 ns .. 1000 s
RESULTS = ("success", "error", "requeue", "requeue_after")


class QueueMetricsRecorder:
    """The ``QueueMetrics`` hooks of one named queue, bound to its series."""

    def __init__(self, metrics: Metrics, name: str) -> None:
        attributes = {"name": name}
        self._adds = metrics.workqueue_adds.bind(attributes)
        self._queue_duration = metrics.workqueue_queue_duration.bind(attributes)
        self._work_duration = metrics.workqueue_work_duration.bind(attributes)
        self._retries = metrics.workqueue_retries.bind(attributes)

    def added(self) -> None:
        self._adds.add(1)

    def started(self, queued_seconds: float) -> None:
        self._queue_duration.record(queued_seconds)

    def finished(self, work_seconds: float) -> None:
        self._work_duration.record(work_seconds)

    def retried(self) -> None:
        self._retries.add(1)


class Metrics:
    """The instruments of one manager and the private registry they are scraped from."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self._reader = PrometheusMetricReader(
            disable_target_info=True, scope_info_enabled=False, registry=self.registry
        )
        self.provider = MeterProvider(
            metric_readers=[self._reader],
            resource=Resource.create({"service.name": "nodewright"}),
            shutdown_on_exit=False,
        )
        self.meter = self.provider.get_meter("nodewright.runtime")
        self._queues: weakref.WeakSet[WorkQueue[Any]] = weakref.WeakSet()
        self.series = SeriesCollector()
        self.registry.register(self.series)
        self._add_controller_series(self.series)
        self._add_workqueue_series(self.series)
        self.leader_election_status = self.series.add(
            GaugeFamily(
                "leader_election_master_status",
                "1 while this process leads the named lease, else 0",
                ["name"],
            )
        )

    def _add_controller_series(self, series: SeriesCollector) -> None:
        """controller-runtime's per-controller reconcile metrics."""
        by_result = ["controller", "result"]
        self.reconcile_total = series.add(
            CounterFamily(
                "controller_runtime_reconcile_total", "Total reconciliations per controller", by_result
            )
        )
        self.reconcile_errors = series.add(
            CounterFamily(
                "controller_runtime_reconcile_errors_total", "Reconciliation errors", ["controller"]
            )
        )
        self.terminal_reconcile_errors = series.add(
            CounterFamily(
                "controller_runtime_terminal_reconcile_errors_total",
                "Terminal reconciliation errors",
                ["controller"],
            )
        )
        self.reconcile_panics = series.add(
            CounterFamily(
                "controller_runtime_reconcile_panics_total", "Reconciliation panics", ["controller"]
            )
        )
        self.reconcile_time = series.add(
            HistogramFamily(
                "controller_runtime_reconcile_time_seconds",
                "Length of time per reconciliation",
                ["controller"],
                RECONCILE_TIME_BUCKETS,
            )
        )
        self.max_concurrent_reconciles = series.add(
            GaugeFamily(
                "controller_runtime_max_concurrent_reconciles",
                "Maximum number of concurrent reconciles per controller",
                ["controller"],
            )
        )
        self.active_workers = series.add(
            GaugeFamily(
                "controller_runtime_active_workers",
                "Number of currently used workers per controller",
                ["controller"],
            )
        )

    def _add_workqueue_series(self, series: SeriesCollector) -> None:
        """client-go's work-queue metrics (the gauges read every registered queue)."""
        self.workqueue_adds = series.add(
            CounterFamily("workqueue_adds_total", "Total adds handled by the work queue", ["name"])
        )
        self.workqueue_retries = series.add(
            CounterFamily("workqueue_retries_total", "Total retries handled by the work queue", ["name"])
        )
        self.workqueue_queue_duration = series.add(
            HistogramFamily(
                "workqueue_queue_duration_seconds",
                "Seconds an item stays in the work queue before being requested",
                ["name"],
                QUEUE_BUCKETS,
            )
        )
        self.workqueue_work_duration = series.add(
            HistogramFamily(
                "workqueue_work_duration_seconds",
                "Seconds processing an item from the work queue takes",
                ["name"],
                QUEUE_BUCKETS,
            )
        )
        observed = (
            ("workqueue_depth", "Current depth of the work queue", lambda queue: float(len(queue))),
            (
                "workqueue_unfinished_work_seconds",
                "Seconds of work in progress not yet observed by work_duration",
                lambda queue: queue.unfinished_work_seconds(),
            ),
            (
                "workqueue_longest_running_processor_seconds",
                "Seconds the longest running processor has been running",
                lambda queue: queue.longest_running_seconds(),
            ),
        )
        for name, description, read in observed:
            series.add(ObservedGaugeFamily(name, description, ["name"], self._observe(read)))

    def _observe(
        self, read: Callable[[WorkQueue[Any]], float]
    ) -> Callable[[], list[tuple[dict[str, str], float]]]:
        def observe() -> list[tuple[dict[str, str], float]]:
            return [({"name": queue.name}, read(queue)) for queue in list(self._queues)]

        return observe

    def queue_metrics(self, name: str) -> QueueMetricsRecorder:
        """The hooks a ``WorkQueue`` named ``name`` calls."""
        return QueueMetricsRecorder(self, name)

    def watch_queue(self, queue: WorkQueue[Any]) -> None:
        """Report the queue's depth and running times at every scrape."""
        self._queues.add(queue)

    def controller_registered(self, controller: str, max_concurrent_reconciles: int) -> None:
        """Publish a controller's series at zero, as controller-runtime does at start."""
        attributes = {"controller": controller}
        for result in RESULTS:
            self.reconcile_total.add(0, {**attributes, "result": result})
        self.reconcile_errors.add(0, attributes)
        self.terminal_reconcile_errors.add(0, attributes)
        self.reconcile_panics.add(0, attributes)
        self.active_workers.add(0, attributes)
        self.max_concurrent_reconciles.set(max_concurrent_reconciles, attributes)

    def render(self) -> bytes:
        """The Prometheus text exposition of every series (what ``/metrics`` serves)."""
        return generate_latest(self.registry)

    def serve(self, address: str) -> HttpServer:
        """Serve ``/metrics`` on ``address`` ("host:port", ":port"); started before returning."""
        metrics = self

        class Handler(PlainHandler):
            def do_GET(self) -> None:
                if self.path.split("?")[0] != "/metrics":
                    self.reply(404, b"not found\n")
                    return
                self.reply(200, metrics.render(), CONTENT_TYPE_LATEST)

        return HttpServer(address, Handler, "metrics")

    def shutdown(self) -> None:
        self.provider.shutdown()


class PlainHandler(BaseHTTPRequestHandler):
    """A request handler that logs through our logger at debug level only."""

    protocol_version = "HTTP/1.0"
    timeout = 30  # seconds a client may take to send its request (and the TLS handshake)

    def reply(self, status: int, body: bytes, content_type: str = "text/plain; charset=utf-8") -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        log.debug("Served HTTP request", request=format % args)


def parse_address(address: str) -> tuple[str, int]:
    """``":8080"`` -> ("0.0.0.0", 8080); ``"127.0.0.1:0"`` -> ("127.0.0.1", 0)."""
    host, _, port = address.rpartition(":")
    return host or "0.0.0.0", int(port)  # noqa: S104 - serving on all interfaces is the default


class _ThreadingServer(ThreadingHTTPServer):
    """The standard threaded server, but a failed request is one log line: a client that hung
    up (a scrape that timed out, a probe that gave up: BrokenPipeError, ConnectionResetError, a
    TLS handshake cut short) at info level without a traceback; anything else with its traceback.
    socketserver's own ``handle_error`` printed a traceback to stderr for each."""

    daemon_threads = True
    server_label = "http"

    def handle_error(self, request: Any, client_address: Any) -> None:  # noqa: ARG002 - the socketserver API
        error = sys.exc_info()[1]
        client = ":".join(str(part) for part in client_address) if isinstance(client_address, tuple) else ""
        if isinstance(error, ConnectionError | TimeoutError | ssl.SSLError):
            log.info(
                "Lost connection to HTTP client",
                server=self.server_label,
                client=client,
                error=f"{type(error).__name__}: {error}",
            )
            return
        log.exception("Failed to serve HTTP request", server=self.server_label, client=client)


class HttpServer:
    """A threaded HTTP server running in a daemon thread until ``stop``."""

    def __init__(
        self,
        address: str,
        handler: type[BaseHTTPRequestHandler],
        name: str,
        tls: ssl.SSLContext | None = None,
    ) -> None:
        self._server = _ThreadingServer(parse_address(address), handler)
        self._server.server_label = name
        if tls is not None:  # the handshake runs in the request's thread, never in accept()
            self._server.socket = tls.wrap_socket(
                self._server.socket, server_side=True, do_handshake_on_connect=False
            )
        self.scheme = "https" if tls is not None else "http"
        self._thread = threading.Thread(target=self._server.serve_forever, name=f"{name}-server", daemon=True)
        self._thread.start()
        log.info("Started HTTP server", server=name, address=f"{self.scheme}://{self.host}:{self.port}")

    @property
    def host(self) -> str:
        return str(self._server.server_address[0])

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)
