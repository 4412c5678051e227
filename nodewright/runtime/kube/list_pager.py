"""Paginated lists with the next page already on its way while this one is decoded.

Owns ``prefetched_pages``: it asks for page N+1 on a helper thread as soon as page N's body has
arrived, so the API server serializes the next page while this process decodes and stores the
current one (a LIST of many Pods is two halves of about the same size: the server's encoding and
our decoding). The next page's ``continue`` token is read from the head of the body, where the
API server writes the list's ``metadata`` before its ``items``; the decoded page is the judge:
a prefetch made with a token that turns out not to be the page's own is thrown away and the
right page asked for. Side effects: one helper thread per listing, at most one request ahead.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

__all__ = ["continue_token_of", "prefetched_pages"]

_CONTINUE = re.compile(rb'"continue":"([^"\\]*)"')
_ITEMS = b'"items":'

Params = dict[str, Any]


def continue_token_of(body: bytes) -> str:
    """The ``continue`` token in a list body's ``metadata`` (before its ``items``), or ""."""
    end = body.find(_ITEMS)
    found = _CONTINUE.search(body, 0, end if end >= 0 else min(len(body), 4096))
    return found.group(1).decode() if found else ""


def _after(params: Params, token: str) -> Params:
    """The parameters of the page after the one listed with ``params``."""
    following = {key: value for key, value in params.items() if key != "resourceVersion"}
    following["continue"] = token
    return following


def prefetched_pages(
    fetch: Callable[[Params], bytes], decode: Callable[[bytes], dict[str, Any]], params: Params
) -> Iterator[dict[str, Any]]:
    """Every page of a list, decoded, in order; ``fetch`` sends one request, ``decode`` parses
    its body. Errors of either (``Gone`` for an expired token) are raised where the page is."""
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="list-prefetch") as helper:
        body = fetch(params)
        while True:
            guess = continue_token_of(body)
            ahead: Future[bytes] | None = helper.submit(fetch, _after(params, guess)) if guess else None
            page = decode(body)
            token = str((page.get("metadata") or {}).get("continue") or "")
            yield page
            if not token:
                return
            params = _after(params, token)
            body = ahead.result() if ahead is not None and guess == token else fetch(params)
