"""The admin endpoints under ``/_emulator/`` (no auth, not in the request log), routed by a
:class:`~nodewright.cloud.emulator.routing.Router` as the ARM routes are.

``faults`` (GET lists, POST adds one fault or a list, DELETE clears), ``requests`` (GET, DELETE),
``state`` (GET the estate snapshot), ``reset`` (POST), ``seed`` (POST a seed document),
``throttling`` (POST request limits) and ``operation-duration`` (POST ``{"seconds": s, "retryAfter": r}``). An
empty body reads as ``{}``; a body that is not JSON answers 400 InvalidRequestContent, a bad
field 400 InvalidParameter, an unknown action 404 NotFound. Side effects: each action changes
the emulator it was built for (faults, request log, limits, estate).
"""

from __future__ import annotations

from typing import Any, Protocol

from nodewright.cloud.emulator.errors import ArmError, ErrorCode
from nodewright.cloud.emulator.faults import Fault, FaultInjector, FaultKind
from nodewright.cloud.emulator.guards import RequestBody
from nodewright.cloud.emulator.request_log import RequestLog
from nodewright.cloud.emulator.routing import ArmRequest, ArmResponse, Router
from nodewright.cloud.emulator.seed import EstateBuilder
from nodewright.cloud.emulator.state import EmulatorState
from nodewright.cloud.emulator.throttling import Throttling, limits_from_json

__all__ = ["ADMIN_PREFIX", "AdminEndpoints", "EmulatorControls"]

ADMIN_PREFIX = "/_emulator"


class EmulatorControls(Protocol):
    """The parts of a running emulator the admin actions change (read at each call, as a reset
    replaces the state and the estate builder)."""

    faults: FaultInjector
    throttling: Throttling
    requests: RequestLog
    estate: EstateBuilder
    state: EmulatorState

    def reset(self) -> None: ...


def _error(status: int, code: str, message: str) -> tuple[int, Any]:
    return status, {"error": {"code": code, "message": message}}


class AdminEndpoints:
    """The admin actions of one emulator, each a route of :attr:`router`."""

    def __init__(self, emulator: EmulatorControls) -> None:
        self._emulator = emulator
        self.router = Router()
        for method, action, handler in (
            ("GET", "faults", self.list_faults),
            ("POST", "faults", self.add_faults),
            ("DELETE", "faults", self.clear_faults),
            ("GET", "requests", self.list_requests),
            ("DELETE", "requests", self.clear_requests),
            ("GET", "state", self.snapshot),
            ("POST", "reset", self.reset),
            ("POST", "seed", self.seed),
            ("POST", "throttling", self.configure_throttling),
            ("POST", "operation-duration", self.set_operation_duration),
        ):
            self.router.add(method, f"/{action}", f"Admin.{handler.__name__}", handler)

    def answer(self, method: str, path: str, raw_body: bytes) -> tuple[int, Any]:
        """The status and JSON body for ``method`` on ``path`` (which starts with ADMIN_PREFIX)."""
        body = RequestBody.parse(raw_body)
        if body.error is not None:
            return _error(400, ErrorCode.INVALID_REQUEST_CONTENT, "Body is not JSON.")
        action = path[len(ADMIN_PREFIX) :].strip("/")
        try:
            route, _ = self.router.resolve(method, f"/{action}")
        except ArmError:
            return _error(404, ErrorCode.NOT_FOUND, f"No admin action {method} {action}.")
        request = ArmRequest(
            method=method,
            path=path,
            query={},
            headers={},
            body=body.value if raw_body else {},
            base_url="",
            operation=route.name,
        )
        try:
            response = route.handler(self._emulator.state, request)
        except (KeyError, TypeError, ValueError) as error:
            return _error(400, ErrorCode.INVALID_PARAMETER, str(error))
        return response.status, response.body

    def list_faults(self, _state: EmulatorState, _request: ArmRequest) -> ArmResponse:
        return ArmResponse(200, {"value": [fault.to_json() for fault in self._emulator.faults.active()]})

    def add_faults(self, _state: EmulatorState, request: ArmRequest) -> ArmResponse:
        """One fault or a list; a latency entry naming no operation, method or path sets the
        global latency (and is not listed in the answer)."""
        entries = request.body if isinstance(request.body, list) else [request.body]
        added = []
        for entry in entries:
            fault = _fault_from_json(entry)
            if fault is None:
                self._emulator.faults.add_latency(float(entry.get("seconds", 0.0)))
            else:
                added.append(self._emulator.faults.add(fault).to_json())
        return ArmResponse(201, {"value": added})

    def clear_faults(self, _state: EmulatorState, _request: ArmRequest) -> ArmResponse:
        self._emulator.faults.clear()
        return ArmResponse(200, {})

    def list_requests(self, _state: EmulatorState, _request: ArmRequest) -> ArmResponse:
        requests = self._emulator.requests
        return ArmResponse(
            200,
            {
                "value": [entry.to_json() for entry in requests.entries()],
                "counts": requests.counts_by_operation(),
            },
        )

    def clear_requests(self, _state: EmulatorState, _request: ArmRequest) -> ArmResponse:
        self._emulator.requests.clear()
        return ArmResponse(200, {})

    def snapshot(self, _state: EmulatorState, _request: ArmRequest) -> ArmResponse:
        return ArmResponse(200, self._emulator.estate.snapshot())

    def reset(self, _state: EmulatorState, _request: ArmRequest) -> ArmResponse:
        self._emulator.reset()
        return ArmResponse(200, {})

    def seed(self, _state: EmulatorState, request: ArmRequest) -> ArmResponse:
        self._emulator.estate.apply(request.body)
        return ArmResponse(200, self._emulator.estate.snapshot())

    def configure_throttling(self, _state: EmulatorState, request: ArmRequest) -> ArmResponse:
        throttling = self._emulator.throttling
        throttling.configure(limits_from_json(request.body))
        return ArmResponse(200, {"enforce": throttling.limits.enforce})

    def set_operation_duration(self, state: EmulatorState, request: ArmRequest) -> ArmResponse:
        """``{"seconds": S}`` sets the default duration; ``"retryAfter": R`` (or null) the
        ``Retry-After`` sent while an operation is in progress."""
        with state.locked():
            if "seconds" in request.body:
                state.operation_duration = float(request.body["seconds"])
            if "retryAfter" in request.body:
                retry_after = request.body["retryAfter"]
                state.operation_retry_after = None if retry_after is None else float(retry_after)
        return ArmResponse(
            200, {"seconds": state.operation_duration, "retryAfter": state.operation_retry_after}
        )


def _fault_from_json(entry: dict[str, Any]) -> Fault | None:
    """The fault an admin entry describes; None for a global latency (no operation, method or path)."""
    if entry.get("kind") == "latency" and not any(key in entry for key in ("operation", "method", "path")):
        return None
    fields = {key: value for key, value in entry.items() if key in Fault.__dataclass_fields__}
    fields["kind"] = FaultKind(entry["kind"])
    fields.pop("identifier", None)
    fields.pop("fired", None)
    return Fault(**fields)
