"""The cloud layer's own exceptions, and their translation from azure-core errors.

Callers above ``cloud/`` never see ``azure.core.exceptions``: every operation in ``compute``,
``network`` and ``msi`` raises a ``CloudError`` subclass chosen by HTTP status and ARM error code.
``classify_error`` is the pure decision; ``translate_error`` applies it to an azure-core error.
``is_terminal`` names the answers that sending the same request again cannot change (400-class:
a full subnet, a limit or quota, an invalid request): retried only after a backoff that grows
from seconds to minutes (``backoff.py``), reported by the caller as a condition.
"""

from __future__ import annotations

import email.utils
import re
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from azure.core.exceptions import AzureError, HttpResponseError

IDENTITY_ID_IN_MESSAGE = re.compile(
    r"/subscriptions/[^/\s'\"]+/resourcegroups/[^/\s'\"]+/providers/microsoft\.managedidentity"
    r"/userassignedidentities/[^/\s'\",.;)]+",
    re.IGNORECASE,
)

IDENTITY_REJECTION_CODES = frozenset({"linkedauthorizationfailed", "failedidentityoperation"})
NOT_FOUND_CODES = frozenset(
    {"resourcenotfound", "notfound", "resourcegroupnotfound", "parentresourcenotfound"}
)
PRECONDITION_CODES = frozenset({"preconditionfailed", "anotheroperationinprogress"})
SUBNET_FULL_CODES = frozenset(
    {"subnetisfull", "privateipaddressallocationfailed", "insufficientsubnetsize", "subnetfull"}
)
LIMIT_CODES = frozenset(
    {
        "limitexceeded",
        "quotaexceeded",
        "toomanyuserassignedidentities",
        "maxnumberofipconfigurationsreached",
        "numberofipconfigurationsexceedslimit",
        "nicipconfigurationlimitreached",
        "networkinterfaceipconfigurationcountexceedslimit",
        "ipconfigurationlimitexceeded",
        "toomanyidentities",
        "toomanyipconfigurations",
    }
)


class CloudError(Exception):
    """Any failure of a cloud call. ``status_code`` and ``code`` come from ARM when it answered;
    ``target`` is the ARM resource the call was about, when known.

    A cloud error is expected: ``log_fields`` gives the one log line it deserves (ARM code and
    target, no traceback), and ``quiet`` ones (a call not sent because its target backs off) are
    not worth a line at all above debug. The controller runtime reads both by duck typing.
    """

    quiet = False
    retry_after: float | None = None
    """Seconds until a retry may succeed, when known (a hold, a Retry-After, a target's backoff)."""
    retry_at: float | None = None
    """The ``time.monotonic()`` when that wait ends (the controller runtime requeues for then)."""

    def __init__(self, message: str, *, status_code: int | None = None, code: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.status_code = status_code
        self.code = code
        self.target: str | None = None

    def log_fields(self) -> dict[str, Any]:
        """Key/value pairs for the one line that reports this failure (message cut short)."""
        first_line = self.message.strip().splitlines()[0] if self.message.strip() else ""
        fields: dict[str, Any] = {"error_code": self.code or "", "error": first_line[:200]}
        if self.status_code is not None:
            fields["status"] = self.status_code
        if self.target is not None:
            fields["target"] = self.target
        return fields


class NotFoundError(CloudError):
    """The resource does not exist (HTTP 404)."""


class ThrottledError(CloudError):
    """ARM throttled the call (HTTP 429); ``retry_after`` is seconds to wait, when ARM named it,
    and ``retry_at`` the ``time.monotonic()`` when that wait ends (a caller that spends time
    before it retries waits only for what is left)."""

    def __init__(
        self,
        message: str,
        *,
        retry_after: float | None,
        status_code: int | None = 429,
        code: str | None = None,
    ) -> None:
        super().__init__(message, status_code=status_code, code=code)
        self.retry_after = retry_after
        self.retry_at = None if retry_after is None else time.monotonic() + retry_after


class ConflictError(CloudError):
    """The resource changed or is busy (HTTP 409)."""


class PreconditionFailedError(ConflictError):
    """An If-Match etag no longer matched (HTTP 412): re-read and try again."""


PreconditionFailed = PreconditionFailedError


class LimitExceededError(CloudError):
    """An ARM limit was hit, such as 150 identities per request or 256 IP configurations per NIC."""


class SubnetFullError(CloudError):
    """The subnet has no free address for a new IP configuration."""


class InvalidRequestError(CloudError):
    """ARM refused the request as it is (HTTP 400 such as InvalidParameter or BadRequest): sending
    it again unchanged cannot succeed."""


TERMINAL_ERRORS: tuple[type[CloudError], ...] = (SubnetFullError, LimitExceededError, InvalidRequestError)


def is_terminal(error: BaseException) -> bool:
    """Whether ARM's answer is one that a retry of the same request cannot change (pure)."""
    return isinstance(error, TERMINAL_ERRORS)


def kept_back(error: BaseException) -> bool:
    """Whether our own request budget or rate limit kept the request back (never sent: no answer
    from ARM, so nothing about its target failed; come back after ``retry_after``). Pure."""
    return isinstance(error, ThrottledError) and error.status_code is None


class IdentityRejectedError(CloudError):
    """ARM refused specific user-assigned identities (LinkedAuthorizationFailed, FailedIdentityOperation)."""

    def __init__(
        self,
        message: str,
        *,
        identity_ids: tuple[str, ...],
        code: str | None,
        status_code: int | None = None,
    ) -> None:
        super().__init__(message, status_code=status_code, code=code)
        self.identity_ids = identity_ids


@dataclass(frozen=True)
class ErrorFacts:
    """What an ARM failure said, taken apart from its transport."""

    status_code: int | None
    code: str | None
    message: str
    retry_after: float | None = None


def identity_ids_named_in(message: str) -> tuple[str, ...]:
    """User-assigned identity IDs (lowercased, first-seen order) mentioned in an error message."""
    seen: dict[str, None] = {}
    for match in IDENTITY_ID_IN_MESSAGE.finditer(message):
        seen.setdefault(match.group(0).lower(), None)
    return tuple(seen)


def classify_error(facts: ErrorFacts) -> CloudError:
    """Choose our exception for an ARM failure: pure, by ARM error code first, then by status."""
    code = (facts.code or "").lower()
    message = facts.message
    status = facts.status_code
    if code in IDENTITY_REJECTION_CODES:
        named = identity_ids_named_in(message)
        if not named and "exceed limit" in message.lower():
            return LimitExceededError(message, status_code=status, code=facts.code)
        return IdentityRejectedError(message, identity_ids=named, code=facts.code, status_code=status)
    if status == 429 or code in {"toomanyrequests", "throttled"}:
        return ThrottledError(message, retry_after=facts.retry_after, status_code=status, code=facts.code)
    if code in SUBNET_FULL_CODES:
        return SubnetFullError(message, status_code=status, code=facts.code)
    if code in LIMIT_CODES:
        return LimitExceededError(message, status_code=status, code=facts.code)
    if status == 404 or code in NOT_FOUND_CODES:
        return NotFoundError(message, status_code=status, code=facts.code)
    if status == 412 or code in PRECONDITION_CODES:
        return PreconditionFailedError(message, status_code=status, code=facts.code)
    if status == 409:
        return ConflictError(message, status_code=status, code=facts.code)
    if status == 400:
        return InvalidRequestError(message, status_code=status, code=facts.code)
    return CloudError(message, status_code=status, code=facts.code)


def parse_retry_after(headers: Mapping[str, str], now: float | None = None) -> float | None:
    """Seconds to wait from ``retry-after-ms``, ``x-ms-retry-after-ms`` or ``Retry-After``
    (delta-seconds or an HTTP date); ``None`` when no header names a time."""
    lowered = {key.lower(): value for key, value in headers.items()}
    for name in ("retry-after-ms", "x-ms-retry-after-ms"):
        if name in lowered:
            try:
                return max(0.0, float(lowered[name]) / 1000.0)
            except ValueError:
                pass
    value = lowered.get("retry-after")
    if value is None:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        moment = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    current = time.time() if now is None else now
    return max(0.0, moment.timestamp() - current)


def facts_from(error: HttpResponseError) -> ErrorFacts:
    """Read status, ARM error code, message and Retry-After from an azure-core error."""
    response = error.response
    status = error.status_code
    code: str | None = None
    message = str(error.message or error)
    if error.error is not None:
        code = error.error.code
        message = error.error.message or message
    raw_headers: Any = getattr(response, "headers", None) if response is not None else None
    headers: Mapping[str, str] = dict(raw_headers) if raw_headers is not None else {}
    return ErrorFacts(status_code=status, code=code, message=message, retry_after=parse_retry_after(headers))


def translate_error(error: AzureError) -> CloudError:
    """Our exception for an azure-core failure (raise it ``from`` the original)."""
    if isinstance(error, HttpResponseError):
        return classify_error(facts_from(error))
    return CloudError(str(error.message or error))
