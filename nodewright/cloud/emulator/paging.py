"""List paging as ARM answers it: a page of ``value`` and, unless it is the last page, a
``nextLink`` (the same path and query, ``$expand`` included, with a ``$skiptoken``), which the SDKs' pagers
follow with a plain GET. The last page carries no ``nextLink``.

Azure does not publish its page sizes; the emulator's (``EmulatorState.list_page_size``, by
default ``DEFAULT_LIST_PAGE_SIZE``, 100) is kept small so that paging is exercised and a count of
reads made against it is an upper bound of what Azure would answer. No I/O.
"""

from __future__ import annotations

import urllib.parse
from typing import Any

from nodewright.cloud.emulator.errors import ArmError
from nodewright.cloud.emulator.routing import ArmRequest, ArmResponse

__all__ = ["SKIP_TOKEN", "paged"]

SKIP_TOKEN = "$skiptoken"  # noqa: S105 - a query parameter's name, not a secret


def _skip(request: ArmRequest) -> int:
    token = request.query_value(SKIP_TOKEN)
    if token is None:
        return 0
    try:
        skip = int(token)
    except ValueError:
        raise ArmError.invalid_parameter(f"The skip token {token!r} is not valid.", SKIP_TOKEN) from None
    if skip < 0:
        raise ArmError.invalid_parameter(f"The skip token {token!r} is not valid.", SKIP_TOKEN)
    return skip


def paged(request: ArmRequest, values: list[Any], page_size: int) -> ArmResponse:
    """The page of ``values`` the request's ``$skiptoken`` names (the first without one)."""
    skip = _skip(request)
    size = max(1, page_size)
    body: dict[str, Any] = {"value": values[skip : skip + size]}
    if skip + size < len(values):
        kept = {key: value for key, value in request.query.items() if key.lower() != SKIP_TOKEN}
        query = urllib.parse.urlencode({**kept, SKIP_TOKEN: str(skip + size)})
        body["nextLink"] = f"{request.base_url}{request.path}?{query}"
    return ArmResponse(200, body)
