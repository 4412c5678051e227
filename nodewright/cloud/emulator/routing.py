"""Request routing: ARM path templates (as the SDKs spell them) mapped to handler functions.

A handler takes the state and an :class:`ArmRequest` and returns an :class:`ArmResponse` (or raises
:class:`~nodewright.cloud.emulator.errors.ArmError`). Templates match case-insensitively, because
the SDKs themselves mix ``Microsoft.Compute`` and ``microsoft.Compute``. This module also builds
the headers that start a long-running operation.
"""

from __future__ import annotations

import re
import time
import urllib.parse
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from nodewright.cloud.emulator.errors import ArmError, ErrorCode
from nodewright.cloud.emulator.long_running import Operation, OperationError
from nodewright.cloud.emulator.state import EmulatorState, Resource, ResourceGroup, etag_matches, resource_id

__all__ = [
    "ArmRequest",
    "ArmResponse",
    "Handler",
    "Route",
    "Router",
    "retry_after_headers",
    "start_operation",
]


@dataclass
class ArmRequest:
    """One parsed ARM request, plus what fault injection decided for its long-running operation."""

    method: str
    path: str
    query: dict[str, str]
    headers: dict[str, str]
    body: Any
    base_url: str
    parameters: dict[str, str] = field(default_factory=dict)
    operation: str = ""
    operation_failure: OperationError | None = None
    operation_duration: float | None = None

    def header(self, name: str) -> str | None:
        return self.headers.get(name.lower())

    def query_value(self, name: str) -> str | None:
        for key, value in self.query.items():
            if key.lower() == name.lower():
                return value
        return None

    def resource_group(self, state: EmulatorState) -> ResourceGroup:
        """The resource group the path names, or 404 ResourceGroupNotFound."""
        return state.require_resource_group(
            self.parameters["subscriptionId"], self.parameters["resourceGroupName"]
        )

    def resource_id(self, namespace: str, resource_type: str, name: str) -> str:
        """The ID of resource ``name`` of ``namespace/resource_type`` in the path's subscription and group."""
        return resource_id(
            self.parameters["subscriptionId"],
            self.parameters["resourceGroupName"],
            namespace,
            resource_type,
            name,
        )

    def require_resource(
        self, state: EmulatorState, resources: dict[str, Resource], resource_type: str, name_parameter: str
    ) -> Resource:
        """The resource of ``resource_type`` (``namespace/type``) that the path names by its
        ``name_parameter``, from ``resources`` (keyed by lower-case ID); 404 ResourceGroupNotFound
        or ResourceNotFound otherwise."""
        group = self.resource_group(state)
        namespace, type_name = resource_type.split("/", 1)
        name = self.parameters[name_parameter]
        found = resources.get(self.resource_id(namespace, type_name, name).lower())
        if found is None:
            raise ArmError.resource_not_found(resource_type, name, group.name)
        return found

    def current(
        self, resources: dict[str, Resource], namespace: str, resource_type: str, name_parameter: str
    ) -> tuple[str, Resource | None]:
        """For a write: the ID the path names (by its ``name_parameter``) and the resource there
        now (None when absent), once If-Match / If-None-Match hold (412 otherwise)."""
        arm_id = self.resource_id(namespace, resource_type, self.parameters[name_parameter])
        existing = resources.get(arm_id.lower())
        self.check_preconditions(existing, arm_id)
        return arm_id, existing

    def requested_location(self, default: str) -> str:
        """The body's ``location``, or ``default`` when it names none."""
        return str(self.json_object().get("location") or default)

    def requested_tags(self) -> dict[str, str] | None:
        """The body's ``tags`` when they are an object, else None."""
        tags = self.json_object().get("tags")
        return tags if isinstance(tags, dict) else None

    def json_object(self) -> dict[str, Any]:
        """The body as a JSON object, or 400 InvalidRequestContent."""
        if not isinstance(self.body, dict):
            raise ArmError(
                400, ErrorCode.INVALID_REQUEST_CONTENT, "The request content must be a JSON object."
            )
        return self.body

    def check_preconditions(self, resource: Resource | None, arm_id: str) -> None:
        """Apply If-Match / If-None-Match to ``resource`` (None when absent): 412 on mismatch."""

        if_match = self.header("if-match")
        if if_match is not None and (resource is None or not etag_matches(if_match, resource.etag)):
            raise ArmError.precondition_failed(arm_id)
        if_none_match = self.header("if-none-match")
        if if_none_match is not None and resource is not None and etag_matches(if_none_match, resource.etag):
            raise ArmError.precondition_failed(arm_id)


@dataclass
class ArmResponse:
    status: int
    body: Any = None
    headers: dict[str, str] = field(default_factory=dict)

    @classmethod
    def of(cls, resource: Resource, status: int = 200, headers: dict[str, str] | None = None) -> ArmResponse:
        """A resource document with its ``ETag`` header."""
        all_headers = {"ETag": resource.etag}
        all_headers.update(headers or {})
        return cls(status, resource.render(), all_headers)


Handler = Callable[[EmulatorState, ArmRequest], ArmResponse]


@dataclass(frozen=True)
class Route:
    method: str
    template: str
    name: str
    handler: Handler
    pattern: re.Pattern[str]


class Router:
    """Method + path template to handler."""

    def __init__(self) -> None:
        self.routes: list[Route] = []

    def add(self, method: str, template: str, name: str, handler: Handler) -> None:
        regex = re.sub(r"\\\{(\w+)\\\}", r"(?P<\1>[^/]+)", re.escape(template))
        pattern = re.compile(f"^{regex}/?$", re.IGNORECASE)
        self.routes.append(Route(method.upper(), template, name, handler, pattern))

    def resolve(self, method: str, path: str) -> tuple[Route, dict[str, str]]:
        """The route for ``method`` and ``path`` with its decoded parameters; 404 or 405 otherwise."""
        path_matched = False
        for route in self.routes:
            match = route.pattern.match(path)
            if match is None:
                continue
            path_matched = True
            if route.method == method.upper():
                parameters = {key: urllib.parse.unquote(value) for key, value in match.groupdict().items()}
                return route, parameters
        if path_matched:
            raise ArmError(
                405, "MethodNotAllowed", f"The requested method {method} is not allowed on {path}."
            )
        raise ArmError(
            404,
            ErrorCode.NO_ROUTE,
            f"No registered resource provider found for path '{path}' (the emulator does not serve it).",
        )


def start_operation(
    state: EmulatorState,
    request: ArmRequest,
    *,
    namespace: str,
    location: str,
    on_success: Callable[[], None],
    on_failure: Callable[[OperationError], None],
) -> dict[str, str]:
    """Register a long-running operation for this request; the ``Azure-AsyncOperation`` and
    ``Location`` headers to answer with. Its duration and failure come from fault injection."""
    duration = request.operation_duration
    operation = state.operations.start(
        subscription=request.parameters.get("subscriptionId", "unknown"),
        namespace=namespace,
        location=location,
        duration=state.operation_duration if duration is None else duration,
        on_success=on_success,
        on_failure=on_failure,
        error=request.operation_failure,
        started_by=request.operation,
    )
    api_version = request.query_value("api-version") or ""
    suffix = f"?api-version={urllib.parse.quote(api_version)}"
    headers = {"Azure-AsyncOperation": f"{request.base_url}{operation.status_path}{suffix}"}
    if request.method in ("POST", "DELETE"):
        # ARM adds Location for actions and deletes; PUT/PATCH finish with a GET of the resource.
        headers["Location"] = f"{request.base_url}{operation.result_path}{suffix}"
    headers.update(retry_after_headers(state, operation))
    return headers


def retry_after_headers(state: EmulatorState, operation: Operation) -> dict[str, str]:
    """``Retry-After`` for an answer about ``operation`` while it is still running (ARM paces the
    polls of a running operation; see :mod:`long_running`), when the state sets one. An operation
    due now (duration 0, the emulator's default) is over before any poll can come: none."""
    seconds = state.operation_retry_after
    if seconds is None or operation.status != "InProgress" or operation.due <= time.time():
        return {}
    return {"Retry-After": str(int(seconds)) if float(seconds).is_integer() else f"{seconds:g}"}
