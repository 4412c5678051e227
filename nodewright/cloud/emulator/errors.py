"""ARM error responses: the exception handlers raise and the error codes the emulator uses.

Every failure the emulator reports travels as an :class:`ArmError`; the server turns it into the
ARM error body ``{"error": {"code": ..., "message": ...}}``. The codes are the ones Azure Resource
Manager and its resource providers return (see the package docstring for where each comes from).
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "IDENTITY_LIMIT_PER_REQUEST",
    "IP_CONFIGURATION_LIMIT_PER_NIC",
    "ArmError",
    "ErrorCode",
]

IDENTITY_LIMIT_PER_REQUEST = 150
IP_CONFIGURATION_LIMIT_PER_NIC = 256


class ErrorCode:
    """Error codes as ARM and the Compute, Network and ManagedIdentity providers spell them."""

    RESOURCE_NOT_FOUND = "ResourceNotFound"
    RESOURCE_GROUP_NOT_FOUND = "ResourceGroupNotFound"
    NOT_FOUND = "NotFound"
    PRECONDITION_FAILED = "PreconditionFailed"
    TOO_MANY_REQUESTS = "TooManyRequests"
    INTERNAL_SERVER_ERROR = "InternalServerError"
    AUTHENTICATION_FAILED = "AuthenticationFailed"
    MISSING_API_VERSION = "MissingApiVersionParameter"
    INVALID_REQUEST_CONTENT = "InvalidRequestContent"
    INVALID_PARAMETER = "InvalidParameter"
    BAD_REQUEST = "BadRequest"
    LINKED_AUTHORIZATION_FAILED = "LinkedAuthorizationFailed"
    FAILED_IDENTITY_OPERATION = "FailedIdentityOperation"
    IP_CONFIGURATION_COUNT_EXCEEDS_LIMIT = "NetworkInterfaceIpConfigurationCountExceedsLimit"
    IP_CONFIG_DELETE_NOT_SUPPORTED = "IpConfigDeleteNotSupported"
    SUBNET_IS_FULL = "SubnetIsFull"
    PRIVATE_IP_ADDRESS_IN_USE = "PrivateIPAddressInUse"
    PRIVATE_IP_ADDRESS_IS_ALLOCATED = "PrivateIPAddressIsAllocated"
    PRIVATE_IP_ADDRESS_IN_RESERVED_RANGE = "PrivateIPAddressInReservedRange"
    PRIVATE_IP_ADDRESS_MISSING = "PrivateIPAddressMissing"
    PRIVATE_IP_ADDRESS_NOT_IN_SUBNET = "PrivateIPAddressNotInSubnet"
    PLATFORM_IMAGE_NOT_FOUND = "PlatformImageNotFound"
    GALLERY_IMAGE_NOT_FOUND = "GalleryImageNotFound"
    OPERATION_NOT_ALLOWED = "OperationNotAllowed"
    OPERATION_FAILED = "OperationFailed"
    NO_ROUTE = "NoRegisteredProviderFound"


class ArmError(Exception):
    """A failed ARM call: HTTP status, ARM error code and message (and optional extra headers)."""

    def __init__(
        self,
        status: int,
        code: str,
        message: str,
        *,
        headers: dict[str, str] | None = None,
        target: str | None = None,
        details: list[dict[str, Any]] | None = None,
    ) -> None:
        super().__init__(f"{status} {code}: {message}")
        self.status = status
        self.code = code
        self.message = message
        self.headers = dict(headers or {})
        self.target = target
        self.details = details

    def body(self) -> dict[str, Any]:
        """The ARM error body for this error."""
        error: dict[str, Any] = {"code": self.code, "message": self.message}
        if self.target is not None:
            error["target"] = self.target
        if self.details:
            error["details"] = self.details
        return {"error": error}

    @classmethod
    def resource_not_found(cls, resource_type: str, name: str, resource_group: str) -> ArmError:
        return cls(
            404,
            ErrorCode.RESOURCE_NOT_FOUND,
            f"The Resource '{resource_type}/{name}' under resource group '{resource_group}' was not found. "
            "For more details please go to https://aka.ms/ARMResourceNotFoundFix",
        )

    @classmethod
    def resource_group_not_found(cls, resource_group: str) -> ArmError:
        return cls(
            404, ErrorCode.RESOURCE_GROUP_NOT_FOUND, f"Resource group '{resource_group}' could not be found."
        )

    @classmethod
    def precondition_failed(cls, resource_id: str) -> ArmError:
        return cls(
            412,
            ErrorCode.PRECONDITION_FAILED,
            f"Precondition failed for resource '{resource_id}': the If-Match or If-None-Match condition did "
            "not match the current etag.",
        )

    @classmethod
    def invalid_parameter(cls, message: str, target: str | None = None) -> ArmError:
        return cls(400, ErrorCode.INVALID_PARAMETER, message, target=target)
