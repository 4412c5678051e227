"""Living within Azure's request budget: one shared budget per subscription, principal and class.

ARM gives each subscription and principal three token buckets (reads 250 at 25/s, writes 200 at
10/s, deletes 200 at 10/s) and reports what is left in ``x-ms-ratelimit-remaining-subscription-
reads/-writes/-deletes``; the Compute provider adds 3- and 30-minute policies per operation family
and reports them in ``x-ms-ratelimit-remaining-resource``. ``ArmBudget`` mirrors both:

- **Pacing.** Each class (and each Compute policy seen) is a local token bucket with Azure's
  capacity and refill rate, lowered to what the headers report whenever ARM reports less (other
  processes spend the same budget). A request takes a token; when fewer than ``reserve`` tokens
  would be left it waits for the refill instead, so the budget slows us before it reaches zero.
  A Compute policy's capacity is the most it ever reported plus one; it is mirrored as the
  sliding window it is (``policy_window.PolicyWindow``: our own send times, and what the report
  says others spend), so an allowance comes back when the request that used it ages out.
- **Holding after a 429.** A 429 holds every later request of its class (reads, writes or
  deletes) for ``Retry-After``. Without ``Retry-After`` the hold is derived: for a Compute policy
  named in ``details``, one sixth of its window (30 s for a 3-minute policy, 5 min for a 30-minute
  one: a sliding window whose calls were spread evenly frees a sixth of its allowance in that
  time), doubled for each further 429 of the class in a row up to twice that (at least a minute,
  so that calls resume within a minute or two of the throttling ending); for an ARM
  429 without the header, the time the bucket needs to refill the reserve (at least 5 s).
- **Sharing.** ``ArmBudgets.get(endpoint, subscription, principal)`` returns its owner's one
  budget for that subscription and principal (a manager owns one ``ArmBudgets`` for all its
  clouds), so every client and reconciler of that owner draws on the same buckets.

``ArmBudgetPolicy`` applies the budget to each HTTP attempt (the factory places it after
azure-core's ``RetryPolicy``). **No stale plan is sent**: a request of a held class is never
slept through the hold; it fails at once with a quiet ``ThrottledError`` naming the time left,
and the caller's work queue comes back then, reads again and decides again. (A request is built
from what its caller read; sent after a hold of 20 s it would carry a decision the world has
moved past, such as removing an identity a pod created meanwhile needs.) Pacing (waiting for
the bucket to refill) is slept only while the attempt's pacing stays within
``max_wait_seconds`` (1 s by default, shared with the mutation rate limit through the request's
context, ``throttle.PACED_SECONDS``): a pass spends that much between its read and its write
anyway. A longer pacing wait gives the tokens back and fails at once like a hold.
**Prepaying a read-modify-write**: ``prepay`` takes a write's tokens before the reads it rests on
(a kept-back write would otherwise waste them and be read again next time); the write then
passes the policy without taking tokens twice, and ``release_prepaid`` gives back a credit no
write spent. Credits belong to the calling thread (the SDK clients are synchronous).
``BudgetObserver`` is the seam to metrics (remaining per class; 429s by class and code).
Thread-safe; sleeps in the calling thread (pacing only); no other I/O.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from azure.core.pipeline import PipelineRequest, PipelineResponse
from azure.core.pipeline.policies import HTTPPolicy

from nodewright.cloud.errors import parse_retry_after
from nodewright.cloud.policy_window import PolicyWindow
from nodewright.cloud.throttle import (
    DEFAULT_PACING_MAX_WAIT_SECONDS,
    held_error,
    note_paced,
    operation_name,
    paced_seconds,
)

__all__ = [
    "ARM_LIMITS",
    "ArmBudget",
    "ArmBudgetPolicy",
    "ArmBudgets",
    "BudgetObserver",
    "ClassLimit",
    "NullBudgetObserver",
    "derived_hold_seconds",
    "parse_resource_policies",
    "request_class",
]

Clock = Callable[[], float]
Sleep = Callable[[float], None]

ARM_TOO_MANY_REQUESTS_HOLD_FLOOR = 5.0
UNKNOWN_POLICY_HOLD = 30.0


@dataclass(frozen=True)
class ClassLimit:
    """One ARM bucket as Azure documents it."""

    capacity: int
    refill_per_second: float


ARM_LIMITS: dict[str, ClassLimit] = {
    "reads": ClassLimit(250, 25.0),
    "writes": ClassLimit(200, 10.0),
    "deletes": ClassLimit(200, 10.0),
}


class BudgetObserver(Protocol):
    """Receives what the budget learns; must be thread-safe and quick."""

    def remaining(self, subscription: str, request_class: str, value: int) -> None: ...

    def throttled(self, request_class: str, code: str) -> None: ...


class NullBudgetObserver:
    """Records nothing."""

    def remaining(self, subscription: str, request_class: str, value: int) -> None:  # noqa: ARG002
        return None

    def throttled(self, request_class: str, code: str) -> None:  # noqa: ARG002
        return None


def request_class(method: str) -> str:
    """``reads``, ``writes`` or ``deletes``: the ARM bucket a request draws from."""
    upper = method.upper()
    if upper in ("GET", "HEAD", "OPTIONS"):
        return "reads"
    if upper == "DELETE":
        return "deletes"
    return "writes"


def window_seconds(policy: str) -> float:
    """The window of a Compute policy from its name's suffix (``...3Min``, ``...30Min``)."""
    lowered = policy.lower()
    if lowered.endswith("30min"):
        return 1800.0
    if lowered.endswith("3min"):
        return 180.0
    return 180.0


def parse_resource_policies(header: str | None) -> dict[str, int]:
    """``Microsoft.Compute/GetVMScaleSet3Min;197,...`` as ``{"GetVMScaleSet3Min": 197, ...}``."""
    policies: dict[str, int] = {}
    for part in (header or "").split(","):
        name, _, value = part.strip().partition(";")
        if not value:
            continue
        try:
            policies[name.rsplit("/", 1)[-1]] = int(value)
        except ValueError:
            continue
    return policies


def throttling_policies(body: bytes | str | None) -> list[str]:
    """Policy names a Compute 429 names in ``error.details[].target`` (empty when none)."""
    try:
        document = json.loads(body or b"{}")
    except ValueError:
        return []
    error = document.get("error") if isinstance(document, dict) else None
    details = error.get("details") if isinstance(error, dict) else None
    if not isinstance(details, list):
        return []
    return [str(detail["target"]) for detail in details if isinstance(detail, dict) and detail.get("target")]


def derived_hold_seconds(code: str, policies: list[str], limit: ClassLimit, reserve: int) -> float:
    """How long to hold a class after a 429 that named no ``Retry-After`` (see module docstring)."""
    if policies:
        return max(window_seconds(policy) / 6.0 for policy in policies)
    if code.lower() == "operationnotallowed":
        return UNKNOWN_POLICY_HOLD
    return max(ARM_TOO_MANY_REQUESTS_HOLD_FLOOR, reserve / limit.refill_per_second)


class _Bucket:
    """A local mirror of one remote budget: estimate, lowered by what the server reports."""

    def __init__(self, capacity: float, refill_per_second: float, now: float) -> None:
        self.capacity = capacity
        self.refill_per_second = refill_per_second
        self.tokens = capacity
        self.updated = now

    def refill(self, now: float) -> None:
        elapsed = max(0.0, now - self.updated)
        self.tokens = min(self.capacity, self.tokens + elapsed * self.refill_per_second)
        self.updated = now

    def take(self, now: float, reserve: float) -> float:
        """Take a token; the seconds to wait so that ``reserve`` tokens stay after it."""
        self.refill(now)
        self.tokens -= 1.0
        shortfall = reserve - self.tokens
        return 0.0 if shortfall <= 0 else shortfall / self.refill_per_second

    def report(self, now: float, remaining: int) -> None:
        self.refill(now)
        self.tokens = min(self.tokens, float(remaining))


class _ClassState:
    def __init__(self, limit: ClassLimit, now: float) -> None:
        self.bucket = _Bucket(float(limit.capacity), limit.refill_per_second, now)
        self.limit = limit
        self.hold_until = 0.0
        self.throttles_in_a_row = 0


class ArmBudget:
    """The request budget of one subscription and principal; see the module docstring."""

    def __init__(
        self,
        subscription: str,
        *,
        limits: Mapping[str, ClassLimit] | None = None,
        reserve_fraction: float = 0.1,
        observer: BudgetObserver | None = None,
        clock: Clock = time.monotonic,
    ) -> None:
        self.subscription = subscription
        self.limits = dict(limits or ARM_LIMITS)
        self.reserve_fraction = reserve_fraction
        self.observer: BudgetObserver = observer or NullBudgetObserver()
        self._clock = clock
        self._lock = threading.Lock()
        now = clock()
        self._classes = {kind: _ClassState(limit, now) for kind, limit in self.limits.items()}
        self._policies: dict[str, PolicyWindow] = {}
        self._policies_of: dict[str, set[str]] = {}
        self._prepaid = threading.local()

    def _reserve(self, capacity: float) -> float:
        return max(1.0, capacity * self.reserve_fraction)

    def wait_seconds(self, method: str, operation: str) -> float:
        """Take the tokens one request needs; the seconds it must wait before it is sent."""
        now = self._clock()
        with self._lock:
            state = self._classes[request_class(method)]
            wait = max(state.hold_until - now, 0.0)
            wait = max(wait, state.bucket.take(now, self._reserve(state.bucket.capacity)))
            for policy in self._policies_of.get(operation, ()):
                window = self._policies[policy]
                wait = max(wait, window.take(now, self._reserve(window.capacity)))
            return wait

    def prepay(self, method: str, operation: str, max_wait: float, sleep: Sleep = time.sleep) -> float:
        """Take now the tokens a request of this calling thread will need, before the reads it
        rests on (a read-modify-write): 0.0 when they are taken (after pacing up to
        ``max_wait``; the request then passes ``ArmBudgetPolicy`` without taking them again), else
        the seconds until they could be (nothing taken: the caller comes back then, no read spent)."""
        if _credit(method, operation) in self._credits():
            return 0.0  # prepaid already (an enclosing read-modify-write of this thread)
        held = self.held_for(method)
        if held > 0:
            return held
        wait = self.wait_seconds(method, operation)
        if wait > max_wait:
            self.refund(method, operation)
            return wait
        if wait > 0:
            sleep(wait)
        self._credits().append(_credit(method, operation))
        return 0.0

    def spend_prepaid(self, method: str, operation: str) -> bool:
        """Whether this thread prepaid this request (the credit is spent by the answer)."""
        credits, key = self._credits(), _credit(method, operation)
        if key in credits:
            credits.remove(key)
            return True
        return False

    def release_prepaid(self, method: str, operation: str) -> None:
        """Give back a credit of this thread that no request spent (nothing was sent)."""
        if self.spend_prepaid(method, operation):
            self.refund(method, operation)

    def _credits(self) -> list[str]:
        credits: list[str] | None = getattr(self._prepaid, "credits", None)
        if credits is None:
            credits = self._prepaid.credits = []
        return credits

    def refund(self, method: str, operation: str) -> None:
        """Give back the tokens ``wait_seconds`` took for a request that was not sent."""
        now = self._clock()
        with self._lock:
            bucket = self._classes[request_class(method)].bucket
            bucket.refill(now)
            bucket.tokens = min(bucket.capacity, bucket.tokens + 1.0)
            for policy in self._policies_of.get(operation, ()):
                self._policies[policy].give_back(now)

    def held_for(self, method: str) -> float:
        """Seconds left on the 429 hold of the class of ``method``."""
        with self._lock:
            return max(0.0, self._classes[request_class(method)].hold_until - self._clock())

    def learn(self, method: str, operation: str, status: int, headers: Mapping[str, str], body: Any) -> None:
        """Take in one answer: the remaining counts it reports and, for a 429, the hold."""
        lowered = {key.lower(): value for key, value in headers.items()}
        kind = request_class(method)
        now = self._clock()
        with self._lock:
            state = self._classes[kind]
            reported = lowered.get(f"x-ms-ratelimit-remaining-subscription-{kind}")
            if reported is not None and reported.strip().isdigit():
                state.bucket.report(now, int(reported))
                self.observer.remaining(self.subscription, kind, int(reported))
            self._learn_policies(
                operation, parse_resource_policies(lowered.get("x-ms-ratelimit-remaining-resource")), now
            )
            if status == 429:
                self._hold(state, kind, lowered, body, now)
            else:
                state.throttles_in_a_row = 0

    def _learn_policies(self, operation: str, policies: dict[str, int], now: float) -> None:
        if policies:
            self._policies_of[operation] = set(policies)
        for name, remaining in policies.items():
            window = self._policies.get(name)
            if window is None:
                window = self._policies[name] = PolicyWindow(float(remaining + 1), window_seconds(name))
            window.capacity = max(window.capacity, float(remaining + 1))
            window.report(now, remaining)

    def _hold(self, state: _ClassState, kind: str, headers: dict[str, str], body: Any, now: float) -> None:
        code = _error_code(body) or "TooManyRequests"
        self.observer.throttled(kind, code)
        retry_after = parse_retry_after(headers)
        named = throttling_policies(body)
        if retry_after is None:
            base = derived_hold_seconds(code, named, state.limit, int(self._reserve(state.bucket.capacity)))
            retry_after = min(base * 2.0 ** min(state.throttles_in_a_row, 6), max(2.0 * base, 60.0))
        for name in named:  # spent for as long as the class is held: then ARM's report decides
            if name in self._policies:
                self._policies[name].exhaust(now, retry_after)
        state.throttles_in_a_row += 1
        state.hold_until = max(state.hold_until, now + retry_after)


def _error_code(body: Any) -> str | None:
    try:
        document = json.loads(body or b"{}")
    except (TypeError, ValueError):
        return None
    error = document.get("error") if isinstance(document, dict) else None
    code = error.get("code") if isinstance(error, dict) else None
    return str(code) if code else None


def _credit(method: str, operation: str) -> str:
    return f"{method.upper()} {operation}"


class ArmBudgets:
    """The ARM request budgets of one owner (a manager's clouds), one per ARM endpoint,
    subscription and principal, so that every client of that owner draws on the same buckets."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._budgets: dict[tuple[str, str, str], ArmBudget] = {}

    def get(self, endpoint: str, subscription: str, principal: str, **options: Any) -> ArmBudget:
        """The budget for ``subscription`` and ``principal`` at ``endpoint`` (``options`` are
        ``ArmBudget``'s and apply on first use only)."""
        key = (endpoint.lower(), subscription.lower(), principal)
        with self._lock:
            budget = self._budgets.get(key)
            if budget is None:
                budget = self._budgets[key] = ArmBudget(subscription, **options)
            return budget


class ArmBudgetPolicy(HTTPPolicy[Any, Any]):
    """Refuses each attempt of a held class, paces the others by the shared budget (within
    ``max_wait_seconds``), and teaches the budget from each answer."""

    def __init__(
        self,
        budget: ArmBudget,
        *,
        max_wait_seconds: float = DEFAULT_PACING_MAX_WAIT_SECONDS,
        sleep: Sleep = time.sleep,
    ) -> None:
        super().__init__()
        self.budget = budget
        self.max_wait_seconds = max_wait_seconds
        self._sleep = sleep

    def send(self, request: PipelineRequest[Any]) -> PipelineResponse[Any, Any]:
        method = request.http_request.method
        operation = operation_name(method, request.http_request.url)
        held = self.budget.held_for(method)
        if held > 0:  # never slept: the caller reads and decides again after the hold
            raise held_error(f"class {request_class(method)} after a 429", held)
        wait = (
            0.0
            if self.budget.spend_prepaid(method, operation)
            else self.budget.wait_seconds(method, operation)
        )
        if wait > 0:
            if paced_seconds(request) + wait > self.max_wait_seconds:
                self.budget.refund(method, operation)
                raise held_error(f"class {request_class(method)} by the budget", wait, code="ClientPacing")
            self._sleep(wait)
            note_paced(request, wait)
        response = self.next.send(request)
        http_response = response.http_response
        body = http_response.body() if http_response.status_code == 429 else None
        self.budget.learn(method, operation, http_response.status_code, dict(http_response.headers), body)
        return response
