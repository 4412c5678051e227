"""The HTTPS server: TLS on loopback, routing to the Compute/Network/ManagedIdentity handlers
through the checks of :mod:`~nodewright.cloud.emulator.guards` (bearer token, api-version,
limits, injected faults, a JSON body), the request log, long-running operation status, and the
admin endpoints under ``/_emulator/`` (:mod:`~nodewright.cloud.emulator.admin`).

:class:`ArmEmulator` is the object tests and the CLI hold: start it (port 0 picks a free port),
read ``endpoint`` and ``ca_file``, seed through ``estate``, inject through ``faults``, inspect
``requests``. Requests are served by a thread each (``ThreadingHTTPServer``); handlers run under
the state lock, added latency is slept outside it.
"""

from __future__ import annotations

import copy
import json
import logging
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

from nodewright.cloud.emulator import compute, federated_credentials, identities, network, scale_sets
from nodewright.cloud.emulator.admin import ADMIN_PREFIX, AdminEndpoints
from nodewright.cloud.emulator.certificates import (
    CertificateFiles,
    LoopbackCertificates,
    issue_loopback_certificates,
)
from nodewright.cloud.emulator.entra import EntraTokenEndpoint, is_token_path
from nodewright.cloud.emulator.errors import ArmError, ErrorCode
from nodewright.cloud.emulator.faults import FaultInjector
from nodewright.cloud.emulator.guards import GuardedRequest, RequestBody, run_guards
from nodewright.cloud.emulator.request_log import RecordedRequest, RequestLog
from nodewright.cloud.emulator.routing import ArmRequest, ArmResponse, Route, Router, retry_after_headers
from nodewright.cloud.emulator.seed import EstateBuilder
from nodewright.cloud.emulator.state import EmulatorState
from nodewright.cloud.emulator.throttling import Throttling

__all__ = ["ArmEmulator", "build_router"]

log = logging.getLogger(__name__)


def _operation_status(state: EmulatorState, request: ArmRequest) -> ArmResponse:
    operation = state.operations.get(request.parameters["operationId"])
    if operation is None:
        raise ArmError(
            404, ErrorCode.NOT_FOUND, f"Operation {request.parameters['operationId']} was not found."
        )
    return ArmResponse(200, operation.status_body(), retry_after_headers(state, operation))


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
            {
                "Location": request.base_url + request.path + "?" + urllib.parse.urlencode(request.query),
                **retry_after_headers(state, operation),
            },
        )
    if operation.status == "Failed" and operation.error is not None:
        raise ArmError(400, operation.error.code, operation.error.message)
    return ArmResponse(204)


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
        if parsed.path.startswith(ADMIN_PREFIX):
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
        self.entra.resource_endpoint = lambda: self.endpoint
        self._admin = AdminEndpoints(self)
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
        body = RequestBody.parse(raw_body)
        guarded = self._guarded_request(method, path, query_string, headers, body)
        try:
            run_guards(self, guarded)
            status, response_body, response_headers = self._answer(guarded)
        except ArmError as error:
            status, response_body, response_headers = error.status, error.body(), dict(error.headers)
        except Exception as error:  # a handler bug must answer 500, not kill the connection
            log.exception("Failed to handle request", extra={"method": method, "path": path})
            status = 500
            response_body = ArmError(
                500, ErrorCode.INTERNAL_SERVER_ERROR, f"Emulator error: {error!r}"
            ).body()
            response_headers = {}
        response_headers = {**guarded.answer_headers, **response_headers}
        operation = guarded.request.operation
        if operation.startswith("VirtualMachine"):
            compute.redact_for_response(response_body, guarded.request.query)
        self.requests.append(
            RecordedRequest(
                method=method,
                path=path,
                query=query_string,
                operation=operation,
                route=f"{method} {guarded.route.template}" if guarded.route else f"{method} {path}",
                status=status,
                monotonic=monotonic,
                timestamp=wall,
                fault=guarded.fault,
                body=body.value,
                if_match=headers.get("if-match"),
                bearer_token=_bearer_token(headers),
                answered=time.monotonic(),
            )
        )
        return status, response_body, response_headers

    def _guarded_request(
        self, method: str, path: str, query_string: str, headers: dict[str, str], body: RequestBody
    ) -> GuardedRequest:
        """The request routed (or with why it cannot be), before any guard has run. The handler
        gets its own copy of the body: it may keep parts of it in the state, and the request log
        keeps what arrived."""
        route: Route | None = None
        parameters: dict[str, str] = {}
        route_error: ArmError | None = None
        try:
            route, parameters = self.router.resolve(method, path)
        except ArmError as error:
            route_error = error
        request = ArmRequest(
            method=method,
            path=path,
            query=dict(urllib.parse.parse_qsl(query_string, keep_blank_values=True)),
            headers=headers,
            body=copy.deepcopy(body.value),
            base_url=self.endpoint,
            parameters=parameters,
            operation=route.name if route else "Unknown",
        )
        return GuardedRequest(request, route, route_error, body.error)

    def _answer(self, guarded: GuardedRequest) -> tuple[int, Any, dict[str, str]]:
        """Run the route's handler under the state lock (only once every guard let it on)."""
        if guarded.route is None:
            raise RuntimeError("A request without a route passed the guards")
        with self.state.locked() as state:
            response = guarded.route.handler(state, guarded.request)
        return response.status, response.body, response.headers

    # Admin endpoints ---------------------------------------------------------------------------

    def admin(self, method: str, path: str, raw_body: bytes) -> tuple[int, Any]:
        """``/_emulator/...``: see :mod:`~nodewright.cloud.emulator.admin`."""
        return self._admin.answer(method, path, raw_body)
