"""Azure's request limits, as the emulator enforces and reports them.

Two layers, as on Azure:

- **ARM token buckets** per subscription, principal (the bearer token) and request class:
  reads (GET/HEAD) 250 refilled at 25/s, writes (PUT/PATCH/POST) 200 at 10/s, deletes 200 at
  10/s. An empty bucket answers 429 ``TooManyRequests`` with ``Retry-After`` (the seconds until
  one token is back). Every answer carries ``x-ms-ratelimit-remaining-subscription-<class>``.
- **Compute resource provider policies**: per subscription, one sliding 3-minute and one
  30-minute window per operation family (``GetVMScaleSet``, ``PutVMScaleSetVM``, ...), sized from
  Azure's published per-minute token buckets (``DEFAULT_POLICIES``). Every
  Compute answer carries ``x-ms-ratelimit-remaining-resource`` (``Microsoft.Compute/
  GetVMScaleSet3Min;197,Microsoft.Compute/GetVMScaleSet30Min;1297``). A spent policy answers 429
  ``OperationNotAllowed`` naming the policy in ``details``; every ``omit_retry_after_every``-th
  such answer has no ``Retry-After`` (Azure sends it only sometimes).

``RequestLimits`` is the configuration (``enforce=False`` reports the headers but never answers
429, so tests that do not study throttling are not slowed). ``Throttling.admit`` is called by the
server once per authenticated ARM request, before faults and handlers: it returns the headers for
the answer, or raises the 429 ``ArmError`` (with those headers). Thread-safe; no I/O.
"""

from __future__ import annotations

import hashlib
import json
import math
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from nodewright.cloud.budget import request_class
from nodewright.cloud.emulator.errors import ArmError, ErrorCode

__all__ = [
    "COMPUTE_FAMILIES",
    "BucketLimit",
    "PolicyLimit",
    "RequestLimits",
    "Throttling",
    "compute_family",
    "compute_throttle_error",
    "limits_from_json",
    "principal_of",
]

Clock = Callable[[], float]

THREE_MINUTES = 180.0
THIRTY_MINUTES = 1800.0


@dataclass(frozen=True)
class BucketLimit:
    """An ARM token bucket: ``capacity`` tokens, refilled at ``refill_per_second``."""

    capacity: int
    refill_per_second: float


@dataclass(frozen=True)
class PolicyLimit:
    """A Compute policy family: calls allowed in the 3-minute and in the 30-minute window."""

    three_minutes: int
    thirty_minutes: int


# Operation families of the Compute resource provider, by the emulator's operation names.
# Operations not listed here count against no policy.
COMPUTE_FAMILIES: dict[str, str] = {
    "VirtualMachineScaleSets.get": "GetVMScaleSet",
    "VirtualMachineScaleSets.list": "HighCostGetVMScaleSet",
    "VirtualMachineScaleSets.create_or_update": "PutVMScaleSet",
    "VirtualMachineScaleSets.update": "PutVMScaleSet",
    "VirtualMachineScaleSets.delete": "DeleteVMScaleSet",
    "VirtualMachineScaleSets.delete_instances": "DeleteVMScaleSetVM",
    "VirtualMachineScaleSetVMs.list": "HighCostGetVMScaleSet",
    "VirtualMachineScaleSetVMs.get": "LowCostGet",
    "VirtualMachineScaleSetVMs.update": "PutVMScaleSetVM",
    "VirtualMachineScaleSetVMs.delete": "DeleteVMScaleSetVM",
    "VirtualMachines.list": "HighCostGet",
    "VirtualMachines.get": "LowCostGet",
    "VirtualMachines.instance_view": "LowCostGet",
    "VirtualMachines.create_or_update": "PutVM",
    "VirtualMachines.update": "PutVM",
    "VirtualMachines.delete": "DeleteVM",
}


def _published(capacity: int, refill_per_minute: int) -> PolicyLimit:
    """A policy from Azure's published subscription-level token bucket ("Compute throttling
    limits", learn.microsoft.com/azure/virtual-machines/compute-throttling-limits, 2024-05-27):
    ``capacity`` in the 3-minute window, the bucket's refill rate over the 30-minute one.

    A sliding window of C requests per C/R minutes has the bucket's burst (C) and its sustained
    rate (R a minute); it is never more permissive than the bucket, and less between window turns
    (the bucket gives R back each minute, the window the whole burst at once). For every family
    below C/R is 3 minutes, so the header's 3Min/30Min names (the form Azure's published header
    examples use) keep their meaning."""
    return PolicyLimit(capacity, refill_per_minute * 30)


DEFAULT_POLICIES: dict[str, PolicyLimit] = {
    "GetVMScaleSet": _published(2_400, 800),  # Low Cost Get VMSS
    "HighCostGetVMScaleSet": _published(1_080, 360),  # High Cost Get VMSS (its list; instance lists too)
    "HighCostGet": _published(900, 300),  # High Cost Get VM (lists)
    "LowCostGet": _published(6_000, 2_000),  # Get VMSS VMs (Low Cost Get VM allows 24,000: the lower)
    "PutVMScaleSet": _published(1_500, 500),  # Update VMSS (create-or-update included)
    "PutVMScaleSetVM": _published(1_500, 500),  # Update VMSS VMs
    "DeleteVMScaleSet": _published(525, 175),  # Delete VMSS
    "DeleteVMScaleSetVM": _published(1_500, 500),  # Delete VMSS VMs
    "PutVM": _published(1_500, 500),  # Put VM and Update VM
    "DeleteVM": _published(1_500, 500),  # Delete VM
}
"""Azure's published subscription-level limits. Its resource-level buckets (for example 12
updates of one VM, refilled at 4 a minute) are not modelled."""


def _azure_buckets() -> dict[str, BucketLimit]:
    return {
        "reads": BucketLimit(250, 25.0),
        "writes": BucketLimit(200, 10.0),
        "deletes": BucketLimit(200, 10.0),
    }


@dataclass
class RequestLimits:
    """What the emulator limits. ``enforce`` off: headers only, never a 429."""

    enforce: bool = False
    buckets: dict[str, BucketLimit] = field(default_factory=_azure_buckets)
    policies: dict[str, PolicyLimit] = field(default_factory=lambda: dict(DEFAULT_POLICIES))
    omit_retry_after_every: int = 2


def limits_from_json(document: dict[str, Any]) -> RequestLimits:
    """Limits from the admin endpoint's JSON: ``{"enforce": true, "buckets": {"writes":
    {"capacity": 200, "refillPerSecond": 10}}, "policies": {"PutVMScaleSetVM": {"threeMinutes":
    1500, "thirtyMinutes": 15000}}, "omitRetryAfterEvery": 2}``; what is not named keeps Azure's value."""
    limits = RequestLimits(enforce=bool(document.get("enforce", False)))
    for kind, bucket in (document.get("buckets") or {}).items():
        limits.buckets[kind] = BucketLimit(int(bucket["capacity"]), float(bucket["refillPerSecond"]))
    for family, policy in (document.get("policies") or {}).items():
        limits.policies[family] = PolicyLimit(int(policy["threeMinutes"]), int(policy["thirtyMinutes"]))
    limits.omit_retry_after_every = int(document.get("omitRetryAfterEvery", limits.omit_retry_after_every))
    return limits


def principal_of(authorization: str) -> str:
    """A stable short name for the caller: a hash of its bearer token (never the token)."""
    token = authorization[7:].strip() if authorization.lower().startswith("bearer ") else authorization
    return hashlib.sha256(token.encode()).hexdigest()[:16]


def compute_family(operation: str) -> str | None:
    """The Compute policy family of an emulator operation name, or None."""
    return COMPUTE_FAMILIES.get(operation)


class _Bucket:
    def __init__(self, limit: BucketLimit, now: float) -> None:
        self.limit = limit
        self.tokens = float(limit.capacity)
        self.updated = now

    def refill(self, now: float) -> None:
        elapsed = max(0.0, now - self.updated)
        self.tokens = min(float(self.limit.capacity), self.tokens + elapsed * self.limit.refill_per_second)
        self.updated = now


class _Window:
    def __init__(self, seconds: float, allowed: int) -> None:
        self.seconds = seconds
        self.allowed = allowed
        self.calls: deque[float] = deque()

    def expire(self, now: float) -> None:
        while self.calls and self.calls[0] <= now - self.seconds:
            self.calls.popleft()

    def remaining(self) -> int:
        return max(0, self.allowed - len(self.calls))

    def free_in(self, now: float) -> float:
        return 0.0 if not self.calls else max(0.0, self.calls[0] + self.seconds - now)


class Throttling:
    """The emulator's request limits and their state; see the module docstring."""

    def __init__(self, limits: RequestLimits | None = None, clock: Clock = time.monotonic) -> None:
        self.limits = limits or RequestLimits()
        self._clock = clock
        self._lock = threading.Lock()
        self._buckets: dict[tuple[str, str, str], _Bucket] = {}
        self._windows: dict[tuple[str, str, str], _Window] = {}
        self._compute_throttles = 0
        self.throttled: dict[str, int] = {}

    def configure(self, limits: RequestLimits) -> None:
        """Replace the limits and forget all state (buckets full, windows empty)."""
        with self._lock:
            self.limits = limits
            self._buckets.clear()
            self._windows.clear()
            self._compute_throttles = 0
            self.throttled.clear()

    def admit(self, *, method: str, operation: str, subscription: str, principal: str) -> dict[str, str]:
        """Count one request; the rate-limit headers for its answer, or raise a 429 ``ArmError``."""
        now = self._clock()
        with self._lock:
            kind = request_class(method)
            headers: dict[str, str] = {}
            bucket = self._bucket(subscription, principal, kind, now)
            family = compute_family(operation)
            windows = self._family_windows(subscription, family, now) if family else []
            if self.limits.enforce and bucket.tokens < 1.0:
                headers[f"x-ms-ratelimit-remaining-subscription-{kind}"] = "0"
                raise self._arm_throttle(kind, subscription, bucket, headers)
            spent = [(name, window) for name, window in windows if window.remaining() <= 0]
            if self.limits.enforce and spent:
                headers[f"x-ms-ratelimit-remaining-subscription-{kind}"] = str(int(bucket.tokens))
                headers["x-ms-ratelimit-remaining-resource"] = _resource_header(windows)
                raise self._compute_throttle(spent, headers, now)
            bucket.tokens -= 1.0
            for _, window in windows:
                window.calls.append(now)
            headers[f"x-ms-ratelimit-remaining-subscription-{kind}"] = str(max(0, int(bucket.tokens)))
            if windows:
                headers["x-ms-ratelimit-remaining-resource"] = _resource_header(windows)
            return headers

    def _bucket(self, subscription: str, principal: str, kind: str, now: float) -> _Bucket:
        key = (subscription.lower(), principal, kind)
        bucket = self._buckets.get(key)
        if bucket is None:
            bucket = self._buckets[key] = _Bucket(self.limits.buckets[kind], now)
        bucket.refill(now)
        return bucket

    def _family_windows(self, subscription: str, family: str, now: float) -> list[tuple[str, _Window]]:
        limit = self.limits.policies.get(family)
        if limit is None:
            return []
        found = []
        for suffix, seconds, allowed in (
            ("3Min", THREE_MINUTES, limit.three_minutes),
            ("30Min", THIRTY_MINUTES, limit.thirty_minutes),
        ):
            name = f"{family}{suffix}"
            key = (subscription.lower(), name, "")
            window = self._windows.get(key)
            if window is None:
                window = self._windows[key] = _Window(seconds, allowed)
            window.expire(now)
            found.append((name, window))
        return found

    def _arm_throttle(
        self, kind: str, subscription: str, bucket: _Bucket, headers: dict[str, str]
    ) -> ArmError:
        self.throttled[ErrorCode.TOO_MANY_REQUESTS] = self.throttled.get(ErrorCode.TOO_MANY_REQUESTS, 0) + 1
        seconds = max(1, math.ceil((1.0 - bucket.tokens) / bucket.limit.refill_per_second))
        return ArmError(
            429,
            ErrorCode.TOO_MANY_REQUESTS,
            f"Number of '{kind[:-1]}' requests for subscription '{subscription}' exceeded the limit. "
            f"Please try again after '{seconds}' seconds.",
            headers={**headers, "Retry-After": str(seconds)},
        )

    def _compute_throttle(
        self, spent: list[tuple[str, _Window]], headers: dict[str, str], now: float
    ) -> ArmError:
        self._compute_throttles += 1
        self.throttled[ErrorCode.OPERATION_NOT_ALLOWED] = (
            self.throttled.get(ErrorCode.OPERATION_NOT_ALLOWED, 0) + 1
        )
        wait = max(window.free_in(now) for _, window in spent)
        every = self.limits.omit_retry_after_every
        if not (every > 0 and self._compute_throttles % every == 0):
            headers = {**headers, "Retry-After": str(max(1, math.ceil(wait)))}
        return compute_throttle_error(
            [(name, window.allowed, len(window.calls)) for name, window in spent], headers
        )


def compute_throttle_error(spent: list[tuple[str, int, int]], headers: dict[str, str]) -> ArmError:
    """The Compute resource provider's 429: ``OperationNotAllowed``, each spent policy in details."""
    error = ArmError(
        429,
        ErrorCode.OPERATION_NOT_ALLOWED,
        "The server rejected the request because too many requests have been received for this subscription.",
        headers=headers,
    )
    error.details = [
        {
            "code": "TooManyRequests",
            "target": name,
            "message": json.dumps(
                {"operationGroup": name, "allowedRequestCount": allowed, "measuredRequestCount": measured}
            ),
        }
        for name, allowed, measured in spent
    ]
    return error


def _resource_header(windows: list[tuple[str, _Window]]) -> str:
    return ",".join(f"Microsoft.Compute/{name};{window.remaining()}" for name, window in windows)
