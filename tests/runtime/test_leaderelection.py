"""LeaderElector against a real API server: one leader per Lease, fail-over, release, loss."""

from __future__ import annotations

import contextlib
import logging
import re
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pykube
import pytest

from nodewright.runtime.kube import errors
from nodewright.runtime.kube.client import Client
from nodewright.runtime.kube.kinds import LEASE
from nodewright.runtime.observe.metrics import Metrics
from nodewright.runtime.process.leaderelection import JITTER, SLOW_RENEW_LOG_INTERVAL, LeaderElector, _Attempt

LEASE_DURATION, RENEW_DEADLINE, RETRY_PERIOD = 2.0, 1.5, 0.25


class Candidate:
    def __init__(self, client: Client, namespace: str, identity: str) -> None:
        self.started = threading.Event()
        self.stopped = threading.Event()
        self.metrics = Metrics()
        self.elector = LeaderElector(
            client,
            namespace=namespace,
            name="test-lease",
            identity=identity,
            lease_duration=LEASE_DURATION,
            renew_deadline=RENEW_DEADLINE,
            retry_period=RETRY_PERIOD,
            on_started_leading=self.started.set,
            on_stopped_leading=self.stopped.set,
            metrics=self.metrics,
        )


@pytest.fixture
def client(cluster: object) -> Client:
    return Client.from_kubeconfig(Path(cluster.kubeconfig))  # type: ignore[attr-defined]


@pytest.fixture
def candidates(client: Client, namespace: str) -> Iterator[Callable[[str], Candidate]]:
    made: list[Candidate] = []

    def make(identity: str) -> Candidate:
        candidate = Candidate(client, namespace, identity)
        made.append(candidate)
        return candidate

    yield make
    for candidate in made:
        candidate.elector.stop()


def wait_any(*events: threading.Event, timeout: float) -> float:
    started = time.monotonic()
    while not any(event.is_set() for event in events):
        assert time.monotonic() - started < timeout, "no leader in time"
        time.sleep(0.02)
    return time.monotonic() - started


def test_durations_are_validated(client: Client) -> None:
    """lease > renew > 1.2 x retry, as client-go requires."""
    with pytest.raises(ValueError, match="lease_duration"):
        LeaderElector(client, namespace="a", name="b", lease_duration=5, renew_deadline=5)
    with pytest.raises(ValueError, match=r"1\.2"):
        LeaderElector(client, namespace="a", name="b", renew_deadline=2.3, retry_period=2)


@pytest.mark.slow
def test_one_leader_then_release_hands_over_at_once(
    candidates: Callable[[str], Candidate], client: Client, namespace: str
) -> None:
    """Of two candidates only one leads; release() lets the other lead within a retry period."""
    first, second = candidates("first"), candidates("second")
    first.elector.start()
    second.elector.start()
    wait_any(first.started, second.started, timeout=10)
    time.sleep(LEASE_DURATION + RETRY_PERIOD)  # the standby keeps waiting while the leader renews
    leader, standby = (first, second) if first.started.is_set() else (second, first)
    assert not standby.started.is_set()
    assert leader.elector.is_leader()
    assert not standby.elector.is_leader()
    lease = client.get(LEASE, "test-lease", namespace)
    assert lease["spec"]["holderIdentity"] == leader.elector.identity
    assert 'leader_election_master_status{name="test-lease"} 1.0' in leader.metrics.render().decode()

    assert leader.elector.release() is True
    released = client.get(LEASE, "test-lease", namespace)["spec"]
    assert released["holderIdentity"] == "" or released["holderIdentity"] == standby.elector.identity
    took = wait_any(standby.started, timeout=LEASE_DURATION)
    assert took < RETRY_PERIOD * 1.2 + 0.5  # not a lease expiry: an immediate take-over
    assert client.get(LEASE, "test-lease", namespace)["spec"]["leaseTransitions"] >= 1
    assert 'leader_election_master_status{name="test-lease"} 0.0' in leader.metrics.render().decode()


@pytest.mark.slow
def test_crashed_leader_is_replaced_after_lease_expiry(candidates: Callable[[str], Candidate]) -> None:
    """A leader that stops renewing (no release) is replaced after about one lease duration."""
    first = candidates("first")
    first.elector.start()
    wait_any(first.started, timeout=10)
    second = candidates("second")
    second.elector.start()
    time.sleep(RETRY_PERIOD * 2)  # the clock: the second candidate polls the held Lease
    first.elector.stop()  # as if the process died: the Lease still names it
    took = wait_any(second.started, timeout=LEASE_DURATION * 3)
    assert LEASE_DURATION - RETRY_PERIOD * 3 <= took <= LEASE_DURATION + RETRY_PERIOD * 3


@pytest.mark.slow
def test_leader_that_cannot_renew_stops_leading(
    candidates: Callable[[str], Candidate], client: Client, namespace: str
) -> None:
    """When another holder takes the Lease by force, the leader stops within the renew deadline."""
    leader = candidates("leader")
    leader.elector.start()
    wait_any(leader.started, timeout=10)
    lease = client.get(LEASE, "test-lease", namespace)
    lease["spec"]["holderIdentity"] = "usurper"
    lease["spec"]["leaseDurationSeconds"] = 60
    client.update(LEASE, lease)
    took = wait_any(leader.stopped, timeout=RENEW_DEADLINE + 2)
    assert took <= RENEW_DEADLINE + RETRY_PERIOD * 2
    assert not leader.elector.is_leader()


@pytest.mark.slow
def test_renew_that_hangs_is_abandoned_at_the_renew_deadline(cluster: object, namespace: str) -> None:
    """The API server stops answering (a black-holed proxy): the leader does not wait for its
    hanging request. master_status drops to 0 when the fence closes (renew deadline - margin)
    and leadership ends at the renew deadline, both measured from the last renew sent."""
    from tests.controllers.leadership_harness import TcpProxy  # noqa: PLC0415 - shared rig

    config = pykube.KubeConfig.from_file(str(cluster.kubeconfig))  # type: ignore[attr-defined]
    upstream = int(config.cluster["server"].rsplit(":", 1)[1])
    proxy = TcpProxy(upstream)
    config.cluster["server"] = f"https://127.0.0.1:{proxy.port}"
    sent: list[float] = []
    candidate = Candidate(Client.from_config(config), namespace, "partitioned")
    fence = candidate.elector.fence
    record = fence.renewed

    def renewed(sent_at: float) -> None:
        sent.append(sent_at)
        record(sent_at)

    fence.renewed = renewed  # type: ignore[method-assign]
    try:
        candidate.elector.start()
        wait_any(candidate.started, timeout=10)
        time.sleep(RETRY_PERIOD * 3)  # the clock: a few renewals before the freeze
        proxy.freeze()
        frozen_at = time.monotonic()
        status_zero_at = None
        while not candidate.stopped.is_set():
            text = candidate.metrics.render().decode()
            if status_zero_at is None and 'leader_election_master_status{name="test-lease"} 0.0' in text:
                status_zero_at = time.monotonic()
            assert time.monotonic() - frozen_at < RENEW_DEADLINE + 3, "still leading"
            time.sleep(0.01)
    finally:
        candidate.elector.stop()
        proxy.close()
    last_sent = max(sent)
    lost_at = candidate.elector.lost_at
    assert lost_at is not None
    assert status_zero_at is not None
    print(  # noqa: T201
        f"\nhanging renew: lost {lost_at - last_sent:.3f} s after the last renew was sent "
        f"(renew deadline {RENEW_DEADLINE} s), master_status 0 after {status_zero_at - last_sent:.3f} s "
        f"(fence validity {fence.validity} s)"
    )
    assert RENEW_DEADLINE <= lost_at - last_sent <= RENEW_DEADLINE + 0.25
    assert status_zero_at - last_sent <= fence.validity + 0.25
    assert not fence.is_open()
    reason = re.fullmatch(
        r"renew deadline passed: last renew sent ([0-9.]+) s ago, a round out for ([0-9.]+) s",
        candidate.elector.lost_reason or "",
    )
    assert reason is not None, candidate.elector.lost_reason
    since_sent, round_out = float(reason[1]), float(reason[2])
    assert since_sent == pytest.approx(lost_at - last_sent, abs=0.06)
    assert 0 < round_out <= since_sent


def test_a_slow_renew_is_logged_and_leadership_holds(
    cluster: object, namespace: str, caplog: pytest.LogCaptureFixture
) -> None:
    """A renew the network holds back longer than the retry period, but not past the renew
    deadline, keeps leadership and is logged once as slow, with its seconds."""
    from tests.controllers.leadership_harness import TcpProxy  # noqa: PLC0415 - shared rig

    config = pykube.KubeConfig.from_file(str(cluster.kubeconfig))  # type: ignore[attr-defined]
    upstream = int(config.cluster["server"].rsplit(":", 1)[1])
    proxy = TcpProxy(upstream)
    config.cluster["server"] = f"https://127.0.0.1:{proxy.port}"
    candidate = Candidate(Client.from_config(config), namespace, "slowed")
    held = RETRY_PERIOD * 2.4  # past the retry period, with 0.6 s of the renew deadline to spare
    try:
        with caplog.at_level(logging.INFO, logger="nodewright.runtime.process.leaderelection"):
            candidate.elector.start()
            wait_any(candidate.started, timeout=10)
            time.sleep(RETRY_PERIOD * 3)
            proxy.hold()
            time.sleep(held)
            proxy.release()
            time.sleep(RENEW_DEADLINE)  # past the deadline the held round would have missed
        assert not candidate.stopped.is_set()
        assert candidate.elector.is_leader()
    finally:
        candidate.elector.stop()
        proxy.close()
    slow = [r.nodewright_pairs for r in caplog.records if r.getMessage() == "Slow lease renew"]  # type: ignore[attr-defined]
    assert slow, [record.getMessage() for record in caplog.records]
    assert all(pairs["seconds"] > RETRY_PERIOD and pairs["outcome"] == "held" for pairs in slow), slow
    assert max(pairs["seconds"] for pairs in slow) >= held - RETRY_PERIOD * JITTER - 0.05, slow


def test_slow_renews_are_logged_at_most_once_per_interval(
    client: Client, namespace: str, caplog: pytest.LogCaptureFixture
) -> None:
    """A leader whose renewals are all slow logs one line per interval, not one per round; the
    next line counts the rounds in between and names the slowest."""
    elector = Candidate(client, namespace, "noted").elector
    rounds = [(0.0, 0.5), (2.0, 0.9), (4.0, 0.1), (6.0, 0.4), (SLOW_RENEW_LOG_INTERVAL + 1.0, 0.3)]
    with caplog.at_level(logging.INFO, logger="nodewright.runtime.process.leaderelection"):
        for sent_at, took in rounds:
            attempt = _Attempt(sent_at=sent_at, outcome="held", finished_at=sent_at + took)
            elector._note_slow(attempt)
    lines = [r.nodewright_pairs for r in caplog.records if r.getMessage() == "Slow lease renew"]  # type: ignore[attr-defined]
    assert [(p["slow_rounds"], p["slowest"], p["seconds"]) for p in lines] == [(1, 0.5, 0.5), (3, 0.9, 0.3)]


def test_a_slow_start_of_leading_does_not_hold_the_renewals_back(client: Client, namespace: str) -> None:
    """Starting the controllers can take longer than the renew deadline (8 s at 2,000 nodes on a
    busy machine): the Lease is renewed meanwhile and leadership holds."""
    renewals: set[str] = set()
    candidate = Candidate(client, namespace, "slow-starter")

    def start_slowly() -> None:
        time.sleep(RENEW_DEADLINE * 2)
        candidate.started.set()

    candidate.elector.on_started_leading = start_slowly
    try:
        candidate.elector.start()
        deadline = time.monotonic() + 10
        while not candidate.started.is_set():
            assert time.monotonic() < deadline, "on_started_leading never finished"
            with contextlib.suppress(errors.NotFound):  # not created yet
                renewals.add(client.get(LEASE, "test-lease", namespace)["spec"]["renewTime"])
            time.sleep(0.1)
        assert not candidate.stopped.is_set()
        assert candidate.elector.is_leader()
    finally:
        candidate.elector.stop()
    assert len(renewals) >= 4, renewals  # renewed every retry period while starting


def test_leading_is_given_up_when_starting_fails(client: Client, namespace: str) -> None:
    """An on_started_leading that raises gives up leadership: on_stopped_leading runs, with the
    reason, instead of a leader that renews while nothing runs."""
    candidate = Candidate(client, namespace, "broken-starter")

    def fail() -> None:
        raise RuntimeError("controllers could not start")

    candidate.elector.on_started_leading = fail
    try:
        candidate.elector.start()
        assert candidate.stopped.wait(RETRY_PERIOD * JITTER * 4 + 2), "still leading"
    finally:
        candidate.elector.stop()
    assert candidate.elector.lost_reason == "on_started_leading failed"
    assert not candidate.elector.fence.is_open()
