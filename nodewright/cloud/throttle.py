"""Throttling and call accounting for every request the Azure SDK clients send.

Owns three azure-core pipeline policies, placed after azure-core's ``RetryPolicy`` by the
``factory`` so that they see every attempt, retries included:

- ``RetryAfterGatePolicy``: after a 429 naming a Retry-After, no request of the same operation
  class (host, resource provider, read or write) leaves before that time. A held request is not
  slept: it fails at once with a quiet ``ThrottledError`` naming the time left, so that the
  caller comes back then, reads again and decides again (a request built before the hold would
  otherwise be sent after it, carrying a plan the world has moved past).
- ``MutationRateLimitPolicy``: a token bucket (qps, burst) shared by all clients, taken by every
  mutating request (anything but GET/HEAD/OPTIONS). Waiting for a token is pacing, slept in the
  calling thread, but only up to ``max_wait_seconds`` for the whole attempt (``PACED_SECONDS``
  in the request's context adds up what every pacing policy slept); a longer wait gives the
  token back and fails at once like a hold.
- ``RequestCountingPolicy``: each attempt reported to a ``CallObserver`` by operation and outcome.

``CallObserver`` is the seam to metrics: the controllers layer wires it to OpenTelemetry;
``InMemoryCallCounter`` serves tests and benchmarks. ``observe_call`` counts one logical call of
the cloud layer (``compute.add_identities`` and so on) by outcome. This module knows nothing of
``nodewright.runtime``.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Protocol
from urllib.parse import urlsplit

from azure.core.pipeline import PipelineRequest, PipelineResponse
from azure.core.pipeline.policies import HTTPPolicy, SansIOHTTPPolicy

from nodewright.cloud.errors import (
    CloudError,
    ConflictError,
    IdentityRejectedError,
    LimitExceededError,
    NotFoundError,
    PreconditionFailedError,
    SubnetFullError,
    ThrottledError,
    parse_retry_after,
)

READ_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})

PACED_SECONDS = "nodewright_paced_seconds"
"""The request context key under which pacing policies add up the seconds an attempt slept."""

DEFAULT_PACING_MAX_WAIT_SECONDS = 1.0
"""The longest pacing wait one attempt sleeps (see ``docs/cloud-retries.md``)."""

Clock = Callable[[], float]
Sleep = Callable[[float], None]


@dataclass(frozen=True)
class CallEvent:
    """One counted event. ``kind`` is ``"call"`` (a cloud-layer operation) or ``"request"`` (one HTTP
    attempt, retries included); ``outcome`` is a word such as ``success`` or an HTTP status."""

    kind: str
    operation: str
    outcome: str
    duration_seconds: float


class CallObserver(Protocol):
    """Receives every counted event; must be thread-safe and quick."""

    def record(self, event: CallEvent) -> None: ...


class NullObserver:
    """Counts nothing."""

    def record(self, event: CallEvent) -> None:  # noqa: ARG002 - counts nothing by design
        return None


class InMemoryCallCounter:
    """Counts events in memory, by (kind, operation, outcome); keeps the events for inspection."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counts: Counter[tuple[str, str, str]] = Counter()
        self._events: list[CallEvent] = []

    def record(self, event: CallEvent) -> None:
        with self._lock:
            self._counts[(event.kind, event.operation, event.outcome)] += 1
            self._events.append(event)

    def count(
        self, *, kind: str | None = None, operation: str | None = None, outcome: str | None = None
    ) -> int:
        """How many events match every given field."""
        with self._lock:
            return sum(
                number
                for (event_kind, event_operation, event_outcome), number in self._counts.items()
                if (kind is None or kind == event_kind)
                and (operation is None or operation == event_operation)
                and (outcome is None or outcome == event_outcome)
            )

    @property
    def events(self) -> list[CallEvent]:
        with self._lock:
            return list(self._events)

    def reset(self) -> None:
        with self._lock:
            self._counts.clear()
            self._events.clear()


def outcome_of(error: BaseException | None) -> str:
    """The outcome word for a finished call."""
    if error is None:
        return "success"
    for error_type, word in (
        (NotFoundError, "not_found"),
        (ThrottledError, "throttled"),
        (PreconditionFailedError, "precondition_failed"),
        (ConflictError, "conflict"),
        (SubnetFullError, "subnet_full"),
        (LimitExceededError, "limit_exceeded"),
        (IdentityRejectedError, "identity_rejected"),
        (CloudError, "error"),
    ):
        if isinstance(error, error_type):
            return word
    return "error"


@contextmanager
def observe_call(observer: CallObserver, operation: str, clock: Clock = time.monotonic) -> Iterator[None]:
    """Count one cloud-layer call by its outcome (the exception it raised, if any)."""
    started = clock()
    try:
        yield
    except BaseException as error:
        observer.record(CallEvent("call", operation, outcome_of(error), clock() - started))
        raise
    observer.record(CallEvent("call", operation, "success", clock() - started))


def held_error(scope: str, seconds: float, *, code: str = "ClientThrottleHold") -> ThrottledError:
    """The quiet ``ThrottledError`` of a request not sent: ``scope`` is held (or its pacing wait
    is too long) for ``seconds`` more. The 429 that started a hold was logged already."""
    error = ThrottledError(
        f"Requests of {scope} are held for {seconds:.1f} s more; not sent",
        retry_after=seconds,
        status_code=None,
        code=code,
    )
    error.quiet = True
    return error


def paced_seconds(request: PipelineRequest[Any]) -> float:
    """The seconds pacing policies already slept for this request."""
    value = request.context.get(PACED_SECONDS, 0.0)
    return float(value) if isinstance(value, (int, float)) else 0.0


def note_paced(request: PipelineRequest[Any], seconds: float) -> None:
    """Add ``seconds`` of pacing sleep to the request's context."""
    request.context[PACED_SECONDS] = paced_seconds(request) + seconds


class TokenBucket:
    """A thread-safe token bucket: ``rate`` tokens per second, at most ``burst`` stored.

    ``reserve`` takes a token and returns how long the caller must wait before using it (pure
    given the clock); ``acquire`` reserves and sleeps. Waiters are served in arrival order.
    ``prepay`` takes a token for a mutation the calling thread sends next (a read-modify-write
    takes it before its read), which ``MutationRateLimitPolicy`` then lets pass.
    """

    def __init__(
        self, rate: float, burst: int, clock: Clock = time.monotonic, sleep: Sleep = time.sleep
    ) -> None:
        if rate <= 0 or burst < 1:
            raise ValueError("token bucket needs rate > 0 and burst >= 1")
        self.rate = rate
        self.burst = burst
        self._clock = clock
        self._sleep = sleep
        self._lock = threading.Lock()
        self._tokens = float(burst)
        self._updated = clock()
        self._prepaid = threading.local()

    def reserve(self) -> float:
        """Take one token (possibly going into debt) and return the seconds to wait for it."""
        with self._lock:
            now = self._clock()
            self._tokens = min(float(self.burst), self._tokens + (now - self._updated) * self.rate)
            self._updated = now
            self._tokens -= 1.0
            if self._tokens >= 0:
                return 0.0
            return -self._tokens / self.rate

    def prepay(self, max_wait: float) -> float:
        """Take now the token a mutation this thread is about to send will need (sleeping up to
        ``max_wait`` for it): 0.0 when taken (the request then passes the policy without taking
        another), else the seconds it would wait (nothing taken)."""
        if getattr(self._prepaid, "count", 0) > 0:
            return 0.0  # prepaid already (an enclosing read-modify-write of this thread)
        wait = self.reserve()
        if wait > max_wait:
            self.refund()
            return wait
        if wait > 0:
            self._sleep(wait)
        self._prepaid.count = 1
        return 0.0

    def spend_prepaid(self) -> bool:
        """Whether this thread holds a prepaid token (spent by this call)."""
        count: int = getattr(self._prepaid, "count", 0)
        if count <= 0:
            return False
        self._prepaid.count = count - 1
        return True

    def release_prepaid(self) -> None:
        """Give back this thread's prepaid token if no mutation spent it."""
        if self.spend_prepaid():
            self.refund()

    def refund(self) -> None:
        """Give back a token taken by ``reserve`` and not used (the request was not sent)."""
        with self._lock:
            self._tokens = min(float(self.burst), self._tokens + 1.0)

    def acquire(self) -> float:
        """Block until a token is available; returns the seconds waited."""
        wait = self.reserve()
        if wait > 0:
            self._sleep(wait)
        return wait


def operation_class(method: str, url: str) -> str:
    """The Retry-After scope of a request: host, resource provider and read or write."""
    parts = urlsplit(url)
    segments = [segment for segment in parts.path.split("/") if segment]
    provider = "arm"
    for index, segment in enumerate(segments[:-1]):
        if segment.lower() == "providers":
            provider = segments[index + 1].lower()
            break
    access = "read" if method.upper() in READ_METHODS else "write"
    return f"{parts.netloc.lower()} {provider} {access}"


def operation_name(method: str, url: str) -> str:
    """A low-cardinality name for a request: method plus the resource types in its path, such as
    ``PUT Microsoft.Compute/virtualMachineScaleSets/virtualMachines``."""
    segments = [segment for segment in urlsplit(url).path.split("/") if segment]
    for index, segment in enumerate(segments[:-1]):
        if segment.lower() == "providers":
            provider = segments[index + 1]
            types = segments[index + 2 :: 2]
            return f"{method.upper()} {'/'.join([provider, *types])}"
    return f"{method.upper()} {'/'.join(segments[0::2])}"


class RetryAfterGate:
    """Deadlines per operation class, set by 429 responses; thread-safe."""

    def __init__(self, clock: Clock = time.monotonic):
        self._clock = clock
        self._lock = threading.Lock()
        self._deadlines: dict[str, float] = {}

    def block(self, key: str, seconds: float) -> None:
        """Hold back ``key`` for ``seconds`` from now (a later deadline is never shortened)."""
        with self._lock:
            deadline = self._clock() + seconds
            if deadline > self._deadlines.get(key, 0.0):
                self._deadlines[key] = deadline

    def remaining(self, key: str) -> float:
        with self._lock:
            return max(0.0, self._deadlines.get(key, 0.0) - self._clock())

    def check(self, key: str) -> None:
        """Raise the quiet ``ThrottledError`` of ``held_error`` while ``key`` is held; never sleeps."""
        remaining = self.remaining(key)
        if remaining > 0:
            raise held_error(key, remaining)


class RetryAfterGatePolicy(HTTPPolicy[Any, Any]):
    """Refuses each attempt while its operation class is throttled; learns from 429s."""

    def __init__(self, gate: RetryAfterGate, classify: Callable[[str, str], str] = operation_class) -> None:
        super().__init__()
        self.gate = gate
        self._classify = classify

    def send(self, request: PipelineRequest[Any]) -> PipelineResponse[Any, Any]:
        key = self._classify(request.http_request.method, request.http_request.url)
        self.gate.check(key)
        response = self.next.send(request)
        if response.http_response.status_code == 429:
            retry_after = parse_retry_after(dict(response.http_response.headers))
            if retry_after is not None:
                self.gate.block(key, retry_after)
        return response


class MutationRateLimitPolicy(SansIOHTTPPolicy[Any, Any]):
    """Takes a token from the shared bucket before each mutating attempt: sleeps for it when the
    attempt's pacing stays within ``max_wait_seconds``, else gives it back and refuses."""

    def __init__(
        self,
        bucket: TokenBucket,
        *,
        max_wait_seconds: float = DEFAULT_PACING_MAX_WAIT_SECONDS,
        sleep: Sleep = time.sleep,
    ) -> None:
        self.bucket = bucket
        self.max_wait_seconds = max_wait_seconds
        self._sleep = sleep

    def on_request(self, request: PipelineRequest[Any]) -> None:
        if request.http_request.method.upper() in READ_METHODS or self.bucket.spend_prepaid():
            return
        wait = self.bucket.reserve()
        if wait <= 0:
            return
        if paced_seconds(request) + wait > self.max_wait_seconds:
            self.bucket.refund()
            raise held_error("the mutation rate limit", wait, code="ClientPacing")
        self._sleep(wait)
        note_paced(request, wait)


class RequestCountingPolicy(HTTPPolicy[Any, Any]):
    """Reports every HTTP attempt to the observer: operation name and status code (or error type)."""

    def __init__(self, observer: CallObserver, clock: Clock = time.monotonic) -> None:
        super().__init__()
        self.observer = observer
        self._clock = clock

    def send(self, request: PipelineRequest[Any]) -> PipelineResponse[Any, Any]:
        operation = operation_name(request.http_request.method, request.http_request.url)
        started = self._clock()
        try:
            response = self.next.send(request)
        except Exception as error:
            self.observer.record(
                CallEvent("request", operation, type(error).__name__, self._clock() - started)
            )
            raise
        self.observer.record(
            CallEvent("request", operation, str(response.http_response.status_code), self._clock() - started)
        )
        return response
