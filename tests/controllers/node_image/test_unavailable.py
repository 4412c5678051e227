"""Table tests of ``maxUnavailable`` (pure): counts and percentages, bad values, and the
allowance left once donors already cordoned before their heir is Ready are counted."""

from __future__ import annotations

import pytest

from nodewright.api.nodewright.v1alpha1 import NodeImage
from nodewright.controllers.node_image.grouping import ClusterNode
from nodewright.controllers.node_image.pairing import ReplacementPair
from nodewright.controllers.node_image.unavailable import (
    InvalidMaxUnavailableError,
    parse_max_unavailable,
    resolve_max_unavailable,
    unavailable_allowance,
)


@pytest.mark.parametrize(
    ("value", "nodes", "count"),
    [
        pytest.param(0, 10, 0, id="default-none"),
        pytest.param(2, 10, 2, id="count"),
        pytest.param("3", 10, 3, id="count-as-text"),
        pytest.param("25%", 10, 2, id="percent-rounds-down"),
        pytest.param("100%", 3, 3, id="every-node"),
        pytest.param("5%", 10, 0, id="percent-below-one-node-is-none"),
    ],
)
def test_max_unavailable_resolves_to_a_count(value: int | str, nodes: int, count: int) -> None:
    assert resolve_max_unavailable(value, nodes) == count


@pytest.mark.parametrize(
    ("value", "words"),
    [
        pytest.param(-1, "negative", id="negative-count"),
        pytest.param("-2", "negative", id="negative-text"),
        pytest.param("150%", "more than 100%", id="percent-over-100"),
        pytest.param("half", "neither a count nor a percentage", id="words"),
        pytest.param("2.5", "neither a count nor a percentage", id="fraction"),
    ],
)
def test_bad_max_unavailable_is_rejected_with_a_reason(value: int | str, words: str) -> None:
    with pytest.raises(InvalidMaxUnavailableError, match=words):
        parse_max_unavailable(value)


def test_the_spec_takes_a_count_or_a_string_and_defaults_to_zero() -> None:
    def spec(**fields: object) -> NodeImage:
        body = {"apiVersion": "nodewright.io/v1alpha1", "kind": "NodeImage", "metadata": {"name": "n"}}
        return NodeImage.from_object({**body, "spec": {"image": "p:o:s:1", **fields}})

    assert spec().spec.max_unavailable == 0
    assert spec(maxUnavailable="25%").spec.max_unavailable == "25%"
    assert spec(maxUnavailable=2).spec.max_unavailable == 2
    schema = NodeImage.openapi_schema()["properties"]["spec"]["properties"]["maxUnavailable"]
    assert schema["x-kubernetes-int-or-string"] is True


def test_donors_cordoned_before_their_heir_is_ready_use_up_the_allowance() -> None:
    def pair(cordoned: bool, heir_ready: bool) -> ReplacementPair:
        return ReplacementPair(ClusterNode("d", unschedulable=cordoned), ClusterNode("h", ready=heir_ready))

    pairs = [pair(True, False), pair(True, True), pair(False, False)]
    assert unavailable_allowance(2, pairs) == 1
    assert unavailable_allowance(1, pairs) == 0
    assert unavailable_allowance(0, pairs) == 0
