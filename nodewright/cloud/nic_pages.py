"""NIC lists read as plain JSON: a Uniform scale set's instance NICs and a resource group's NICs.

Owns ``list_scale_set_nics``, ``list_group_nics`` and ``nic_from_json``. The requests are the
SDK's own (``NetworkInterfacesOperations.list_virtual_machine_scale_set_network_interfaces`` and
``.list``: their request builders, so paths and ``api-version`` stay the SDK's), read page by page
by ``raw_pages.read_pages``; each entry becomes a ``NicInfo`` straight from its JSON, the fields
``network.nic_from_sdk`` reads from the model. The NIC watcher lists every scale set once a
minute: building an SDK model for every NIC and IP configuration was three quarters of the
manager's CPU at rest with 1,000 nodes (issue 32).

Owns ``NicPageMemo`` too: what each page of a listing gave last time, kept with a digest of the
page's bytes. A page whose bytes are the same as last time (no NIC on it changed) gives the same
NICs without being decoded again: at rest that was 42 % of the manager's CPU at 2,000 nodes. A
page that changed in any byte is decoded. Pages not read for an hour (a scale set gone) are
dropped. Does I/O.
"""

from __future__ import annotations

import hashlib
import threading
import time
from collections.abc import Callable
from typing import Any

from azure.mgmt.network import NetworkManagementClient
from azure.mgmt.network.operations._operations import (
    build_network_interfaces_list_request,
    build_network_interfaces_list_virtual_machine_scale_set_network_interfaces_request,
)

from nodewright.cloud.models import IpConfigurationInfo, NicInfo, NicListing
from nodewright.cloud.raw_pages import PageReader, decode_page, read_pages

__all__ = ["NicPageMemo", "list_group_nics", "list_scale_set_nics", "nic_from_json"]

MEMO_IDLE_SECONDS = 3600.0
"""A page not read for this long is forgotten."""


def _object(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def nic_from_json(entry: dict[str, Any]) -> NicInfo:
    """Our ``NicInfo`` from a NIC's ARM JSON (as ``nic_from_sdk`` reads the SDK model)."""
    configurations = []
    for configuration in _object(entry.get("properties")).get("ipConfigurations") or []:
        properties = _object(_object(configuration).get("properties"))
        subnet = properties.get("subnet")
        configurations.append(
            IpConfigurationInfo(
                name=str(configuration.get("name")),
                address=properties.get("privateIPAddress"),
                primary=bool(properties.get("primary")),
                subnet_id=_object(subnet).get("id") if subnet is not None else None,
                provisioning_state=properties.get("provisioningState"),
            )
        )
    primary = _object(entry.get("properties")).get("primary")
    return NicInfo(
        id=str(entry.get("id")),
        etag=entry.get("etag"),
        ip_configurations=tuple(configurations),
        primary=primary if isinstance(primary, bool) else None,
    )


def _page_nics(content: bytes) -> tuple[tuple[NicInfo, ...], str | None]:
    body, next_link = decode_page(content)
    nics = tuple(nic_from_json(entry) for entry in body.get("value") or [] if isinstance(entry, dict))
    return nics, next_link


class NicPageMemo:
    """The NICs each listing's pages gave last time, by listing and page number, with a digest of
    each page's bytes (see the module docstring). Thread-safe."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self._pages: dict[tuple[str, int], tuple[bytes, tuple[NicInfo, ...], str | None, float]] = {}
        self.decoded = 0
        """Pages decoded (the others were answered from the memo)."""

    def reader(self, listing: str) -> PageReader[tuple[NicInfo, ...]]:
        """A page reader for one listing (named by its first request's URL)."""

        def read(index: int, content: bytes) -> tuple[tuple[NicInfo, ...], str | None]:
            digest = hashlib.blake2b(content, digest_size=16).digest()
            now = self._clock()
            with self._lock:
                known = self._pages.get((listing, index))
            unchanged = known is not None and known[0] == digest
            nics, next_link = (known[1], known[2]) if known is not None and unchanged else _page_nics(content)
            with self._lock:
                self._pages[(listing, index)] = (digest, nics, next_link, now)
                self.decoded += 0 if unchanged else 1
            return nics, next_link

        return read

    def forget_idle(self) -> None:
        """Drop the pages not read for ``MEMO_IDLE_SECONDS``."""
        cutoff = self._clock() - MEMO_IDLE_SECONDS
        with self._lock:
            for key in [key for key, page in self._pages.items() if page[3] < cutoff]:
                del self._pages[key]


def _listing(network: NetworkManagementClient, first: Any, memo: NicPageMemo | None) -> NicListing:
    reader = memo.reader(str(first.url)) if memo is not None else lambda _, content: _page_nics(content)
    nics: list[NicInfo] = []
    pages = 0
    for page in read_pages(network, first, reader):
        pages += 1
        nics.extend(page)
    if memo is not None:
        memo.forget_idle()
    return NicListing(nics=tuple(nics), pages=pages)


def _subscription(network: NetworkManagementClient) -> str:
    # The client's own subscription, as its operations fill in every request they build.
    return str(network._config.subscription_id)  # no public accessor


def list_scale_set_nics(
    network: NetworkManagementClient, resource_group: str, scale_set: str, memo: NicPageMemo | None = None
) -> NicListing:
    """The NICs of every instance of a Uniform scale set, all pages (one read each); pages the
    ``memo`` read before with the same bytes are not decoded again."""
    request = build_network_interfaces_list_virtual_machine_scale_set_network_interfaces_request(
        resource_group_name=resource_group,
        virtual_machine_scale_set_name=scale_set,
        subscription_id=_subscription(network),
    )
    return _listing(network, request, memo)


def list_group_nics(
    network: NetworkManagementClient, resource_group: str, memo: NicPageMemo | None = None
) -> NicListing:
    """The standalone NICs of a resource group (Flexible members, VMs), all pages."""
    request = build_network_interfaces_list_request(
        resource_group_name=resource_group, subscription_id=_subscription(network)
    )
    return _listing(network, request, memo)
