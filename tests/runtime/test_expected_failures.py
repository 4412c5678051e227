"""Expected failures are one log line without a traceback: a reconcile that fails with an error
offering ``log_fields`` (as the cloud layer's errors do), or with a passing API failure (the
connection lost while the API server restarts, 429, 5xx, Conflict); a scrape or probe client that
hangs up before its reply is written. Any other exception keeps its traceback."""

from __future__ import annotations

import contextlib
import logging
import socket
import struct
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from prometheus_client.core import GaugeMetricFamily

from nodewright.runtime import errors
from nodewright.runtime.control.controller import _log_expected_failure, _log_transient_failure
from nodewright.runtime.control.reconcile import Request, Result
from nodewright.runtime.kube.client import Client
from nodewright.runtime.kube.kinds import CONFIG_MAP, NAMESPACE
from nodewright.runtime.observe.logs import record_pairs
from nodewright.runtime.observe.metrics import HttpServer, Metrics, PlainHandler
from nodewright.runtime.process.config import parse_config
from nodewright.runtime.process.manager import Manager
from nodewright.runtime.process.metrics_server import tls_context
from tests.runtime.manager_helpers import RunningManager, config_data
from tests.waiting import wait_for


class ExpectedError(Exception):
    quiet = False

    def log_fields(self) -> dict[str, Any]:
        return {"error_code": "InternalServerError", "target": "/subscriptions/s/vm"}


class QuietError(ExpectedError):
    quiet = True


def test_expected_error_is_one_line_without_traceback(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.DEBUG, logger="nodewright.runtime.control.controller"):
        assert _log_expected_failure(ExpectedError("boom"), retries=3)
    (record,) = caplog.records
    assert record.levelno == logging.ERROR
    assert not record.exc_info
    assert record_pairs(record) == {
        "retries": 3,
        "error_code": "InternalServerError",
        "target": "/subscriptions/s/vm",
    }


def test_quiet_error_is_logged_at_debug_only(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.DEBUG, logger="nodewright.runtime.control.controller"):
        assert _log_expected_failure(QuietError("later"), retries=0)
    assert [record.levelno for record in caplog.records] == [logging.DEBUG]


def test_other_errors_are_not_expected(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.DEBUG, logger="nodewright.runtime.control.controller"):
        assert not _log_expected_failure(ValueError("a bug"), retries=0)
    assert caplog.records == []


@pytest.mark.parametrize(
    "error",
    [
        pytest.param(errors.ConnectionFailed("GET /api/v1/pods failed: connection refused"), id="connection"),
        pytest.param(errors.InternalError("apiserver is shutting down", code=500), id="shutting-down"),
        pytest.param(errors.ServiceUnavailable("not ready"), id="503"),
        pytest.param(errors.TooManyRequests("slow down", retry_after=1), id="429"),
        pytest.param(errors.Conflict("the object has been modified"), id="conflict"),
    ],
)
def test_passing_api_failures_are_one_warning_without_traceback(
    error: errors.ApiError, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.DEBUG, logger="nodewright.runtime.control.controller"):
        assert _log_transient_failure(error, retries=2)
    (record,) = caplog.records
    assert (record.levelno, record.getMessage()) == (logging.WARNING, "Reconcile failed")
    assert not record.exc_info
    assert record_pairs(record) == {"retries": 2, "error": str(error)}


@pytest.mark.parametrize(
    "error",
    [
        pytest.param(errors.Invalid("spec.x: Invalid value"), id="invalid"),
        pytest.param(errors.NotFound("gone"), id="not-found"),
        pytest.param(errors.Forbidden("no"), id="forbidden"),
        pytest.param(ValueError("a bug"), id="bug"),
    ],
)
def test_other_failures_are_not_passing(error: Exception) -> None:
    assert not errors.is_transient(error)


# --- the API server restarts under a running manager --------------------------------------------


def writing_manager(plane_kubeconfig: str, namespace: str) -> tuple[Manager, list[float]]:
    """A manager (leader election on, with deadlines longer than the restart) whose reconciler
    patches its ConfigMap through the API server every 0.2 s; the list gets each success's time."""
    election = {"namespace": namespace, "leaseDuration": 60, "renewDeadline": 40, "retryPeriod": 1}
    config = parse_config(config_data(namespace, leaderElection={"enabled": True, **election}), "test")
    manager = Manager(config, kubeconfig=plane_kubeconfig)
    successes: list[float] = []

    def reconcile(request: Request) -> Result:
        manager.client.patch(CONFIG_MAP, request.name, {"data": {"touched": "yes"}}, request.namespace)
        successes.append(time.monotonic())
        return Result(requeue_after=0.2)

    manager.controller("toucher").for_(CONFIG_MAP, namespace=namespace).complete(reconcile)
    return manager, successes


@pytest.mark.slow
def test_an_api_server_restart_costs_no_traceback(
    control_plane_factory: Callable[..., Any],
    caplog: pytest.LogCaptureFixture,
    capfd: pytest.CaptureFixture[str],
) -> None:
    """The API server goes down and comes back while a manager's reconciler writes through it:
    its failed writes (ConnectionFailed, the server shutting down or starting) are one warning
    each, nothing anywhere logs or prints a traceback, and the reconciler writes again after."""
    plane = control_plane_factory()
    client = Client.from_kubeconfig(plane.kubeconfig)
    namespace = "restart"
    client.create(NAMESPACE, {"metadata": {"name": namespace}})
    client.create(CONFIG_MAP, {"metadata": {"name": "touched"}}, namespace)
    manager, successes = writing_manager(str(plane.kubeconfig), namespace)
    with caplog.at_level(logging.INFO):
        running = RunningManager(manager)
        try:
            wait_for(lambda: len(successes) >= 3, timeout=60, message="reconciles before the restart")
            plane.restart_apiserver(down_for=2)
            restarted = time.monotonic()
            wait_for(
                lambda: sum(1 for t in successes if t > restarted) >= 3,
                timeout=90,
                message="reconciles after the restart",
            )
        finally:
            running.stop()
    assert running.error is None
    failed = [r for r in caplog.records if r.getMessage() == "Reconcile failed"]
    assert failed, "the reconciler wrote while the API server was down"
    assert {r.levelno for r in failed} == {logging.WARNING}
    assert [(r.name, r.getMessage()) for r in caplog.records if r.exc_info] == []
    assert "Traceback" not in capfd.readouterr().err


# --- a scrape client that hangs up ----------------------------------------------------------------


class SlowCollector:
    """A collector whose scrape waits ``delay`` seconds (telling when it started) and then yields
    a large body, so that the reply is written after the client gave up, in several sends."""

    def __init__(self, delay: float) -> None:
        self.delay = delay
        self.started = threading.Event()

    def describe(self) -> list[Any]:
        return []  # no collect() at registration

    def collect(self) -> Iterator[GaugeMetricFamily]:
        self.started.set()
        time.sleep(self.delay)
        family = GaugeMetricFamily("slow_series", "A large body", labels=["index"])
        for index in range(20_000):
            family.add_metric([str(index)], index)
        yield family


def hang_up_abruptly(connection: socket.socket) -> None:
    """Close with a TCP reset (SO_LINGER 0), as a client killed mid-request does."""
    connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    connection.close()


@pytest.fixture
def slow_metrics() -> Iterator[tuple[SlowCollector, HttpServer]]:
    metrics = Metrics()
    collector = SlowCollector(delay=0.5)
    metrics.registry.register(collector)
    server = metrics.serve("127.0.0.1:0")
    try:
        yield collector, server
    finally:
        server.stop()


def lost_clients(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.getMessage() == "Lost connection to HTTP client"]


def assert_one_line_each_and_no_traceback(
    caplog: pytest.LogCaptureFixture, capfd: pytest.CaptureFixture[str], server: HttpServer, count: int
) -> None:
    """``count`` lost clients were logged at info, nothing was logged with a traceback, nothing
    was printed to stderr (socketserver's default handler prints tracebacks there), and the
    server still answers."""
    wait_for(lambda: len(lost_clients(caplog)) >= count, message="the lost client logged", timeout=15)
    assert [r.levelno for r in lost_clients(caplog)] == [logging.INFO] * count
    assert [r.getMessage() for r in caplog.records if r.exc_info] == []
    assert "Traceback" not in capfd.readouterr().err
    with socket.create_connection(("127.0.0.1", server.port), timeout=10) as connection:
        connection.sendall(b"GET /nothing HTTP/1.0\r\n\r\n")
        assert connection.recv(64).startswith(b"HTTP/1.0 404")


def test_a_scrape_client_that_hangs_up_before_reading_is_one_line(
    slow_metrics: tuple[SlowCollector, HttpServer],
    caplog: pytest.LogCaptureFixture,
    capfd: pytest.CaptureFixture[str],
) -> None:
    """A client sends its scrape and hangs up (a reset) before the reply is written: one info line
    for it, no BrokenPipeError or ConnectionResetError traceback."""
    collector, server = slow_metrics
    with caplog.at_level(logging.INFO, logger="nodewright.runtime.observe.metrics"):
        connection = socket.create_connection(("127.0.0.1", server.port), timeout=10)
        connection.sendall(b"GET /metrics HTTP/1.0\r\n\r\n")
        assert collector.started.wait(10)  # the reply is being made: the request was read
        hang_up_abruptly(connection)
        assert_one_line_each_and_no_traceback(caplog, capfd, server, count=1)


def test_a_scrape_that_times_out_is_one_line(
    slow_metrics: tuple[SlowCollector, HttpServer],
    caplog: pytest.LogCaptureFixture,
    capfd: pytest.CaptureFixture[str],
) -> None:
    """A scraper with a short timeout gives up and closes its end, as Prometheus does at its
    scrape_timeout: the reply written after that is one info line, not a traceback."""
    collector, server = slow_metrics
    with caplog.at_level(logging.INFO, logger="nodewright.runtime.observe.metrics"):
        with socket.create_connection(("127.0.0.1", server.port), timeout=0.1) as connection:
            connection.sendall(b"GET /metrics HTTP/1.0\r\n\r\n")
            with pytest.raises(TimeoutError):
                connection.recv(1)
        assert collector.started.is_set()
        assert_one_line_each_and_no_traceback(caplog, capfd, server, count=1)


def test_a_plain_http_scrape_of_the_tls_port_is_one_line(
    caplog: pytest.LogCaptureFixture, capfd: pytest.CaptureFixture[str]
) -> None:
    """A scraper speaking plain HTTP to the HTTPS metrics port (a job with the wrong scheme) fails
    its handshake on every scrape: one info line each, not an SSLError traceback on stderr."""

    class Handler(PlainHandler):
        def do_GET(self) -> None:  # noqa: N802 - the http.server API
            self.reply(404, b"not found\n")

    server = HttpServer("127.0.0.1:0", Handler, "metrics", tls=tls_context(""))
    try:
        with caplog.at_level(logging.INFO, logger="nodewright.runtime.observe.metrics"):
            with socket.create_connection(("127.0.0.1", server.port), timeout=10) as connection:
                connection.sendall(b"GET /metrics HTTP/1.0\r\n\r\n")
                with contextlib.suppress(ConnectionError):
                    while connection.recv(4096):  # whatever the server sends before it closes
                        pass
            wait_for(lambda: len(lost_clients(caplog)) >= 1, message="the refused client logged", timeout=15)
            assert [r.getMessage() for r in caplog.records if r.exc_info] == []
            assert "Traceback" not in capfd.readouterr().err
    finally:
        server.stop()
