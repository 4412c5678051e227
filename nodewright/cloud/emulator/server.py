"""The HTTPS server: TLS on loopback, bearer-token check, fault injection, routing to the
Compute/Network/ManagedIdentity handlers, the request log, long-running operation status, and
the admin endpoints under ``/_emulator/``.

:class:`ArmEmulator` is the object tests and the CLI hold: start it (port 0 picks a free port),
read ``endpoint`` and ``ca_file``, seed through ``estate``, inject through ``faults``, inspect
``requests``. Requests are served by a thread each (``ThreadingHTTPServer``); handlers run under
the state lock, added latency is slept outside it.
"""

from __future__ import annotations

import json
import logging
import math
import ssl
import tempfile
import threading
import time
import urllib.parse
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import TracebackType
from typing import Any

from nodewright.cloud.budget import forget_shared_budgets
from nodewright.cloud.emulator import compute, federated_credentials, identities, network, scale_sets
from nodewright.cloud.emulator.certificates import (
    CertificateFiles,
    LoopbackCertificates,
    issue_loopback_certificates,
)
from nodewright.cloud.emulator.entra import EntraTokenEndpoint, is_token_path
from nodewright.cloud.emulator.errors import ArmError, ErrorCode
from nodewright.cloud.emulator.faults import Fault, FaultInjector, FaultKind
from nodewright.cloud.emulator.long_running import OperationError
from nodewright.cloud.emulator.request_log import RecordedRequest, RequestLog
from nodewright.cloud.emulator.routing import ArmRequest, ArmResponse, Router
from nodewright.cloud.emulator.seed import EstateBuilder
from nodewright.cloud.emulator.state import EmulatorState
from nodewright.cloud.emulator.throttling import (
    Throttling,
    compute_throttle_error,
    limits_from_json,
    principal_of,
)

__all__ = ["ArmEmulator", "build_router"]

log = logging.getLogger(__name__)

_ADMIN_PREFIX = "/_emulator"


def _operation_status(state: EmulatorState, request: ArmRequest) -> ArmResponse:
    operation = state.operations.get(request.parameters["operationId"])
    if operation is None:
        raise ArmError(
            404, ErrorCode.NOT_FOUND, f"Operation {request.parameters['operationId']} was not found."
        )
    return ArmResponse(200, operation.status_body())


def _operation_result(state: EmulatorState, request: ArmRequest) -> ArmResponse:
    operation = state.operations.get(request.parameters["operationId"])
    if operation is None:
        raise ArmError(
            404, ErrorCode.NOT_FOUND, f"Operation {request.parameters['operationId']} was not found."
        )
    if operation.status == "InProgress":
        return ArmResponse(
            202,
            None,
            {"Location": request.base_url + request.path + "?" + urllib.parse.urlencode(request.query)},
        )
    if operation.status == "Failed" and operation.error is not None:
        raise ArmError(400, operation.error.code, operation.error.message)
    return ArmResponse(204)


def _parsed_or_none(raw_body: bytes) -> Any:
    if not raw_body:
        return None
    try:
        return json.loads(raw_body)
    except ValueError:
        return None


def build_router() -> Router:
    """Every route the emulator serves."""
    router = Router()
    compute.register(router)
    scale_sets.register(router)
    network.register(router)
    identities.register(router)
    federated_credentials.register(router)
    operations = "/subscriptions/{subscriptionId}/providers/{namespace}/locations/{location}"
    router.add("GET", operations + "/operations/{operationId}", "Operations.status", _operation_status)
    router.add("GET", operations + "/operationResults/{operationId}", "Operations.result", _operation_result)
    return router


def _bearer_token(headers: dict[str, str]) -> str | None:
    """The token of ``Authorization: Bearer <token>`` (who made the call), else None."""
    authorization = headers.get("authorization", "")
    if authorization.lower().startswith("bearer "):
        return authorization[7:].strip() or None
    return None


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    emulator: ArmEmulator


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:
        log.debug("Answered request: " + format, *args)

    def do_GET(self) -> None:
        self._serve()

    def do_PUT(self) -> None:
        self._serve()

    def do_PATCH(self) -> None:
        self._serve()

    def do_POST(self) -> None:
        self._serve()

    def do_DELETE(self) -> None:
        self._serve()

    def _read_body(self) -> bytes:
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length > 0 else b""

    def _send(self, status: int, body: Any, headers: dict[str, str]) -> None:
        payload = b"" if body is None else json.dumps(body).encode()
        self.send_response(status)
        if body is not None:
            self.send_header("Content-Type", "application/json; charset=utf-8")
        self.send_header("Content-Length", str(len(payload)))
        self.send_header("x-ms-request-id", str(uuid.uuid4()))
        for name, value in headers.items():
            self.send_header(name, value)
        self.end_headers()
        if payload:
            self.wfile.write(payload)

    def _serve(self) -> None:
        raw = self._read_body()
        parsed = urllib.parse.urlsplit(self.path)
        if parsed.path.startswith(_ADMIN_PREFIX):
            status, body = self.server.emulator.admin(self.command, parsed.path, raw)
            self._send(status, body, {})
            return
        if is_token_path(parsed.path):  # Entra's token endpoint: no ARM bearer token
            status, body = self.server.emulator.entra.handle(parsed.path, raw)
            self._send(status, body, {})
            return
        status, body, headers = self.server.emulator.handle(
            self.command,
            parsed.path,
            parsed.query,
            {key.lower(): value for key, value in self.headers.items()},
            raw,
        )
        self._send(status, body, headers)


class ArmEmulator:
    """A running (after :meth:`start`) emulator of Azure Resource Manager on 127.0.0.1."""

    def __init__(
        self,
        *,
        state_dir: Path | None = None,
        port: int = 0,
        host: str = "127.0.0.1",
        certificates: LoopbackCertificates | None = None,
        state: EmulatorState | None = None,
    ) -> None:
        self._owned_directory: tempfile.TemporaryDirectory[str] | None = None
        if state_dir is None:
            self._owned_directory = tempfile.TemporaryDirectory(prefix="arm-emulator-")
            state_dir = Path(self._owned_directory.name)
        self.state_dir = state_dir
        self._certificates = certificates or issue_loopback_certificates()
        self._files: CertificateFiles = self._certificates.write(state_dir)
        self.host = host
        self._requested_port = port
        self.state = state or EmulatorState()
        self.faults = FaultInjector()
        self.throttling = Throttling()
        self.requests = RequestLog()
        self.router = build_router()
        self.estate = EstateBuilder(self.state)
        self.entra = EntraTokenEndpoint(lambda: self.state)
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None

    # Lifecycle ---------------------------------------------------------------------------------

    @property
    def ca_file(self) -> Path:
        """PEM of the CA that signed the serving certificate: pass as ``connection_verify``."""
        return self._files.ca_file

    @property
    def port(self) -> int:
        if self._server is None:
            raise RuntimeError("The emulator is not started")
        return int(self._server.server_address[1])

    @property
    def endpoint(self) -> str:
        """``https://127.0.0.1:PORT`` (no trailing slash): the SDK clients' ``base_url``."""
        return f"https://{self.host}:{self.port}"

    def client_options(self, polling_interval: float = 0.0) -> dict[str, Any]:
        """Keyword arguments for an Azure SDK management client talking to this emulator:
        ``base_url``, ``credential_scopes``, ``connection_verify`` (the CA file) and ``polling_interval``."""
        return {
            "base_url": self.endpoint,
            "credential_scopes": [f"{self.endpoint}/.default"],
            "connection_verify": str(self.ca_file),
            "polling_interval": polling_interval,
        }

    def start(self) -> ArmEmulator:
        """Bind, wrap in TLS and serve on a background thread. Side effect: opens a socket."""
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        context.load_cert_chain(self._files.certificate_file, self._files.key_file)
        server = _Server((self.host, self._requested_port), _Handler, bind_and_activate=False)
        server.emulator = self
        try:
            server.server_bind()
            server.server_activate()
        except OSError:
            server.server_close()
            raise
        server.socket = context.wrap_socket(server.socket, server_side=True)
        self._server = server
        self._thread = threading.Thread(
            target=server.serve_forever, kwargs={"poll_interval": 0.05}, name="arm-emulator", daemon=True
        )
        self._thread.start()
        forget_shared_budgets(self.endpoint)  # clients of an earlier emulator on this port
        log.info("Started ARM emulator", extra={"endpoint": self.endpoint, "ca_file": str(self.ca_file)})
        return self

    def stop(self) -> None:
        """Stop serving and close the socket (and remove the state directory if it was temporary)."""
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None
        if self._owned_directory is not None:
            self._owned_directory.cleanup()
            self._owned_directory = None

    def __enter__(self) -> ArmEmulator:
        return self.start()

    def __exit__(
        self, kind: type[BaseException] | None, value: BaseException | None, traceback: TracebackType | None
    ) -> None:
        self.stop()

    def reset(self) -> None:
        """Fresh empty state, no faults, empty request log (the server keeps running)."""
        self.state = EmulatorState()
        self.estate = EstateBuilder(self.state)
        self.faults.clear()
        self.requests.clear()
        self.throttling.configure(self.throttling.limits)

    # Request handling --------------------------------------------------------------------------

    def handle(
        self, method: str, path: str, query_string: str, headers: dict[str, str], raw_body: bytes
    ) -> tuple[int, Any, dict[str, str]]:
        """Answer one ARM request: (status, JSON body or None, headers). Records it in the log."""
        monotonic, wall = RequestLog.now()
        query = dict(urllib.parse.parse_qsl(query_string, keep_blank_values=True))
        operation_name, route_template = "Unknown", f"{method} {path}"
        fault_name: str | None = None
        rate_limit_headers: dict[str, str] = {}
        try:
            try:
                route, parameters = self.router.resolve(method, path)
                operation_name, route_template = route.name, f"{method} {route.template}"
            finally:
                delay = self.faults.latency(operation_name, method, path)
                if delay > 0:
                    time.sleep(delay)
            status, body, response_headers, fault_name = self._dispatch(
                handler=route.handler,
                method=method,
                path=path,
                query=query,
                headers=headers,
                raw_body=raw_body,
                parameters=parameters,
                operation_name=operation_name,
                rate_limit_headers=rate_limit_headers,
            )
        except ArmError as error:
            status, body, response_headers = error.status, error.body(), dict(error.headers)
        except Exception as error:  # a handler bug must answer 500, not kill the connection
            log.exception("Failed to handle request", extra={"method": method, "path": path})
            status = 500
            body = ArmError(500, ErrorCode.INTERNAL_SERVER_ERROR, f"Emulator error: {error!r}").body()
            response_headers = {}
        response_headers = {**rate_limit_headers, **response_headers}
        if operation_name.startswith("VirtualMachine"):
            compute.redact_for_response(body, query)
        self.requests.append(
            RecordedRequest(
                method=method,
                path=path,
                query=query_string,
                operation=operation_name,
                route=route_template,
                status=status,
                monotonic=monotonic,
                timestamp=wall,
                fault=fault_name,
                body=_parsed_or_none(raw_body),
                if_match=headers.get("if-match"),
                bearer_token=_bearer_token(headers),
            )
        )
        return status, body, response_headers

    def _dispatch(
        self,
        *,
        handler: Any,
        method: str,
        path: str,
        query: dict[str, str],
        headers: dict[str, str],
        raw_body: bytes,
        parameters: dict[str, str],
        operation_name: str,
        rate_limit_headers: dict[str, str],
    ) -> tuple[int, Any, dict[str, str], str | None]:
        authorization = headers.get("authorization", "")
        if not authorization.lower().startswith("bearer ") or not authorization[7:].strip():
            raise ArmError(
                401,
                ErrorCode.AUTHENTICATION_FAILED,
                "Authentication failed. The 'Authorization' header is missing or is not a bearer token.",
                headers={"WWW-Authenticate": 'Bearer authorization_uri="https://login.microsoftonline.com/"'},
            )
        if not any(key.lower() == "api-version" for key in query):
            raise ArmError(
                400,
                ErrorCode.MISSING_API_VERSION,
                "The api-version query parameter (?api-version=) is required.",
            )
        rate_limit_headers.update(
            self.throttling.admit(
                method=method,
                operation=operation_name,
                subscription=parameters.get("subscriptionId", ""),
                principal=principal_of(authorization),
            )
        )
        self._injected_throttle(operation_name, method, path)
        throttle = self.faults.take(FaultKind.THROTTLE, operation_name, method, path)
        if throttle is not None:
            seconds = max(0, math.ceil(throttle.retry_after))
            raise ArmError(
                429,
                ErrorCode.TOO_MANY_REQUESTS,
                f"The request is being throttled. Retry after {seconds} seconds.",
                headers={"Retry-After": str(seconds)},
            )
        failure = self.faults.take(FaultKind.SERVER_ERROR, operation_name, method, path)
        if failure is not None:
            raise ArmError(
                failure.status, ErrorCode.INTERNAL_SERVER_ERROR, "An injected server error occurred."
            )
        body: Any = None
        if raw_body:
            try:
                body = json.loads(raw_body)
            except ValueError as error:
                raise ArmError(
                    400, ErrorCode.INVALID_REQUEST_CONTENT, f"The request content is not JSON: {error}"
                ) from error
        request = ArmRequest(
            method=method,
            path=path,
            query=query,
            headers=headers,
            body=body,
            base_url=self.endpoint,
            parameters=parameters,
            operation=operation_name,
        )
        fault_name: str | None = None
        if method in ("PUT", "PATCH", "POST", "DELETE"):
            operation_failure = self.faults.take(FaultKind.OPERATION_FAILURE, operation_name, method, path)
            if operation_failure is not None:
                fault_name = str(FaultKind.OPERATION_FAILURE)
                request.operation_failure = OperationError(
                    operation_failure.code or ErrorCode.OPERATION_FAILED,
                    operation_failure.message or "The operation failed.",
                )
            duration = self.faults.take(FaultKind.OPERATION_DURATION, operation_name, method, path)
            if duration is not None:
                request.operation_duration = duration.seconds
        with self.state.locked() as state:
            response = handler(state, request)
        return response.status, response.body, response.headers, fault_name

    def _injected_throttle(self, operation_name: str, method: str, path: str) -> None:
        fault = self.faults.take(FaultKind.COMPUTE_THROTTLE, operation_name, method, path)
        if fault is None:
            return
        headers = {"Retry-After": str(math.ceil(fault.retry_after))} if fault.retry_after > 0 else {}
        raise compute_throttle_error([(fault.code or "PutVMScaleSetVM3Min", 0, 0)], headers)

    # Admin endpoints ---------------------------------------------------------------------------

    def admin(self, method: str, path: str, raw_body: bytes) -> tuple[int, Any]:
        """``/_emulator/...``: faults (GET/POST/DELETE), requests (GET/DELETE), state (GET),
        reset (POST), seed (POST a seed document), operation-duration (POST {"seconds": s})."""
        try:
            body: Any = json.loads(raw_body) if raw_body else {}
        except ValueError:
            return 400, {"error": {"code": ErrorCode.INVALID_REQUEST_CONTENT, "message": "Body is not JSON."}}
        action = path[len(_ADMIN_PREFIX) :].strip("/")
        try:
            return self._admin_action(method, action, body)
        except (KeyError, TypeError, ValueError) as error:
            return 400, {"error": {"code": ErrorCode.INVALID_PARAMETER, "message": str(error)}}

    def _admin_action(self, method: str, action: str, body: Any) -> tuple[int, Any]:
        if action == "faults" and method == "GET":
            return 200, {"value": [fault.to_json() for fault in self.faults.active()]}
        if action == "faults" and method == "POST":
            entries = body if isinstance(body, list) else [body]
            added = []
            for entry in entries:
                if entry.get("kind") == "latency" and not any(
                    k in entry for k in ("operation", "method", "path")
                ):
                    self.faults.add_latency(float(entry.get("seconds", 0.0)))
                    continue
                fields = {key: value for key, value in entry.items() if key in Fault.__dataclass_fields__}
                fields["kind"] = FaultKind(entry["kind"])
                fields.pop("identifier", None)
                fields.pop("fired", None)
                added.append(self.faults.add(Fault(**fields)).to_json())
            return 201, {"value": added}
        if action == "faults" and method == "DELETE":
            self.faults.clear()
            return 200, {}
        if action == "requests" and method == "GET":
            return 200, {
                "value": [entry.to_json() for entry in self.requests.entries()],
                "counts": self.requests.counts_by_operation(),
            }
        if action == "requests" and method == "DELETE":
            self.requests.clear()
            return 200, {}
        if action == "state" and method == "GET":
            return 200, self.estate.snapshot()
        if action == "reset" and method == "POST":
            self.reset()
            return 200, {}
        if action == "seed" and method == "POST":
            self.estate.apply(body)
            return 200, self.estate.snapshot()
        if action == "throttling" and method == "POST":
            self.throttling.configure(limits_from_json(body))
            return 200, {"enforce": self.throttling.limits.enforce}
        if action == "operation-duration" and method == "POST":
            with self.state.locked():
                self.state.operation_duration = float(body["seconds"])
            return 200, {"seconds": self.state.operation_duration}
        return 404, {"error": {"code": ErrorCode.NOT_FOUND, "message": f"No admin action {method} {action}."}}
