"""Rate limiters: exponential per-item backoff, the shared token bucket, and their maximum."""

from __future__ import annotations

import pytest

from nodewright.runtime.control.ratelimit import (
    ItemExponentialRateLimiter,
    MaxOfRateLimiter,
    TokenBucketRateLimiter,
    default_controller_rate_limiter,
)


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_exponential_doubles_per_failure_and_caps() -> None:
    """Delays are 5 ms x 2^n per item, capped at 1000 s, and counted as retries."""
    limiter = ItemExponentialRateLimiter()
    delays = [limiter.when("a") for _ in range(20)]
    assert delays[:4] == pytest.approx([0.005, 0.010, 0.020, 0.040])
    assert delays[-1] == 1000.0
    assert limiter.retries("a") == 20
    assert limiter.when("b") == pytest.approx(0.005)  # items are independent


def test_exponential_survives_huge_failure_counts() -> None:
    """Thousands of failures stay at the cap instead of overflowing."""
    limiter = ItemExponentialRateLimiter()
    for _ in range(2000):
        delay = limiter.when("a")
    assert delay == 1000.0


def test_forget_resets_backoff() -> None:
    """After forget, the next failure starts from the base delay again."""
    limiter = ItemExponentialRateLimiter()
    for _ in range(5):
        limiter.when("a")
    limiter.forget("a")
    assert limiter.retries("a") == 0
    assert limiter.when("a") == pytest.approx(0.005)


def test_token_bucket_allows_burst_then_paces_at_qps() -> None:
    """100 immediate tokens, then one every 100 ms; time refills the bucket."""
    clock = FakeClock()
    bucket = TokenBucketRateLimiter(qps=10, burst=100, clock=clock)
    assert all(bucket.when(i) == 0 for i in range(100))
    assert bucket.when("x") == pytest.approx(0.1)
    assert bucket.when("y") == pytest.approx(0.2)
    clock.now += 20.0  # pays back the 2 borrowed tokens and refills to the burst cap
    assert all(bucket.when(i) == 0 for i in range(100))
    assert bucket.when("z") == pytest.approx(0.1)


def test_max_of_takes_longest_delay_and_forgets_everywhere() -> None:
    """The combined limiter answers the longest delay; forget reaches each part."""
    clock = FakeClock()
    exponential = ItemExponentialRateLimiter(0.005, 1000.0)
    bucket = TokenBucketRateLimiter(qps=1, burst=1, clock=clock)
    limiter = MaxOfRateLimiter(exponential, bucket)
    assert limiter.when("a") == pytest.approx(0.005)  # bucket had a token
    assert limiter.when("a") == pytest.approx(1.0)  # bucket empty: 1 s beats 10 ms
    assert limiter.retries("a") == 2
    limiter.forget("a")
    assert limiter.retries("a") == 0


def test_default_controller_rate_limiter_matches_controller_runtime() -> None:
    """Default is max(5 ms x 2^n capped at 1000 s, 10 qps burst 100)."""
    limiter = default_controller_rate_limiter(FakeClock())
    assert limiter.when("a") == pytest.approx(0.005)
    assert limiter.when("a") == pytest.approx(0.010)
