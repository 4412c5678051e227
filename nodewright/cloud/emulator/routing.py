"""Request routing: ARM path templates (as the SDKs spell them) mapped to handler functions.

A handler takes the state and an :class:`ArmRequest` and returns an :class:`ArmResponse` (or raises
:class:`~nodewright.cloud.emulator.errors.ArmError`). Templates match case-insensitively, because
the SDKs themselves mix ``Microsoft.Compute`` and ``microsoft.Compute``. This module also builds
the headers that start a long-running operation.
"""

from __future__ import annotations

import re
import urllib.parse
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from nodewright.cloud.emulator.errors import ArmError, ErrorCode
from nodewright.cloud.emulator.long_running import OperationError
from nodewright.cloud.emulator.state import EmulatorState, Resource, etag_matches

__all__ = ["ArmRequest", "ArmResponse", "Handler", "Route", "Router", "start_operation"]


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
    )
    api_version = request.query_value("api-version") or ""
    suffix = f"?api-version={urllib.parse.quote(api_version)}"
    headers = {"Azure-AsyncOperation": f"{request.base_url}{operation.status_path}{suffix}"}
    if request.method in ("POST", "DELETE"):
        # ARM adds Location for actions and deletes; PUT/PATCH finish with a GET of the resource.
        headers["Location"] = f"{request.base_url}{operation.result_path}{suffix}"
    return headers
