"""Paged ARM list answers read as plain JSON, without the SDK's models.

Owns ``raw_pages``: sends the first request an SDK request builder made (so the path and
``api-version`` stay the SDK's) through the client's own pipeline (authentication, retries,
logging, our budget policies), then follows each page's ``nextLink``, yielding each page's body,
decoded once with orjson (the pipeline does not decode a streamed answer).
Building a full SDK model for every entry is what made big listings expensive (issue 32): a
scale set's instances for ``instance_ids``, its NICs for ``nic_pages``. A failed page raises the
azure-core error the SDK would (``ResourceNotFoundError`` for 404, else ``HttpResponseError``
with the ARM error parsed), so ``calls.GuardedCalls`` translates it as any SDK call's. Does I/O.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, Protocol

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

__all__ = ["RequestSender", "raw_pages"]

_ERROR_MAP: dict[int, Any] = {
    401: ClientAuthenticationError,
    404: ResourceNotFoundError,
    409: ResourceExistsError,
    304: ResourceNotModifiedError,
}


class RequestSender(Protocol):
    """An SDK management client (``send_request`` runs its pipeline)."""

    def send_request(self, request: HttpRequest, *, stream: bool = False, **kwargs: Any) -> HttpResponse: ...


def _page(client: RequestSender, request: HttpRequest) -> dict[str, Any]:
    # As a stream, so the pipeline's ContentDecodePolicy leaves the body alone: it would decode
    # it with the stdlib and ``json()`` again; one orjson decode of the bytes instead (a scale
    # set's NIC page is about a megabyte, listed every minute: issue 32's steady state).
    response = client.send_request(request, stream=True)
    response.read()
    if response.status_code != 200:
        map_error(status_code=response.status_code, response=response, error_map=_ERROR_MAP)
        raise HttpResponseError(response=response, error_format=ARMErrorFormat)
    body = orjson.loads(response.content)
    return body if isinstance(body, dict) else {}


def raw_pages(client: RequestSender, first: HttpRequest) -> Iterator[dict[str, Any]]:
    """Each page's body, from ``first`` through every ``nextLink``."""
    request: HttpRequest | None = first
    while request is not None:
        body = _page(client, request)
        yield body
        next_link = body.get("nextLink")
        request = HttpRequest("GET", str(next_link)) if next_link else None
