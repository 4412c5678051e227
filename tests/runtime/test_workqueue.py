"""WorkQueue: client-go semantics under many concurrent workers."""

from __future__ import annotations

import random
import threading
import time
from collections import Counter

import pytest

from nodewright.runtime.control.ratelimit import ItemExponentialRateLimiter
from nodewright.runtime.control.workqueue import BatchWindow, WorkQueue


def test_add_of_queued_key_is_a_noop() -> None:
    """Adding a key that waits in the queue does not queue it twice."""
    queue: WorkQueue[str] = WorkQueue("dedup")
    for key in ["a", "b", "a", "a", "b", "c"]:
        queue.add(key)
    assert len(queue) == 3
    assert [queue.get(), queue.get(), queue.get()] == ["a", "b", "c"]


def test_batch_window_turns_a_burst_into_one_key_after_quiet() -> None:
    """With a batch window, a burst of adds on one key is handed out once, after the burst."""
    queue: WorkQueue[str] = WorkQueue("batched", batch_window=BatchWindow(quiet=0.2, max_delay=5))
    started = time.monotonic()
    for _ in range(5):
        time.sleep(0.05)
        queue.add("a")
    last_add = time.monotonic()
    assert len(queue) == 0  # still inside the window
    assert queue.get(timeout=3) == "a"
    assert time.monotonic() - last_add >= 0.2 - 0.01  # waited for the quiet period
    assert time.monotonic() - started < 3
    queue.done("a")
    assert queue.get(timeout=0.5) is None  # the burst cost exactly one hand-out
    queue.shut_down()


def test_batch_window_never_waits_past_max_delay() -> None:
    """Adds that never go quiet are still handed out max_delay after the first one."""
    now = [0.0]
    queue: WorkQueue[str] = WorkQueue(
        "capped", batch_window=BatchWindow(quiet=1.0, max_delay=2.0), clock=lambda: now[0]
    )
    queue.add("a")
    now[0] = 0.9
    queue.add("a")  # would postpone to 1.9
    now[0] = 1.8
    queue.add("a")  # would postpone to 2.8: capped at 2.0
    assert queue._waiting_until["a"] == pytest.approx(2.0)
    queue.shut_down()


def test_batch_window_does_not_postpone_an_explicit_add_after() -> None:
    """A retry due sooner than the batch window keeps its deadline."""
    now = [0.0]
    queue: WorkQueue[str] = WorkQueue(
        "retry", batch_window=BatchWindow(quiet=1.0, max_delay=2.0), clock=lambda: now[0]
    )
    queue.add_after("a", 0.3)
    queue.add("a")
    assert queue._waiting_until["a"] == pytest.approx(0.3)
    queue.shut_down()


def test_shared_batch_window_waits_for_the_whole_wave() -> None:
    """A shared quiet hands a key out only once no key was added for ``quiet`` seconds: a wave
    over many keys is one hand-out per key even where one key's adds are far apart."""
    queue: WorkQueue[str] = WorkQueue("wave", batch_window=BatchWindow(quiet=0.25, max_delay=5, shared=True))
    queue.add("a")
    for index in range(6):  # "a" alone would be due at 0.25; the others keep the wave going
        time.sleep(0.1)
        queue.add(f"k{index}")
        assert len(queue) == 0, "nothing is ready while the wave goes on"
    last_add = time.monotonic()
    queue.add("a")  # a's second add, 0.6 s after its first: still the same wave
    handed = [queue.get(timeout=3) for _ in range(7)]
    assert time.monotonic() - last_add >= 0.25 - 0.02, "nothing before the wave went quiet"
    assert sorted(str(key) for key in handed) == ["a", "k0", "k1", "k2", "k3", "k4", "k5"]
    for key in handed:
        queue.done(str(key))
    assert queue.get(timeout=0.4) is None, "one hand-out per key for the whole wave"
    queue.shut_down()


def test_shared_batch_window_still_caps_each_key_at_max_delay() -> None:
    """Adds of other keys that never stop do not hold a key past its max_delay."""
    queue: WorkQueue[str] = WorkQueue(
        "endless", batch_window=BatchWindow(quiet=0.3, max_delay=0.6, shared=True)
    )
    started = time.monotonic()
    queue.add("a")
    stop = threading.Event()

    def keep_adding() -> None:
        index = 0
        while not stop.is_set():
            queue.add(f"other-{index % 3}")
            index += 1
            time.sleep(0.05)

    adder = threading.Thread(target=keep_adding)
    adder.start()
    try:
        first = queue.get(timeout=3)
        waited = time.monotonic() - started
    finally:
        stop.set()
        adder.join()
    assert first == "a"
    assert 0.6 - 0.02 <= waited < 1.5, waited
    queue.shut_down()


def test_batch_window_rejects_a_quiet_longer_than_the_cap() -> None:
    """quiet must be positive and at most max_delay."""
    with pytest.raises(ValueError, match="quiet"):
        BatchWindow(quiet=3, max_delay=2)


def test_add_while_processing_requeues_after_done() -> None:
    """A key added while a worker holds it is not handed out until done, then comes back once."""
    queue: WorkQueue[str] = WorkQueue("inflight")
    queue.add("a")
    assert queue.get() == "a"
    queue.add("a")
    queue.add("a")
    assert len(queue) == 0
    assert queue.get(timeout=0.05) is None  # not handed to a second worker
    queue.done("a")
    assert len(queue) == 1
    assert queue.get(timeout=1) == "a"
    queue.done("a")
    assert len(queue) == 0


def test_get_returns_none_after_shutdown() -> None:
    """Shutdown wakes blocked workers with None and ignores further adds."""
    queue: WorkQueue[str] = WorkQueue("shutdown")
    results: list[str | None] = []
    worker = threading.Thread(target=lambda: results.append(queue.get()))
    worker.start()
    time.sleep(0.05)
    queue.shut_down()
    worker.join(2)
    assert results == [None]
    queue.add("late")
    assert len(queue) == 0


def test_shutdown_with_drain_waits_for_in_flight_keys() -> None:
    """Drain returns only after every handed-out key is done (or after the timeout)."""
    queue: WorkQueue[str] = WorkQueue("drain")
    queue.add("a")
    key = queue.get()
    assert key == "a"
    assert queue.shut_down_with_drain(timeout=0.1) is False
    threading.Timer(0.1, queue.done, args=("a",)).start()
    started = time.monotonic()
    assert queue.shut_down_with_drain(timeout=5) is True
    assert time.monotonic() - started >= 0.05


def test_add_after_fires_in_deadline_order() -> None:
    """Delayed keys arrive ordered by deadline, not by the order they were added."""
    queue: WorkQueue[str] = WorkQueue("delayed")
    started = time.monotonic()  # before the adds: each deadline counts from its own add_after
    queue.add_after("c", 0.30)
    queue.add_after("a", 0.10)
    queue.add_after("b", 0.20)
    order = []
    for _ in range(3):
        key = queue.get(timeout=2)
        assert key is not None
        order.append((key, time.monotonic() - started))
        queue.done(key)
    assert [key for key, _ in order] == ["a", "b", "c"]
    assert order[0][1] >= 0.09
    assert order[2][1] >= 0.29


def test_add_after_keeps_the_earliest_deadline() -> None:
    """A second add_after of the same key only ever brings it forward, and it arrives once."""
    queue: WorkQueue[str] = WorkQueue("earliest")
    queue.add_after("a", 5.0)
    queue.add_after("a", 0.05)
    queue.add_after("a", 3.0)
    assert queue.get(timeout=1) == "a"
    queue.done("a")
    assert queue.get(timeout=0.3) is None


def test_rate_limited_backoff_grows_and_forget_resets() -> None:
    """add_rate_limited waits 2^n x base; forget drops the count; num_requeues reports it."""
    queue: WorkQueue[str] = WorkQueue("backoff", rate_limiter=ItemExponentialRateLimiter(0.02, 10.0))
    waits = []
    for _ in range(4):
        started = time.monotonic()
        queue.add_rate_limited("a")
        assert queue.get(timeout=5) == "a"
        waits.append(time.monotonic() - started)
        queue.done("a")
    assert queue.num_requeues("a") == 4
    assert waits[0] >= 0.019
    assert waits[3] >= 0.159  # 0.02 x 2^3
    assert waits[3] > waits[0] * 4
    queue.forget("a")
    assert queue.num_requeues("a") == 0
    started = time.monotonic()
    queue.add_rate_limited("a")
    assert queue.get(timeout=5) == "a"
    assert time.monotonic() - started < 0.1


@pytest.mark.parametrize("workers", [8, 32], ids=["8-workers", "32-workers"])
def test_stress_no_key_processed_concurrently(workers: int) -> None:
    """Many workers, many producers re-adding hot keys: never two workers on one key at once,
    and every key added after its last processing started gets processed again."""
    queue: WorkQueue[int] = WorkQueue("stress")
    keys = list(range(20))
    active: set[int] = set()
    active_lock = threading.Lock()
    violations: list[int] = []
    processed: Counter[int] = Counter()
    last_add: dict[int, float] = {}
    last_start: dict[int, float] = {}
    stop_producers = threading.Event()

    def work() -> None:
        while (key := queue.get()) is not None:
            with active_lock:
                if key in active:
                    violations.append(key)
                active.add(key)
                last_start[key] = time.monotonic()
                processed[key] += 1
            time.sleep(random.uniform(0, 0.002))
            with active_lock:
                active.discard(key)
            queue.done(key)

    def produce() -> None:
        while not stop_producers.is_set():
            key = random.choice(keys)
            with active_lock:
                last_add[key] = time.monotonic()
            queue.add(key)
            if random.random() < 0.1:
                queue.add_after(random.choice(keys), random.uniform(0, 0.01))

    threads = [threading.Thread(target=work) for _ in range(workers)]
    producers = [threading.Thread(target=produce) for _ in range(4)]
    for thread in threads + producers:
        thread.start()
    time.sleep(1.0)  # the clock: the producers' run
    stop_producers.set()
    for producer in producers:
        producer.join()
    time.sleep(0.1)  # let delayed adds fire
    deadline = time.monotonic() + 5
    while (len(queue) or queue.processing()) and time.monotonic() < deadline:
        time.sleep(0.01)
    queue.shut_down()
    for thread in threads:
        thread.join(5)
    assert violations == []
    assert sum(processed.values()) > len(keys)
    for key, added in last_add.items():  # the last add of every key led to a processing after it
        assert last_start[key] >= added
