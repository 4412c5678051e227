"""WriteFence: open for renewDeadline - margin after a renew, typed refusal counted and logged in
one line, and the last-moment check in the HTTP connection that sends nothing once it refuses."""

from __future__ import annotations

import http.server
import logging
import threading
from collections.abc import Iterator

import pytest
import requests
from prometheus_client.parser import text_string_to_metric_families

from nodewright.runtime.kube.fence import FencedWriteError, WriteFence, guard_session, is_mutating
from nodewright.runtime.observe.metrics import Metrics


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def refused(metrics: Metrics, target: str) -> float:
    for family in text_string_to_metric_families(metrics.render().decode()):
        for series in family.samples:
            if series.name == "nodewright_fenced_writes_total" and series.labels.get("target") == target:
                return float(series.value)
    return 0.0


def test_fence_is_open_only_for_renew_deadline_minus_margin_after_the_renew_was_sent() -> None:
    """Closed before any renew; open until sent_at + (10 - 2) s; closed at once on revoke."""
    clock, metrics = Clock(), Metrics()
    fence = WriteFence(renew_deadline=10.0, margin=2.0, clock=clock, metrics=metrics)
    assert not fence.is_open()
    fence.renewed(clock.now - 1.0)  # the renew was sent a second ago
    assert fence.is_open()
    clock.now += 6.999
    assert fence.is_open()
    clock.now += 0.002  # 8.001 s after the send
    assert not fence.is_open()
    with pytest.raises(FencedWriteError) as refusal:
        fence.check("arm", "PATCH /subscriptions/s/x")
    assert refusal.value.target == "arm"
    assert refusal.value.renew_age == pytest.approx(8.001)
    fence.renewed(clock.now)
    fence.renewed(clock.now - 5)  # an older renew that returned late never moves the fence back
    assert fence.closes_at() == pytest.approx(clock.now + 8.0)
    fence.revoke()
    assert not fence.is_open()
    assert refused(metrics, "arm") == 1.0


def test_margin_must_leave_a_window() -> None:
    with pytest.raises(ValueError, match="margin"):
        WriteFence(renew_deadline=2.0, margin=2.0)


def test_refusal_is_counted_per_target_and_logged_once_without_traceback(
    caplog: pytest.LogCaptureFixture,
) -> None:
    metrics = Metrics()
    fence = WriteFence(renew_deadline=2.0, margin=0.5, metrics=metrics)
    caplog.set_level(logging.WARNING)
    for _ in range(3):
        with pytest.raises(FencedWriteError):
            fence.check("kubernetes", "POST /api/v1/namespaces/a/configmaps")
    lines = [record for record in caplog.records if record.getMessage() == "Refused write without leadership"]
    print(f"refused=3 counted={refused(metrics, 'kubernetes')} log_lines={len(lines)}")  # noqa: T201
    assert len(lines) == 3
    assert not any(record.exc_info for record in lines)
    assert refused(metrics, "kubernetes") == 3.0
    assert refused(metrics, "arm") == 0.0
    assert WriteFence.always_open(metrics).is_open()


class _Recorder(http.server.BaseHTTPRequestHandler):
    seen: list[str] = []

    def _answer(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        self.rfile.read(length)
        self.seen.append(f"{self.command} {self.path}")
        self.send_response(200)
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"{}")

    do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = _answer  # noqa: N815

    def log_message(self, format: str, *args: object) -> None:
        return


@pytest.fixture
def recorder() -> Iterator[tuple[str, list[str]]]:
    _Recorder.seen = []
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Recorder)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}", _Recorder.seen
    server.shutdown()
    server.server_close()


def test_guarded_session_checks_each_mutating_request_as_it_is_sent(recorder: tuple[str, list[str]]) -> None:
    """Reads pass untouched; a write is checked at send time and, refused, never reaches the server."""
    url, seen = recorder
    clock = Clock()
    fence = WriteFence(renew_deadline=2.0, margin=0.5, clock=clock)
    session = requests.Session()
    guard_session(session, fence.guard("kubernetes"))
    fence.renewed(clock.now)
    assert session.put(f"{url}/open", json={"a": 1}, timeout=5).status_code == 200
    clock.now += 1.6  # the fence closes between two calls on the same pooled connection
    assert session.get(f"{url}/read", timeout=5).status_code == 200
    with pytest.raises(FencedWriteError):
        session.patch(f"{url}/late?x=1", json={"a": 2}, timeout=5)
    with pytest.raises(FencedWriteError):
        session.delete(f"{url}/late", timeout=5)
    assert seen == ["PUT /open", "GET /read"]


def test_config_margin_defaults_to_2_s_and_must_leave_room_for_a_retry() -> None:
    """writeFenceMargin: 2 s by default, halved room on short leases, validated when given."""
    from nodewright.runtime.process.config import ConfigError, parse_config  # noqa: PLC0415

    assert parse_config({}, "c").leader_election.effective_write_fence_margin == 2.0
    short = {"leaseDuration": 3, "renewDeadline": 2, "retryPeriod": 0.5}
    assert parse_config({"leaderElection": short}, "c").leader_election.effective_write_fence_margin == 0.75
    with pytest.raises(ConfigError, match="writeFenceMargin"):
        parse_config({"leaderElection": {**short, "writeFenceMargin": 1.5}}, "c")


@pytest.mark.parametrize(
    ("method", "path", "mutating"),
    [
        pytest.param("GET", "/api/v1/pods", False, id="read"),
        pytest.param("POST", "/api/v1/namespaces/a/configmaps", True, id="create"),
        pytest.param("PATCH", "/apis/nodewright.io/v1alpha1/nodeimages/x", True, id="patch"),
        pytest.param("DELETE", "/api/v1/nodes/n", True, id="delete"),
        pytest.param("POST", "/apis/authentication.k8s.io/v1/tokenreviews", False, id="token-review"),
        pytest.param(
            "POST", "/apis/authorization.k8s.io/v1/subjectaccessreviews", False, id="subject-access-review"
        ),
        pytest.param(
            "POST", "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews?x=1", False, id="self-review"
        ),
        pytest.param(
            "POST", "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings", True, id="rbac-is-a-write"
        ),
        pytest.param("PUT", "/subscriptions/s/resourceGroups/g/providers/X/y/z", True, id="arm-put"),
    ],
)
def test_review_questions_are_not_writes(method: str, path: str, mutating: bool) -> None:
    """Only requests that may change stored state are fenced; TokenReview and the access
    reviews a standby asks (metrics authorization, the permission check at start) are not."""
    assert is_mutating(method, path) is mutating
