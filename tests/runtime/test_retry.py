"""retry_on_conflict: client-go DefaultRetry semantics, and convergence under real 409s."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from nodewright.runtime import errors
from nodewright.runtime.kube.client import Client
from nodewright.runtime.kube.kinds import CONFIG_MAP
from nodewright.runtime.kube.retry import DEFAULT_BACKOFF, DEFAULT_RETRY, Backoff, retry_on_conflict


def test_defaults_match_client_go() -> None:
    assert Backoff(steps=5, duration=0.010, factor=1.0, jitter=0.1) == DEFAULT_RETRY
    assert Backoff(steps=4, duration=0.010, factor=5.0, jitter=0.1) == DEFAULT_BACKOFF
    delays = [DEFAULT_BACKOFF.delay(n) for n in (1, 2, 3)]
    for delay, base in zip(delays, (0.010, 0.050, 0.250), strict=True):
        assert base <= delay <= base * 1.1


def test_gives_up_after_the_steps_with_the_last_conflict() -> None:
    calls = 0

    def always_conflicts() -> None:
        nonlocal calls
        calls += 1
        raise errors.Conflict(f"attempt {calls}")

    with pytest.raises(errors.Conflict, match="attempt 5"):
        retry_on_conflict(always_conflicts)
    assert calls == 5


@pytest.mark.parametrize(
    "error",
    [
        pytest.param(errors.AlreadyExists("exists"), id="already-exists-is-not-retried"),
        pytest.param(errors.NotFound("gone"), id="not-found"),
        pytest.param(RuntimeError("bug"), id="other"),
    ],
)
def test_other_errors_are_raised_at_once(error: Exception) -> None:
    calls = 0

    def fails() -> None:
        nonlocal calls
        calls += 1
        raise error

    with pytest.raises(type(error)):
        retry_on_conflict(fails)
    assert calls == 1


def test_converges_under_real_conflicts_from_concurrent_writers(cluster: Any, namespace: str) -> None:
    """Eight threads each add 5 increments to one counter with read-modify-PUT; real 409s
    occur and every increment lands exactly once."""
    client = Client.from_kubeconfig(cluster.kubeconfig)
    client.create(CONFIG_MAP, {"metadata": {"name": "counter"}, "data": {"n": "0"}}, namespace)
    conflicts = 0
    lock = threading.Lock()
    failures: list[BaseException] = []
    patient = Backoff(steps=50, duration=0.005, factor=1.0, jitter=1.0)

    def increment() -> None:
        nonlocal conflicts
        current = client.get(CONFIG_MAP, "counter", namespace)
        current["data"]["n"] = str(int(current["data"]["n"]) + 1)
        try:
            client.update(CONFIG_MAP, current)
        except errors.Conflict:
            with lock:
                conflicts += 1
            raise

    def writer() -> None:
        try:
            for _ in range(5):
                retry_on_conflict(increment, patient)
        except BaseException as error:  # reported below
            failures.append(error)

    threads = [threading.Thread(target=writer) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert failures == []
    assert client.get(CONFIG_MAP, "counter", namespace)["data"]["n"] == "40"
    assert conflicts > 0, "the test must provoke real conflicts"
