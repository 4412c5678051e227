"""Health probes: ``/healthz`` (liveness) and ``/readyz`` (readiness) over HTTP.

Owns ``HealthServer``, which serves both endpoints on the probe address (":8081" by default)
and runs named checks on every request: a probe answers 200 when all its checks pass and
503 naming the failing ones otherwise. ``/readyz/<check>`` and ``/healthz/<check>`` run one
check. The manager adds a readiness check that passes once the caches have synced, and two
liveness checks built here: ``informers_running`` (fails once an informer's threads have ended,
so its store is frozen) and ``workers_not_stuck`` (fails when one reconcile has run longer than
the deadline, so a wedged worker gets the pod restarted instead of silently holding its key).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Protocol

from nodewright.runtime.observe.logs import get_logger
from nodewright.runtime.observe.metrics import HttpServer, PlainHandler

__all__ = ["Check", "HealthServer", "informers_running", "ping", "workers_not_stuck"]

log = get_logger(__name__)

Check = Callable[[], bool]
"""A named probe check: returns True when healthy (raising counts as failing)."""


def ping() -> bool:
    """Always passes: the process answers HTTP, so it is alive."""
    return True


class StoppableInformer(Protocol):
    def is_stopped(self) -> bool: ...


def informers_running(informers: Callable[[], Iterable[StoppableInformer]]) -> Check:
    """A liveness check: every started informer still runs (logs the ones that stopped)."""

    def check() -> bool:
        stopped = [repr(informer) for informer in informers() if informer.is_stopped()]
        if stopped:
            log.warning("Found stopped informers", informers=", ".join(stopped))
        return not stopped

    return check


def workers_not_stuck(running_seconds: Callable[[], Iterable[tuple[str, float]]], deadline: float) -> Check:
    """A liveness check: no controller's longest running reconcile exceeds ``deadline`` seconds
    (``running_seconds`` yields controller name and that time); a deadline of 0 always passes."""

    def check() -> bool:
        stuck = [
            f"{name}={seconds:.0f}s" for name, seconds in running_seconds() if deadline and seconds > deadline
        ]
        if stuck:
            log.warning("Found stuck reconcile workers", controllers=", ".join(stuck), deadline=deadline)
        return not stuck

    return check


class HealthServer:
    """Liveness and readiness checks, and the HTTP server that answers probes with them."""

    def __init__(self) -> None:
        self._checks: dict[str, dict[str, Check]] = {"healthz": {"ping": ping}, "readyz": {}}
        self._server: HttpServer | None = None

    def add_liveness_check(self, name: str, check: Check) -> None:
        self._checks["healthz"][name] = check

    def add_readiness_check(self, name: str, check: Check) -> None:
        self._checks["readyz"][name] = check

    def evaluate(self, probe: str, only: str | None = None) -> tuple[int, bytes]:
        """Run one probe's checks: (HTTP status, body listing each check)."""
        checks = self._checks[probe]
        if only is not None:
            if only not in checks:
                return 404, f"no check named {only}\n".encode()
            checks = {only: checks[only]}
        lines: list[str] = []
        failed = False
        for name, check in checks.items():
            try:
                passed = bool(check())
            except Exception:
                log.exception("Failed to run health check", probe=probe, check=name)
                passed = False
            failed = failed or not passed
            lines.append(f"[{'+' if passed else '-'}]{name} {'ok' if passed else 'failed'}")
        if not checks and probe == "readyz":
            failed = True
            lines.append("[-]no readiness checks yet")
        lines.append(f"{probe} {'check failed' if failed else 'check passed'}")
        return (503 if failed else 200), ("\n".join(lines) + "\n").encode()

    def start(self, address: str) -> None:
        """Serve probes on ``address`` (":8081", "127.0.0.1:0") until ``stop``."""
        health = self

        class Handler(PlainHandler):
            def do_GET(self) -> None:  # noqa: N802 - the http.server API
                parts = self.path.split("?")[0].strip("/").split("/")
                if parts[0] not in ("healthz", "readyz") or len(parts) > 2:
                    self.reply(404, b"not found\n")
                    return
                status, body = health.evaluate(parts[0], parts[1] if len(parts) == 2 else None)
                self.reply(status, body)

        self._server = HttpServer(address, Handler, "health")

    @property
    def port(self) -> int:
        if self._server is None:
            raise RuntimeError("health server not started")
        return self._server.port

    def stop(self) -> None:
        if self._server is not None:
            self._server.stop()
            self._server = None
