"""The checks an ARM request passes, in order, between routing and its handler.

:data:`GUARDS` is the order, and each guard is a small function with one job: it refuses the
request by raising :class:`~nodewright.cloud.emulator.errors.ArmError`, or lets it on, perhaps
noting something on the :class:`GuardedRequest` (the rate-limit headers every answer carries,
what an injected fault decided for the long-running operation). The order is the contract
clients see: added latency first; then an unknown route; a missing bearer token wins over
everything after it, a missing api-version over the limits, the limits over the injected faults,
the injected 429s and 5xx over a malformed body; and a refused request consumes no fault of a
later guard and reaches no handler. The body is parsed once (:meth:`RequestBody.parse`) before
the guards run. Side effects: guards consume injected faults, count requests against the
limits, and the latency guard sleeps (outside the state lock).
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from nodewright.cloud.emulator.errors import ArmError, ErrorCode
from nodewright.cloud.emulator.faults import Fault, FaultInjector, FaultKind
from nodewright.cloud.emulator.long_running import OperationError
from nodewright.cloud.emulator.routing import ArmRequest, Route
from nodewright.cloud.emulator.throttling import Throttling, compute_throttle_error, principal_of

__all__ = ["GUARDS", "Defences", "Guard", "GuardedRequest", "RequestBody", "run_guards"]

_MUTATING = frozenset({"PUT", "PATCH", "POST", "DELETE"})


@dataclass(frozen=True)
class RequestBody:
    """A request body parsed once: its JSON value (None when empty or not JSON) and, when it
    is not JSON, why."""

    value: Any = None
    error: ValueError | None = None

    @classmethod
    def parse(cls, raw: bytes) -> RequestBody:
        if not raw:
            return cls()
        try:
            return cls(json.loads(raw))
        except ValueError as error:
            return cls(None, error)


class Defences(Protocol):
    """What the guards consult: the injected faults and the request limits (read per request,
    as tests may swap either)."""

    faults: FaultInjector
    throttling: Throttling


@dataclass
class GuardedRequest:
    """One ARM request between routing and its handler.

    ``request`` is what the handler will get; ``route`` is None when no route matched, and then
    ``route_error`` says why (404 or 405). ``body_error`` is why the body is not JSON, if it is
    not. Guards add ``answer_headers`` (carried by every answer, refusals of later guards
    included) and ``fault`` (the injected fault to name in the request log).
    """

    request: ArmRequest
    route: Route | None
    route_error: ArmError | None = None
    body_error: ValueError | None = None
    answer_headers: dict[str, str] = field(default_factory=dict)
    fault: str | None = None

    def fault_for(self, defences: Defences, kind: FaultKind) -> Fault | None:
        """Take one use of the first injected fault of ``kind`` that matches this request."""
        request = self.request
        return defences.faults.take(kind, request.operation, request.method, request.path)


Guard = Callable[[Defences, GuardedRequest], None]


def add_latency(defences: Defences, guarded: GuardedRequest) -> None:
    """Sleep for the global latency plus the first matching latency fault (unknown routes too)."""
    request = guarded.request
    delay = defences.faults.latency(request.operation, request.method, request.path)
    if delay > 0:
        time.sleep(delay)


def require_route(defences: Defences, guarded: GuardedRequest) -> None:
    """A path no route serves answers 404 NoRegisteredProviderFound, another method 405."""
    del defences
    if guarded.route_error is not None:
        raise guarded.route_error


def require_bearer_token(defences: Defences, guarded: GuardedRequest) -> None:
    """No ``Authorization: Bearer <token>``: 401 AuthenticationFailed with WWW-Authenticate."""
    del defences
    authorization = guarded.request.headers.get("authorization", "")
    if not authorization.lower().startswith("bearer ") or not authorization[7:].strip():
        raise ArmError(
            401,
            ErrorCode.AUTHENTICATION_FAILED,
            "Authentication failed. The 'Authorization' header is missing or is not a bearer token.",
            headers={"WWW-Authenticate": 'Bearer authorization_uri="https://login.microsoftonline.com/"'},
        )


def require_api_version(defences: Defences, guarded: GuardedRequest) -> None:
    """No ``api-version`` query parameter: 400 MissingApiVersionParameter."""
    del defences
    if not any(key.lower() == "api-version" for key in guarded.request.query):
        raise ArmError(
            400,
            ErrorCode.MISSING_API_VERSION,
            "The api-version query parameter (?api-version=) is required.",
        )


def admit_within_limits(defences: Defences, guarded: GuardedRequest) -> None:
    """Count the request against ARM's buckets and Compute's policies (429 when spent); the
    rate-limit headers go on every later answer."""
    request = guarded.request
    guarded.answer_headers.update(
        defences.throttling.admit(
            method=request.method,
            operation=request.operation,
            subscription=request.parameters.get("subscriptionId", ""),
            principal=principal_of(request.headers.get("authorization", "")),
        )
    )


def injected_compute_throttle(defences: Defences, guarded: GuardedRequest) -> None:
    """An injected Compute throttle: 429 OperationNotAllowed naming its policy, Retry-After only
    when the fault gives one."""
    fault = guarded.fault_for(defences, FaultKind.COMPUTE_THROTTLE)
    if fault is None:
        return
    headers = {"Retry-After": str(math.ceil(fault.retry_after))} if fault.retry_after > 0 else {}
    raise compute_throttle_error([(fault.code or "PutVMScaleSetVM3Min", 0, 0)], headers)


def injected_throttle(defences: Defences, guarded: GuardedRequest) -> None:
    """An injected throttle: 429 TooManyRequests with Retry-After (whole seconds)."""
    fault = guarded.fault_for(defences, FaultKind.THROTTLE)
    if fault is None:
        return
    seconds = max(0, math.ceil(fault.retry_after))
    raise ArmError(
        429,
        ErrorCode.TOO_MANY_REQUESTS,
        f"The request is being throttled. Retry after {seconds} seconds.",
        headers={"Retry-After": str(seconds)},
    )


def injected_server_error(defences: Defences, guarded: GuardedRequest) -> None:
    """An injected server error: its status (5xx) with InternalServerError."""
    fault = guarded.fault_for(defences, FaultKind.SERVER_ERROR)
    if fault is not None:
        raise ArmError(fault.status, ErrorCode.INTERNAL_SERVER_ERROR, "An injected server error occurred.")


def require_json_body(defences: Defences, guarded: GuardedRequest) -> None:
    """A body that is not JSON: 400 InvalidRequestContent."""
    del defences
    error = guarded.body_error
    if error is not None:
        raise ArmError(
            400, ErrorCode.INVALID_REQUEST_CONTENT, f"The request content is not JSON: {error}"
        ) from error


def injected_operation_failure(defences: Defences, guarded: GuardedRequest) -> None:
    """A write accepted now whose long-running operation an injected fault will fail."""
    if guarded.request.method not in _MUTATING:
        return
    fault = guarded.fault_for(defences, FaultKind.OPERATION_FAILURE)
    if fault is None:
        return
    guarded.fault = str(FaultKind.OPERATION_FAILURE)
    guarded.request.operation_failure = OperationError(
        fault.code or ErrorCode.OPERATION_FAILED, fault.message or "The operation failed."
    )


def injected_operation_duration(defences: Defences, guarded: GuardedRequest) -> None:
    """A write whose long-running operation an injected fault makes last ``seconds``."""
    if guarded.request.method not in _MUTATING:
        return
    fault = guarded.fault_for(defences, FaultKind.OPERATION_DURATION)
    if fault is not None:
        guarded.request.operation_duration = fault.seconds


GUARDS: tuple[Guard, ...] = (
    add_latency,
    require_route,
    require_bearer_token,
    require_api_version,
    admit_within_limits,
    injected_compute_throttle,
    injected_throttle,
    injected_server_error,
    require_json_body,
    injected_operation_failure,
    injected_operation_duration,
)
"""The order every ARM request is checked in (see the module docstring)."""


def run_guards(defences: Defences, guarded: GuardedRequest) -> None:
    """Pass ``guarded`` through every guard in order; the first refusal raises."""
    for guard in GUARDS:
        guard(defences, guarded)
