"""Health probes over HTTP: liveness always, readiness gated by named checks."""

from __future__ import annotations

import urllib.error
import urllib.request
from collections.abc import Iterator

import pytest

from nodewright.runtime.observe.health import HealthServer


def get(port: int, path: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as response:
            return int(response.status), response.read().decode()
    except urllib.error.HTTPError as error:
        with error:
            return error.code, error.read().decode()


@pytest.fixture
def health() -> Iterator[HealthServer]:
    server = HealthServer()
    server.start("127.0.0.1:0")
    yield server
    server.stop()


def test_healthz_is_200_while_alive(health: HealthServer) -> None:
    """/healthz answers 200 with the built-in ping check."""
    status, body = get(health.port, "/healthz")
    assert status == 200
    assert "[+]ping ok" in body


def test_readyz_is_503_until_checks_pass(health: HealthServer) -> None:
    """/readyz is 503 with no checks and while one fails, 200 once all pass."""
    assert get(health.port, "/readyz")[0] == 503
    synced = [False]
    health.add_readiness_check("informers-synced", lambda: synced[0])
    status, body = get(health.port, "/readyz")
    assert status == 503
    assert "[-]informers-synced failed" in body
    synced[0] = True
    assert get(health.port, "/readyz")[0] == 200


def test_raising_check_fails_and_single_check_path(health: HealthServer) -> None:
    """A raising check counts as failing; /readyz/<name> runs one check; unknown paths 404."""

    def broken() -> bool:
        raise RuntimeError("broken")

    health.add_readiness_check("broken", broken)
    health.add_readiness_check("fine", lambda: True)
    assert get(health.port, "/readyz")[0] == 503
    assert get(health.port, "/readyz/fine")[0] == 200
    assert get(health.port, "/readyz/broken")[0] == 503
    assert get(health.port, "/readyz/absent")[0] == 404
    assert get(health.port, "/nothing")[0] == 404
