"""The Azure Instance Metadata Service (IMDS) of one emulated machine, and a plain-HTTP proxy that
serves it, so that an unmodified program asking ``http://169.254.169.254/metadata/...`` reaches it
when given ``HTTP_PROXY`` (nothing listens on 169.254.169.254 here).

Served: the ``compute`` category of ``/metadata/instance`` (``azEnvironment``, ``subscriptionId``,
``resourceGroupName``, ``location``, ``name``, ``vmId``, ``vmScaleSetName``, ``osType``), whole
(JSON) or one leaf at a time. The rules are Microsoft's documented ones for IMDS (the "Instance
Metadata Service" page of the Azure virtual machines documentation, its "Errors and debugging"
table and its "Response format" section):

- every request carries ``Metadata: true``, else 400 (``Bad request. Required metadata header not
  specified``); a request with ``X-Forwarded-For`` is refused with 400 as well (IMDS refuses
  anything a proxy forwarded);
- ``api-version`` is required and must be one of the versions the page lists (``API_VERSIONS``),
  else 400 with ``newest-versions``;
- only GET (405 otherwise); an unknown path is 404;
- JSON is the default format; a leaf is served as text only with ``format=text`` (a leaf asked for
  in JSON is 400), and ``format=text`` on a category (not a leaf) is 400.

``azEnvironment`` is ``AzureStackCloud`` by default: go-autorest then reads the cloud's endpoints
from the file named by ``AZURE_ENVIRONMENT_FILEPATH``, which is how a Go peer finds the emulator.

:class:`MetadataProxy` accepts proxy-form requests (``GET http://169.254.169.254/...``) and
origin-form ones; any other host is refused with 403 and never forwarded. It records each request
(path, status) in ``requests``. Side effects: a socket on loopback and a server thread.
"""

from __future__ import annotations

import json
import logging
import threading
import time
import urllib.parse
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any

from nodewright.cloud.emulator.state import DEFAULT_LOCATION, DEFAULT_SUBSCRIPTION

__all__ = [
    "API_VERSIONS",
    "METADATA_ADDRESS",
    "InstanceMetadata",
    "MetadataAnswer",
    "MetadataProxy",
    "answer",
]

log = logging.getLogger(__name__)

METADATA_ADDRESS = "169.254.169.254"
API_VERSIONS = (
    "2017-03-01",
    "2017-04-02",
    "2017-08-01",
    "2017-10-01",
    "2017-12-01",
    "2018-02-01",
    "2018-04-02",
    "2018-10-01",
    "2019-02-01",
    "2019-03-11",
    "2019-04-30",
    "2019-06-01",
    "2019-06-04",
    "2019-08-01",
    "2019-08-15",
    "2019-11-01",
    "2020-06-01",
    "2020-07-15",
    "2020-09-01",
    "2020-10-01",
    "2020-12-01",
    "2021-01-01",
    "2021-02-01",
    "2021-03-01",
    "2021-05-01",
    "2021-10-01",
    "2021-11-01",
    "2021-11-15",
    "2021-12-13",
    "2023-07-01",
)
_NEWEST = ["2023-07-01", "2021-12-13", "2021-11-15"]
_INSTANCE_PREFIX = "/metadata/instance"


@dataclass
class InstanceMetadata:
    """What IMDS tells about the machine a peer runs on (the ``compute`` category)."""

    subscription_id: str = DEFAULT_SUBSCRIPTION
    resource_group: str = ""
    az_environment: str = "AzureStackCloud"
    location: str = DEFAULT_LOCATION
    name: str = "emulated-host"
    vm_id: str = "00000000-0000-4000-8000-0000000000aa"
    scale_set_name: str = ""

    def compute(self) -> dict[str, str]:
        return {
            "azEnvironment": self.az_environment,
            "location": self.location,
            "name": self.name,
            "osType": "Linux",
            "resourceGroupName": self.resource_group,
            "subscriptionId": self.subscription_id,
            "vmId": self.vm_id,
            "vmScaleSetName": self.scale_set_name,
        }


@dataclass(frozen=True)
class MetadataAnswer:
    status: int
    body: str
    content_type: str

    @classmethod
    def error(cls, status: int, message: str, **extra: Any) -> MetadataAnswer:
        return cls(status, json.dumps({"error": message, **extra}), "application/json; charset=utf-8")


def _lookup(metadata: InstanceMetadata, path: str) -> Any:
    """The node ``path`` names under ``/metadata/instance`` (a dict or a leaf string), or None."""
    node: Any = {"compute": metadata.compute()}
    for part in [p for p in path[len(_INSTANCE_PREFIX) :].split("/") if p]:
        if not isinstance(node, dict):
            return None
        matches = [key for key in node if key.lower() == part.lower()]
        if not matches:
            return None
        node = node[matches[0]]
    return node


def answer(metadata: InstanceMetadata, method: str, target: str, headers: dict[str, str]) -> MetadataAnswer:
    """IMDS's answer to one request (``target`` is the path with its query). Pure."""
    parsed = urllib.parse.urlsplit(target)
    query = {key.lower(): value for key, value in urllib.parse.parse_qsl(parsed.query)}
    lowered = {key.lower(): value for key, value in headers.items()}
    if method != "GET":
        return MetadataAnswer.error(405, "Method not allowed. Only GET requests are supported.")
    if lowered.get("metadata", "").lower() != "true":
        return MetadataAnswer.error(400, "Bad request. Required metadata header not specified")
    if "x-forwarded-for" in lowered:
        return MetadataAnswer.error(400, "Bad request. Forwarded requests are not allowed")
    version = query.get("api-version")
    if version is None or version not in API_VERSIONS:
        reason = "was not specified in the request" if version is None else "is not supported"
        return MetadataAnswer.error(
            400,
            f"Bad request. api-version {reason}. For more information refer to aka.ms/azureimds",
            **{"newest-versions": _NEWEST},
        )
    path = parsed.path.rstrip("/")
    if not (path == _INSTANCE_PREFIX or path.startswith(_INSTANCE_PREFIX + "/")):
        return MetadataAnswer.error(404, "Not found")
    node = _lookup(metadata, path)
    if node is None:
        return MetadataAnswer.error(404, "Not found")
    text = query.get("format", "json").lower() == "text"
    if isinstance(node, dict):
        if text:
            return MetadataAnswer.error(400, "Bad request. Only leaf nodes can be retrieved in text format")
        return MetadataAnswer(200, json.dumps(node), "application/json; charset=utf-8")
    if not text:
        return MetadataAnswer.error(
            400, "Bad request. Query parameter format=text is required for a leaf node"
        )
    return MetadataAnswer(200, str(node), "text/plain; charset=utf-8")


@dataclass(frozen=True)
class MetadataRequest:
    """One request the proxy answered."""

    path: str
    status: int
    monotonic: float


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    proxy: MetadataProxy


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:
        log.debug("Answered metadata request: " + format, *args)

    def do_GET(self) -> None:
        self._serve()

    def do_POST(self) -> None:
        self._serve()

    def do_PUT(self) -> None:
        self._serve()

    def do_CONNECT(self) -> None:
        self._send(MetadataAnswer.error(403, "This proxy serves only the instance metadata service."))

    def _serve(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        if length > 0:
            self.rfile.read(length)
        parsed = urllib.parse.urlsplit(self.path)
        host = (parsed.hostname or self.headers.get("Host", "").split(":")[0]).lower()
        if host != METADATA_ADDRESS:
            result = MetadataAnswer.error(403, f"This proxy serves only {METADATA_ADDRESS}.")
        else:
            target = parsed.path + (f"?{parsed.query}" if parsed.query else "")
            result = answer(self.server.proxy.metadata, self.command, target, dict(self.headers.items()))
        self.server.proxy.note(MetadataRequest(parsed.path, result.status, time.monotonic()))
        self._send(result)

    def _send(self, result: MetadataAnswer) -> None:
        payload = result.body.encode()
        self.send_response(result.status)
        self.send_header("Content-Type", result.content_type)
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)


@dataclass
class MetadataProxy:
    """A plain-HTTP proxy on loopback answering for IMDS (see the module docstring)."""

    metadata: InstanceMetadata
    host: str = "127.0.0.1"
    port: int = 0
    requests: list[MetadataRequest] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _server: _Server | None = None
    _thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        """``http://127.0.0.1:PORT``: the value to give a peer as ``HTTP_PROXY``."""
        if self._server is None:
            raise RuntimeError("The metadata proxy is not started")
        return f"http://{self.host}:{self._server.server_address[1]}"

    def note(self, request: MetadataRequest) -> None:
        with self._lock:
            self.requests.append(request)

    def start(self) -> MetadataProxy:
        """Bind and serve on a background thread. Side effect: opens a socket."""
        server = _Server((self.host, self.port), _Handler)
        server.proxy = self
        self._server = server
        self._thread = threading.Thread(
            target=server.serve_forever, kwargs={"poll_interval": 0.05}, name="imds-proxy", daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None

    def __enter__(self) -> MetadataProxy:
        return self.start()

    def __exit__(
        self, kind: type[BaseException] | None, value: BaseException | None, traceback: TracebackType | None
    ) -> None:
        self.stop()
