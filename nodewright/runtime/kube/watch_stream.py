"""A watch stream of the API server: its events, as they arrive, until closed.

Owns ``WatchEvent`` and ``WatchStream`` (the body of one ``?watch=1`` request, split into lines
and decoded one event at a time; ``close()`` from any thread shuts the socket so a blocked read
ends). ``Client.watch`` opens one; the reflector in ``informer.py`` reads it.

Side effects: reads from, and on ``close`` shuts down, the socket of the response.
"""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from types import TracebackType
from typing import Any

import orjson
import urllib3
from urllib3.exceptions import HTTPError

from nodewright.runtime.kube import errors

__all__ = ["WatchEvent", "WatchStream"]


@dataclass(frozen=True, slots=True)
class WatchEvent:
    """One watch event: ``type`` is ADDED, MODIFIED, DELETED or BOOKMARK."""

    type: str
    object: dict[str, Any]


class WatchStream:
    """An open watch: iterate for events; ``close()`` from any thread ends the iteration.

    An ``ERROR`` event is raised as its typed error (``errors.Gone`` for an expired
    resourceVersion) instead of being yielded. The iteration ends normally when the server
    closes the stream (its timeoutSeconds elapsed); a broken connection or a read timeout raises
    ``errors.ConnectionFailed``.
    """

    def __init__(self, response: urllib3.BaseHTTPResponse) -> None:
        self._response = response
        self._closed = threading.Event()

    def __enter__(self) -> WatchStream:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def __iter__(self) -> Iterator[WatchEvent]:
        try:
            for line in _lines(self._response):
                event = orjson.loads(line)
                event_type = event.get("type", "")
                payload = event.get("object") or {}
                if event_type == "ERROR":
                    raise errors.error_from_status(payload)
                yield WatchEvent(event_type, payload)
        except HTTPError as error:
            if self._closed.is_set():
                return
            raise errors.ConnectionFailed(f"watch stream failed: {error}") from error
        except (OSError, ValueError, AttributeError) as error:
            # A socket shut down by close() surfaces as OSError (or, inside urllib3, as an
            # AttributeError on the released connection); anything else is a broken stream.
            if self._closed.is_set():
                return
            raise errors.ConnectionFailed(f"watch stream failed: {error}") from error

    def close(self) -> None:
        """End the stream; a thread blocked reading it wakes up and stops iterating."""
        if self._closed.is_set():
            return
        self._closed.set()
        sock = _socket_of(self._response)
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
        with contextlib.suppress(Exception):
            self._response.close()
        with contextlib.suppress(Exception):
            self._response.release_conn()


def _lines(response: urllib3.BaseHTTPResponse) -> Iterator[bytes]:
    """The non-empty lines of a streamed body, as they arrive."""
    pending = b""
    for chunk in response.stream(65536, decode_content=True):
        pending += chunk
        if b"\n" not in pending:
            continue
        *lines, pending = pending.split(b"\n")
        yield from (line for line in lines if line)
    if pending:
        yield pending


def _socket_of(response: urllib3.BaseHTTPResponse) -> socket.socket | None:
    connection = getattr(response, "connection", None) or getattr(response, "_connection", None)
    sock = getattr(connection, "sock", None)
    if isinstance(sock, socket.socket):
        return sock
    with contextlib.suppress(AttributeError):
        candidate = response._fp.fp.raw._sock  # type: ignore[attr-defined]
        if isinstance(candidate, socket.socket):
            return candidate
    return None
