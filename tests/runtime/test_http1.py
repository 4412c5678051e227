"""The lean HTTP/1.1 pool: how it reads answers (chunked, close-delimited, gzip, interim 100,
repeated headers), when it keeps, drops and replaces connections, what it refuses to send, and
its errors. A scripted socket server plays each answer byte for byte, since these are HTTP
cases the API server does not produce on demand; the pool against the real API server (and the
write fence's last check there) is at the end, and every test that touches Kubernetes uses it."""

from __future__ import annotations

import gzip
import os
import resource
import socket
import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from nodewright.runtime import errors
from nodewright.runtime.kube.client import Client
from nodewright.runtime.kube.fence import FencedWriteError
from nodewright.runtime.kube.http1 import ConnectionPool, ProtocolError
from nodewright.runtime.kube.kinds import CONFIG_MAP

Script = Callable[[bytes], tuple[bytes, bool]]  # request head -> (answer bytes, close afterwards)


class ScriptedServer:
    """Accepts connections and answers each request with ``script``; records each whole
    request it read (a head whose body never came in full is not one)."""

    def __init__(self, script: Script) -> None:
        self.script = script
        self.requests: list[bytes] = []
        self.connections = 0
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.open: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            self.connections += 1
            self.open.append(conn)
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        reader = conn.makefile("rb")
        try:
            while True:
                head = b""
                while not head.endswith(b"\r\n\r\n"):
                    line = reader.readline()
                    if not line:
                        return
                    head += line
                length = next(
                    (
                        int(h.split(b":")[1])
                        for h in head.split(b"\r\n")
                        if h.lower().startswith(b"content-length")
                    ),
                    0,
                )
                body = reader.read(length)
                if len(body) < length:
                    return  # the client went away inside the body: no whole request to act on
                self.requests.append(head + body)
                answer, close = self.script(head)
                conn.sendall(answer)
                if close:
                    return
        except OSError:
            return
        finally:
            reader.close()
            conn.close()

    def close_idle_connections(self) -> None:
        for conn in self.open:
            conn.shutdown(socket.SHUT_RDWR)

    def stop(self) -> None:
        self.listener.close()


@pytest.fixture
def serve() -> Iterator[Callable[[Script], tuple[ScriptedServer, ConnectionPool]]]:
    made: list[tuple[ScriptedServer, ConnectionPool]] = []

    def start(script: Script) -> tuple[ScriptedServer, ConnectionPool]:
        server = ScriptedServer(script)
        pool = ConnectionPool("127.0.0.1", server.port, size=2, context=None)
        made.append((server, pool))
        return server, pool

    yield start
    for server, pool in made:
        pool.close()
        server.stop()


def answer(body: bytes, *headers: str, status: str = "200 OK") -> bytes:
    lines = [f"HTTP/1.1 {status}", *headers]
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + body


def fixed(body: bytes, *headers: str) -> Script:
    return lambda _head: (answer(body, f"Content-Length: {len(body)}", *headers), False)


def get(pool: ConnectionPool, target: str = "/", **headers: str) -> Any:
    return pool.request("GET", target, headers, None, timeout=(5.0, 5.0))


def test_keep_alive_answers_reuse_one_connection_and_headers_read_in_any_case(serve: Any) -> None:
    server, pool = serve(fixed(b'{"a":1}', "Warning: 299 - one", "warning: 299 - two", "Retry-After: 3"))
    first, second = get(pool), get(pool)
    assert (first.status, first.reason, first.body) == (200, "OK", b'{"a":1}')
    assert first.headers.get("retry-after") == first.headers["RETRY-AFTER"] == "3"
    assert "Retry-After" in first.headers
    assert first.headers["Warning"] == "299 - one, 299 - two"
    assert second.keep_alive
    assert server.connections == 1
    assert server.requests[0].startswith(b"GET / HTTP/1.1\r\nHost: 127.0.0.1:")


def test_a_chunked_body_is_joined_and_its_trailers_skipped(serve: Any) -> None:
    chunks = b"4\r\nwiki\r\n5;name=x\r\npedia\r\n0\r\nExpires: never\r\n\r\n"
    server, pool = serve(lambda _head: (answer(chunks, "Transfer-Encoding: chunked"), False))
    assert get(pool).body == b"wikipedia"
    assert get(pool).body == b"wikipedia"
    assert server.connections == 1, "the connection stays usable after the trailers"


def test_a_body_delimited_by_the_close_is_read_and_the_connection_not_kept(serve: Any) -> None:
    server, pool = serve(lambda _head: (answer(b"until the end"), True))
    first = get(pool)
    assert (first.body, first.keep_alive) == (b"until the end", False)
    assert get(pool).body == b"until the end"
    assert server.connections == 2


def test_connection_close_is_honoured(serve: Any) -> None:
    server, pool = serve(fixed(b"x", "Connection: close"))
    assert not get(pool).keep_alive
    get(pool)
    assert server.connections == 2


def test_an_idle_connection_the_server_closed_is_replaced_before_use(serve: Any) -> None:
    server, pool = serve(fixed(b"ok"))
    get(pool)
    server.close_idle_connections()
    assert get(pool).body == b"ok", "no error: the dropped connection was noticed and replaced"
    assert server.connections == 2


def test_a_connection_on_a_descriptor_past_1023_is_kept(serve: Any) -> None:
    """select() cannot watch such a descriptor; the reuse check must not take it for dropped."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, min(hard, 2048)), hard))
    filler = [os.open(os.devnull, os.O_RDONLY) for _ in range(1100)]
    try:
        server, pool = serve(fixed(b"ok"))
        get(pool)
        assert pool._idle[0].sock.fileno() > 1023
        get(pool)
        assert server.connections == 1
    finally:
        for descriptor in filler:
            os.close(descriptor)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def test_gzip_content_is_decoded_and_an_interim_100_skipped(serve: Any) -> None:
    packed = gzip.compress(b'{"items":[]}')
    interim = b"HTTP/1.1 100 Continue\r\n\r\n"
    _, pool = serve(
        lambda _head: (
            interim + answer(packed, f"Content-Length: {len(packed)}", "Content-Encoding: gzip"),
            False,
        )
    )
    assert get(pool).body == b'{"items":[]}'


def test_a_post_carries_its_length_and_body(serve: Any) -> None:
    server, pool = serve(fixed(b"{}"))
    pool.request("POST", "/things", {"Content-Type": "application/json"}, b'{"n":1}', timeout=(5.0, 5.0))
    pool.request("POST", "/empty", {}, None, timeout=(5.0, 5.0))
    assert b"Content-Length: 7\r\n" in server.requests[0]
    assert server.requests[0].endswith(b'\r\n\r\n{"n":1}')
    assert b"Content-Length: 0\r\n" in server.requests[1]


@pytest.mark.parametrize(
    ("script", "message"),
    [
        (lambda _head: (b"SSH-2.0-OpenSSH\r\n\r\n", True), "not an HTTP/1.x status line"),
        (lambda _head: (answer(b"short", "Content-Length: 10"), True), "ended after 5 of 10 bytes"),
        (lambda _head: (b"", True), "closed the connection without answering"),
        (lambda _head: (answer(b"zz\r\n", "Transfer-Encoding: chunked"), True), "not a chunk size"),
        (lambda _head: (answer(b"x", "Content-Length: 1", "Content-Encoding: br"), False), "not asked for"),
    ],
)
def test_a_broken_answer_is_a_protocol_error_and_the_connection_is_dropped(
    serve: Any, script: Script, message: str
) -> None:
    _, pool = serve(script)
    with pytest.raises(ProtocolError, match=message):
        get(pool)
    assert not pool._idle


def test_a_line_break_in_a_header_or_target_is_refused_before_anything_is_sent(serve: Any) -> None:
    server, pool = serve(fixed(b""))
    with pytest.raises(ValueError, match="control character"):
        get(pool, **{"X-Evil": "a\r\nInjected: yes"})
    with pytest.raises(ValueError, match="control character or space"):
        get(pool, "/a b")
    assert server.requests == []


def test_before_send_is_asked_again_before_the_body(serve: Any) -> None:
    """The fence closing between the head and the body leaves the server a head without its
    body: the connection is dropped, and the server never gets a whole request."""
    server, pool = serve(fixed(b""))
    answers = iter([None, FencedWriteError("kubernetes", "POST /things", 99.0)])

    def second_refuses() -> None:
        refusal = next(answers)
        if refusal is not None:
            raise refusal

    with pytest.raises(FencedWriteError):
        pool.request("POST", "/things", {}, b'{"n":1}', timeout=(5.0, 5.0), before_send=second_refuses)
    assert not pool._idle
    get(pool)
    assert [request.split(b" ", 1)[0] for request in server.requests] == [b"GET"]


def test_before_send_refuses_and_no_byte_reaches_the_server(serve: Any) -> None:
    server, pool = serve(fixed(b""))

    def refuse() -> None:
        raise FencedWriteError("kubernetes", "POST /things", 99.0)

    with pytest.raises(FencedWriteError):
        pool.request("POST", "/things", {}, b"{}", timeout=(5.0, 5.0), before_send=refuse)
    get(pool)
    assert [request.split(b" ", 1)[0] for request in server.requests] == [b"GET"]


@pytest.fixture
def client(cluster: Any) -> Client:
    return Client.from_kubeconfig(cluster.kubeconfig)


def test_the_transport_checks_the_fence_at_the_last_moment_on_the_real_api_server(
    client: Client, namespace: str
) -> None:
    """Past the client's early check (a view without a fence), the transport's guard still
    refuses a write; reads pass; the refused object is not on the server."""
    checked: list[str] = []

    def check(operation: str) -> None:
        checked.append(operation)
        raise FencedWriteError("kubernetes", operation, 99.0)

    client.transport.guard(check)
    body = {"metadata": {"name": "refused"}}
    with pytest.raises(FencedWriteError):
        client.create(CONFIG_MAP, body, namespace)
    assert checked == [f"POST /api/v1/namespaces/{namespace}/configmaps"]
    with pytest.raises(errors.NotFound):
        client.get(CONFIG_MAP, "refused", namespace)
    assert client.list(CONFIG_MAP, namespace).items == []
