"""A lean HTTP/1.1 client for the API server's whole-answer calls (every call but a watch).

Owns ``ConnectionPool`` (keep-alive connections to one server, handed out last-in first-out),
``Connection`` (one socket: send a request, read its whole answer), ``Answer`` and ``Headers``
(read in any case, as urllib3's).

Why not urllib3 on this path: a GET of a ConfigMap cost 0.9 ms of client CPU through urllib3's
pool and 0.55 ms through ``http.client`` (most of that its ``email``-package header parser),
with the API server on the same host; a reconcile is mostly such calls
(``bench/results/profiles``). The streamed watch and a proxied server keep urllib3.

What it keeps from the urllib3 path (``transport.py``): no retry and no redirect of its own; an
idle connection is checked before reuse, and one the server has closed (it reads as readable) is
replaced; a connection is closed after any error, after ``Connection: close``, and after a body
that only the close delimits. A body is read by Content-Length or chunked, and gzip or deflate
content is decoded (the API server compresses only when asked, which nodewright does not).
``before_send`` (the write fence's last check) runs right before the request's head goes to the
socket and again before its body, as urllib3's guarded connection checks each chunk: a process
paused just after the first check and resumed after a takeover sends a head whose body never
follows, which the server does not act on.

Side effects: network I/O.
"""

from __future__ import annotations

import contextlib
import re
import select
import socket
import ssl
import threading
import weakref
import zlib
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass

__all__ = ["Answer", "ConnectionPool", "Headers", "ProtocolError"]

MAX_LINE = 65536
MAX_HEADERS = 100
_NO_BODY_STATUSES = frozenset({204, 304})
_UNSAFE = re.compile(r"[\x00-\x1f\x7f]")  # a header value may hold spaces, a request line may not


class ProtocolError(OSError):
    """The server's answer was not HTTP/1.1 as we read it, or ended early."""


class Headers(Mapping[str, str]):
    """Response headers by lower-cased name; repeated ones joined with ", "."""

    __slots__ = ("_values",)

    def __init__(self, values: dict[str, str]) -> None:
        self._values = values

    def __getitem__(self, name: str) -> str:
        return self._values[name.lower()]

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and name.lower() in self._values

    def __iter__(self) -> Iterator[str]:
        return iter(self._values)

    def __len__(self) -> int:
        return len(self._values)


@dataclass(frozen=True, slots=True)
class Answer:
    status: int
    reason: str
    headers: Headers
    body: bytes
    keep_alive: bool


class Connection:
    """One connection to the server; used by one thread at a time."""

    def __init__(
        self,
        address: tuple[str, int],
        context: ssl.SSLContext | None,
        server_hostname: str | None,
        connect_timeout: float | None,
    ) -> None:
        sock = socket.create_connection(address, timeout=connect_timeout)
        try:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            if context is not None:
                sock = context.wrap_socket(sock, server_hostname=server_hostname or address[0])
        except BaseException:
            sock.close()
            raise
        self.sock = sock
        self.reader = sock.makefile("rb")

    def dropped(self) -> bool:
        """Whether the idle connection was closed by the server (or has unread bytes)."""
        try:
            if hasattr(select, "poll"):  # not select(): it cannot watch a descriptor past 1023
                poller = select.poll()
                poller.register(self.sock, select.POLLIN)
                return bool(poller.poll(0))
            readable, _, _ = select.select([self.sock], [], [], 0)
        except (OSError, ValueError):
            return True
        return bool(readable)

    def close(self) -> None:
        for closable in (self.reader, self.sock):
            with contextlib.suppress(OSError):
                closable.close()

    def exchange(
        self,
        method: str,
        head: bytes,
        body: bytes | None,
        read_timeout: float | None,
        before_send: Callable[[], None] | None,
    ) -> Answer:
        """Send the request (``head``: request line and headers, ending in a blank line) and
        read the whole answer."""
        self.sock.settimeout(read_timeout)
        if before_send is None:
            self.sock.sendall(head + body if body else head)
        else:  # checked before each part: resumed after a pause past the first check, the body is refused
            before_send()
            self.sock.sendall(head)
            if body:
                before_send()
                self.sock.sendall(body)
        while True:
            version, status, reason, headers = self._read_head()
            if not 100 <= status < 200:
                break  # an interim answer (100 Continue, 103 Early Hints) is followed by the real one
        delimited = True
        if method == "HEAD" or status in _NO_BODY_STATUSES:
            content = b""
        elif "chunked" in headers.get("transfer-encoding", "").lower():
            content = self._read_chunked()
        elif "content-length" in headers:
            content = self._read_exact(int(headers["content-length"]))
        else:
            content, delimited = self.reader.read(), False
        connection = headers.get("connection", "").lower()
        keep_alive = delimited and (
            "keep-alive" in connection if version == "HTTP/1.0" else "close" not in connection
        )
        return Answer(status, reason, headers, _decoded(content, headers), keep_alive)

    def _read_line(self) -> bytes:
        line = self.reader.readline(MAX_LINE + 1)
        if len(line) > MAX_LINE:
            raise ProtocolError("an answer line is longer than 64 KiB")
        return line

    def _read_head(self) -> tuple[str, int, str, Headers]:
        line = self._read_line()
        if not line:
            raise ProtocolError("the server closed the connection without answering")
        version, _, rest = line.decode("latin-1").rstrip("\r\n").partition(" ")
        code, _, reason = rest.partition(" ")
        if not version.startswith("HTTP/1.") or not code.isdigit():
            raise ProtocolError(f"not an HTTP/1.x status line: {line[:80]!r}")
        values: dict[str, str] = {}
        last = ""
        for _ in range(MAX_HEADERS + 1):
            raw = self._read_line()
            if raw in (b"\r\n", b"\n"):
                return version, int(code), reason, Headers(values)
            if not raw:
                raise ProtocolError("the server closed the connection inside the headers")
            text = raw.decode("latin-1").rstrip("\r\n")
            if text[:1] in (" ", "\t") and last:  # an obsolete folded continuation
                values[last] += " " + text.strip()
                continue
            name, colon, value = text.partition(":")
            if not colon:
                raise ProtocolError(f"not a header line: {raw[:80]!r}")
            last, value = name.strip().lower(), value.strip()
            values[last] = f"{values[last]}, {value}" if last in values else value
        raise ProtocolError(f"more than {MAX_HEADERS} headers")

    def _read_exact(self, length: int) -> bytes:
        data = self.reader.read(length)
        if len(data) != length:
            raise ProtocolError(f"the answer ended after {len(data)} of {length} bytes")
        return data

    def _read_chunked(self) -> bytes:
        parts: list[bytes] = []
        while True:
            size_line = self._read_line()
            try:
                size = int(size_line.split(b";", 1)[0].strip(), 16)
            except ValueError:
                raise ProtocolError(f"not a chunk size: {size_line[:80]!r}") from None
            if size == 0:
                while self._read_line() not in (b"\r\n", b"\n", b""):
                    pass  # trailers: none that we read
                return b"".join(parts)
            parts.append(self._read_exact(size))
            self._read_line()  # the CRLF after the chunk


def _decoded(content: bytes, headers: Headers) -> bytes:
    encoding = headers.get("content-encoding", "").strip().lower()
    if encoding in ("", "identity") or not content:
        return content
    try:
        if encoding in ("gzip", "x-gzip"):
            return zlib.decompress(content, 16 + zlib.MAX_WBITS)
        if encoding == "deflate":
            return zlib.decompress(content)
    except zlib.error as error:
        raise ProtocolError(f"a {encoding} body that does not decode: {error}") from error
    raise ProtocolError(f"a body in content-encoding {encoding!r}, which was not asked for")


def _close_all(connections: list[Connection]) -> None:
    while connections:
        connections.pop().close()


class ConnectionPool:
    """Keep-alive connections to one server (thread-safe); at most ``size`` are kept idle."""

    def __init__(
        self,
        host: str,
        port: int,
        *,
        size: int,
        context: ssl.SSLContext | None,
        server_hostname: str | None = None,
    ) -> None:
        self.address = (host, port)
        self.size = size
        self.context = context
        self.server_hostname = server_hostname
        default_port = 443 if context is not None else 80
        named = f"[{host}]" if ":" in host else host
        self.host_header = named if port == default_port else f"{named}:{port}"
        self._idle: list[Connection] = []
        self._lock = threading.Lock()
        self._closed = False
        # A pool dropped without close() closes its idle connections (as urllib3's pool does).
        weakref.finalize(self, _close_all, self._idle)

    def request(
        self,
        method: str,
        target: str,
        headers: Mapping[str, str],
        body: bytes | None,
        *,
        timeout: tuple[float | None, float | None],
        before_send: Callable[[], None] | None = None,
    ) -> Answer:
        """Send one request on an idle connection (or a new one) and read the whole answer."""
        head = self._head(method, target, headers, body)
        connection = self._take(timeout[0])
        try:
            answer = connection.exchange(method, head, body, timeout[1], before_send)
        except BaseException:
            connection.close()
            raise
        if answer.keep_alive:
            self._give_back(connection)
        else:
            connection.close()
        return answer

    def close(self) -> None:
        """Close the idle connections; those in use are closed when given back."""
        with self._lock:
            self._closed = True
            idle = list(self._idle)
            self._idle.clear()  # the same list the finalizer holds
        _close_all(idle)

    def _head(self, method: str, target: str, headers: Mapping[str, str], body: bytes | None) -> bytes:
        parts = (method, target, *headers, *headers.values())
        if " " in method + target or any(_UNSAFE.search(part) for part in parts):
            raise ValueError(f"a control character or space in the request line or a header: {target!r}")
        lines = [f"{method} {target} HTTP/1.1", f"Host: {self.host_header}"]
        lines.extend(f"{name}: {value}" for name, value in headers.items())
        if body is not None or method in ("POST", "PUT", "PATCH"):
            lines.append(f"Content-Length: {len(body) if body else 0}")
        lines.append("\r\n")
        return "\r\n".join(lines).encode("latin-1")

    def _take(self, connect_timeout: float | None) -> Connection:
        while True:
            with self._lock:
                connection = self._idle.pop() if self._idle else None
            if connection is None:
                return Connection(self.address, self.context, self.server_hostname, connect_timeout)
            if not connection.dropped():
                return connection
            connection.close()

    def _give_back(self, connection: Connection) -> None:
        with self._lock:
            if not self._closed and len(self._idle) < self.size:
                self._idle.append(connection)
                return
        connection.close()
