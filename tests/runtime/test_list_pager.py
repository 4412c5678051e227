"""The pager's prefetch: pages in order whatever the head of a body claims (the decoded page
decides which page comes next); errors where the page is."""

from __future__ import annotations

import json
from typing import Any

import pytest

from nodewright.runtime import errors
from nodewright.runtime.kube.list_pager import continue_token_of, prefetched_pages


def body(items: list[str], token: str, decoy: str = "") -> bytes:
    """A list body; ``decoy`` puts another token where the prefetch looks first."""
    metadata: dict[str, Any] = {"resourceVersion": "7"}
    if decoy:
        metadata["continue"] = decoy
    text = json.dumps({"kind": "List", "metadata": metadata, "items": items})
    if decoy:  # the decoded metadata names the real token (a later duplicate key wins)
        text = text.replace('"items"', f'"metadata": {{"continue": "{token}"}}, "items"', 1)
    elif token:
        text = text.replace('"resourceVersion": "7"}', f'"resourceVersion": "7", "continue": "{token}"}}')
    return text.replace(": ", ":").replace(", ", ",").encode()


def run(bodies: dict[str, bytes]) -> tuple[list[list[str]], list[str]]:
    asked: list[str] = []

    def fetch(params: dict[str, Any]) -> bytes:
        token = str(params.get("continue", ""))
        asked.append(token)
        if token not in bodies:
            raise errors.Gone("expired", code=410)
        return bodies[token]

    pages = [page["items"] for page in prefetched_pages(fetch, json.loads, {"limit": 2})]
    return pages, asked


def test_pages_come_in_order_and_each_is_asked_once() -> None:
    pages, asked = run({"": body(["a", "b"], "t1"), "t1": body(["c", "d"], "t2"), "t2": body(["e"], "")})
    assert pages == [["a", "b"], ["c", "d"], ["e"]]
    assert asked == ["", "t1", "t2"]
    assert continue_token_of(body(["a"], "t1")) == "t1"


def test_a_wrong_guess_is_thrown_away_and_the_right_page_asked_for() -> None:
    bodies = {"": body(["a"], "right", decoy="wrong"), "right": body(["b"], ""), "wrong": body(["x"], "")}
    pages, asked = run(bodies)
    assert pages == [["a"], ["b"]]
    assert sorted(asked) == ["", "right", "wrong"]


def test_an_expired_token_is_raised_where_its_page_is() -> None:
    with pytest.raises(errors.Gone):
        run({"": body(["a"], "t1")})
