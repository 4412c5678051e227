"""Contract: the instance metadata service behind its HTTP proxy, as a peer given ``HTTP_PROXY``
reaches it (a proxy-form request for http://169.254.169.254/...; the test talks to the loopback
proxy only): Microsoft's documented rules (the ``Metadata: true`` header, ``api-version``,
``format=text`` for a leaf, GET only) and the answers Cilium's operator asks for."""

from __future__ import annotations

import http.client
import json
from collections.abc import Iterator

import pytest

from nodewright.cloud.emulator.imds import InstanceMetadata, MetadataProxy

COMPUTE = "http://169.254.169.254/metadata/instance/compute"


@pytest.fixture
def proxy() -> Iterator[MetadataProxy]:
    metadata = InstanceMetadata(subscription_id="sub-1", resource_group="rg-bench")
    with MetadataProxy(metadata) as running:
        yield running


def _get(
    proxy: MetadataProxy, target: str, headers: dict[str, str] | None = None, method: str = "GET"
) -> tuple[int, str, str]:
    host, port = proxy.url.removeprefix("http://").split(":")
    connection = http.client.HTTPConnection(host, int(port), timeout=10)
    try:
        connection.request(method, target, headers=headers or {})
        response = connection.getresponse()
        return response.status, response.getheader("Content-Type") or "", response.read().decode()
    finally:
        connection.close()


@pytest.mark.parametrize(
    ("leaf", "value"),
    [
        pytest.param("azEnvironment", "AzureStackCloud", id="cloud-name"),
        pytest.param("subscriptionId", "sub-1", id="subscription"),
        pytest.param("resourceGroupName", "rg-bench", id="resource-group"),
    ],
)
def test_leaf_in_text_format(proxy: MetadataProxy, leaf: str, value: str) -> None:
    """What Cilium asks (api-version 2019-06-01, format=text, Metadata: true): the bare value as text."""
    status, content_type, body = _get(
        proxy, f"{COMPUTE}/{leaf}?api-version=2019-06-01&format=text", {"Metadata": "true"}
    )
    assert (status, body) == (200, value)
    assert content_type.startswith("text/plain")


def test_without_metadata_header_is_400(proxy: MetadataProxy) -> None:
    """No ``Metadata: true`` header (or another value): 400 with IMDS's error, nothing served."""
    for headers in ({}, {"Metadata": "false"}):
        status, _, body = _get(proxy, f"{COMPUTE}/azEnvironment?api-version=2019-06-01&format=text", headers)
        assert status == 400
        assert json.loads(body) == {"error": "Bad request. Required metadata header not specified"}
    assert [r.status for r in proxy.requests] == [400, 400]


def test_forwarded_request_is_400(proxy: MetadataProxy) -> None:
    status, _, _ = _get(
        proxy,
        f"{COMPUTE}/azEnvironment?api-version=2019-06-01&format=text",
        {"Metadata": "true", "X-Forwarded-For": "10.0.0.1"},
    )
    assert status == 400


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        pytest.param("format=text", 400, id="no-api-version"),
        pytest.param("api-version=1999-01-01&format=text", 400, id="unknown-api-version"),
        pytest.param("api-version=2019-06-01", 400, id="leaf-in-json"),
    ],
)
def test_leaf_request_rules(proxy: MetadataProxy, query: str, expected: int) -> None:
    status, _, body = _get(proxy, f"{COMPUTE}/azEnvironment?{query}", {"Metadata": "true"})
    assert status == expected
    assert "error" in json.loads(body)


def test_category_is_json_and_not_text(proxy: MetadataProxy) -> None:
    """A category answers JSON by default; format=text on a category is 400."""
    status, content_type, body = _get(proxy, f"{COMPUTE}?api-version=2021-02-01", {"Metadata": "true"})
    assert status == 200
    assert content_type.startswith("application/json")
    assert json.loads(body)["resourceGroupName"] == "rg-bench"
    status, _, _ = _get(proxy, f"{COMPUTE}?api-version=2021-02-01&format=text", {"Metadata": "true"})
    assert status == 400


def test_unknown_path_method_and_host(proxy: MetadataProxy) -> None:
    """Unknown leaf 404, POST 405, any other host refused (403) and never forwarded."""
    assert (
        _get(proxy, f"{COMPUTE}/nothing?api-version=2019-06-01&format=text", {"Metadata": "true"})[0] == 404
    )
    assert _get(proxy, f"{COMPUTE}?api-version=2019-06-01", {"Metadata": "true"}, method="POST")[0] == 405
    assert _get(proxy, "http://example.invalid/metadata/instance", {"Metadata": "true"})[0] == 403
