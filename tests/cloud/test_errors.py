"""Translation of ARM failures into the cloud layer's exceptions, by status and ARM error code."""

from __future__ import annotations

import pytest

from nodewright.cloud.errors import (
    CloudError,
    ConflictError,
    ErrorFacts,
    IdentityRejectedError,
    InvalidRequestError,
    LimitExceededError,
    NotFoundError,
    PreconditionFailedError,
    SubnetFullError,
    ThrottledError,
    classify_error,
    identity_ids_named_in,
    is_terminal,
    parse_retry_after,
)

IDENTITY = (
    "/subscriptions/s/resourceGroups/rg/providers/Microsoft.ManagedIdentity/userAssignedIdentities/id-1"
)


@pytest.mark.parametrize(
    ("facts", "expected"),
    [
        pytest.param(ErrorFacts(404, "ResourceNotFound", "gone"), NotFoundError, id="not-found"),
        pytest.param(ErrorFacts(404, None, "gone"), NotFoundError, id="not-found-by-status"),
        pytest.param(ErrorFacts(429, "TooManyRequests", "slow down", 7.0), ThrottledError, id="throttled"),
        pytest.param(ErrorFacts(412, "PreconditionFailed", "etag"), PreconditionFailedError, id="etag"),
        pytest.param(ErrorFacts(409, "Conflict", "busy"), ConflictError, id="conflict"),
        pytest.param(ErrorFacts(400, "SubnetIsFull", "no room"), SubnetFullError, id="subnet-full"),
        pytest.param(
            ErrorFacts(400, "NetworkInterfaceIpConfigurationCountExceedsLimit", "257"),
            LimitExceededError,
            id="ip-configuration-limit",
        ),
        pytest.param(
            ErrorFacts(400, "FailedIdentityOperation", "Identities Number '151' Assign exceed limit '150'"),
            LimitExceededError,
            id="identity-limit",
        ),
        pytest.param(
            ErrorFacts(403, "LinkedAuthorizationFailed", f"linked scope(s) '{IDENTITY}' invalid"),
            IdentityRejectedError,
            id="linked-authorization",
        ),
        pytest.param(
            ErrorFacts(400, "InvalidParameter", "bad value"), InvalidRequestError, id="invalid-parameter"
        ),
        pytest.param(ErrorFacts(500, "InternalServerError", "oops"), CloudError, id="server-error"),
    ],
)
def test_classify(facts: ErrorFacts, expected: type[CloudError]) -> None:
    """Each ARM failure maps to exactly the expected exception type."""
    error = classify_error(facts)
    assert type(error) is expected
    assert error.status_code == facts.status_code


def test_throttled_error_carries_retry_after() -> None:
    """The seconds ARM named travel with the exception."""
    error = classify_error(ErrorFacts(429, "TooManyRequests", "x", 12.5))
    assert isinstance(error, ThrottledError)
    assert error.retry_after == 12.5


def test_identity_ids_are_found_in_messages() -> None:
    """Identity IDs named in a message come back lowercased, once each, in order."""
    message = f"Resource '{IDENTITY}' was not found. Also '{IDENTITY.upper()}'."
    assert identity_ids_named_in(message) == (IDENTITY.lower(),)


@pytest.mark.parametrize(
    ("headers", "expected"),
    [
        pytest.param({"Retry-After": "5"}, 5.0, id="seconds"),
        pytest.param({"retry-after-ms": "1500"}, 1.5, id="milliseconds"),
        pytest.param({"x-ms-retry-after-ms": "250", "Retry-After": "9"}, 0.25, id="ms-wins"),
        pytest.param({"Retry-After": "Thu, 01 Jan 1970 00:00:10 GMT"}, 5.0, id="http-date"),
        pytest.param({}, None, id="absent"),
        pytest.param({"Retry-After": "soon"}, None, id="garbage"),
    ],
)
def test_parse_retry_after(headers: dict[str, str], expected: float | None) -> None:
    """Retry-After in every form ARM uses; a date is measured from ``now``."""
    assert parse_retry_after(headers, now=5.0) == expected


@pytest.mark.parametrize(
    ("facts", "terminal"),
    [
        pytest.param(ErrorFacts(400, "SubnetIsFull", "no room"), True, id="subnet-full"),
        pytest.param(ErrorFacts(400, "QuotaExceeded", "quota"), True, id="quota"),
        pytest.param(ErrorFacts(400, "InvalidParameter", "bad"), True, id="invalid-parameter"),
        pytest.param(ErrorFacts(429, "TooManyRequests", "slow down"), False, id="throttled"),
        pytest.param(ErrorFacts(500, "InternalServerError", "oops"), False, id="server-error"),
        pytest.param(ErrorFacts(412, "PreconditionFailed", "etag"), False, id="etag"),
    ],
)
def test_terminal_answers(facts: ErrorFacts, terminal: bool) -> None:
    """400-class answers are terminal (the same request cannot succeed); 429, 5xx and 412 are not."""
    assert is_terminal(classify_error(facts)) is terminal
