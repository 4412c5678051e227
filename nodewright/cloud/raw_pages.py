"""Paged ARM list answers read as plain JSON, without the SDK's models.

Owns ``raw_pages`` and ``read_pages``: they send the first request an SDK request builder made
(so the path and ``api-version`` stay the SDK's) through the client's own pipeline
(authentication, retries, logging, our budget policies), then follow each page's ``nextLink``.
``raw_pages`` yields each page's body, decoded once with orjson (the pipeline does not decode a
streamed answer); ``read_pages`` hands each page's bytes to a reader of the caller's, which
returns what to yield and the page's ``nextLink`` (a reader may answer from what it read of the
same bytes before, without decoding them: ``nic_pages.NicPageMemo``).
Building a full SDK model for every entry is what made big listings expensive (issue 32): a
scale set's instances for ``instance_ids``, its NICs for ``nic_pages``. A failed page raises the
azure-core error the SDK would (``ResourceNotFoundError`` for 404, else ``HttpResponseError``
with the ARM error parsed), so ``calls.GuardedCalls`` translates it as any SDK call's. Does I/O.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any, Protocol, TypeVar

import orjson
from azure.core.exceptions import (
    ClientAuthenticationError,
    HttpResponseError,
    ResourceExistsError,
    ResourceNotFoundError,
    ResourceNotModifiedError,
    map_error,
)
from azure.core.rest import HttpRequest, HttpResponse
from azure.mgmt.core.exceptions import ARMErrorFormat

__all__ = ["PageReader", "RequestSender", "decode_page", "raw_pages", "read_pages"]

T = TypeVar("T")

PageReader = Callable[[int, bytes], tuple[T, str | None]]
"""Reads page ``index`` (0 for the first) from its bytes: what to yield, and its ``nextLink``."""

_ERROR_MAP: dict[int, Any] = {
    401: ClientAuthenticationError,
    404: ResourceNotFoundError,
    409: ResourceExistsError,
    304: ResourceNotModifiedError,
}


class RequestSender(Protocol):
    """An SDK management client (``send_request`` runs its pipeline)."""

    def send_request(self, request: HttpRequest, *, stream: bool = False, **kwargs: Any) -> HttpResponse: ...


def _content(client: RequestSender, request: HttpRequest) -> bytes:
    # As a stream, so the pipeline's ContentDecodePolicy leaves the body alone: it would decode
    # it with the stdlib and ``json()`` again; the caller decodes the bytes once, with orjson (a
    # scale set's NIC page is about a megabyte, listed every minute: issue 32's steady state).
    response = client.send_request(request, stream=True)
    response.read()
    if response.status_code != 200:
        map_error(status_code=response.status_code, response=response, error_map=_ERROR_MAP)
        raise HttpResponseError(response=response, error_format=ARMErrorFormat)
    content = response.content
    return content if isinstance(content, bytes) else bytes(content)


def decode_page(content: bytes) -> tuple[dict[str, Any], str | None]:
    """A page's body (an object; anything else reads as empty) and its ``nextLink``."""
    body = orjson.loads(content)
    body = body if isinstance(body, dict) else {}
    next_link = body.get("nextLink")
    return body, str(next_link) if next_link else None


def read_pages(client: RequestSender, first: HttpRequest, read: PageReader[T]) -> Iterator[T]:
    """What ``read`` makes of each page, from ``first`` through every ``nextLink``."""
    request: HttpRequest | None = first
    index = 0
    while request is not None:
        item, next_link = read(index, _content(client, request))
        yield item
        request = HttpRequest("GET", next_link) if next_link else None
        index += 1


def raw_pages(client: RequestSender, first: HttpRequest) -> Iterator[dict[str, Any]]:
    """Each page's body, from ``first`` through every ``nextLink``."""
    return read_pages(client, first, lambda _, content: decode_page(content))
