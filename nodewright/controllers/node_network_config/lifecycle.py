"""A NodeNetworkConfig's life: created for a selected Node, controlled by it, deleted with it.

Owns ``Lifecycle``:
- ``create``: a selected Node without a NodeNetworkConfig gets one, with our finalizer and a
  *controller* owner reference to the Node (``controller: true``, ``blockOwnerDeletion: true``,
  as upstream's ``SetControllerRef``): Azure CNS's NNC reconciler ignores every NNC for which
  ``metav1.IsControlledBy(nnc, node)`` is false.
- ``adopt``: an existing NodeNetworkConfig without that reference (written by an older nodewright)
  gets it on its next reconcile; a Node recreated under the same name (new uid) replaces the old
  reference.
- ``finalize``: one whose Node is gone (confirmed by an uncached read) is deleted; one being
  deleted has its IPs released from the NIC (named by an annotation, so this works after the
  Node is gone), then the finalizer dropped. While the Node exists, IPs a pod uses are kept.
Side effects: Kubernetes writes (patches through ``config_writes.ConfigWrites``), ARM NIC reads and writes,
Events.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any

from nodewright.api.acn.v1alpha import NodeNetworkConfigSpec
from nodewright.cloud.errors import NotFoundError
from nodewright.controllers.node_network_config.cloud import NetworkOperations
from nodewright.controllers.node_network_config.nic_book import NicBook
from nodewright.controllers.node_network_config.resources import (
    FINALIZER,
    NETWORK_INTERFACE_ANNOTATION,
    NODE_NETWORK_CONFIG,
    controller_reference,
    fresh_pod_addresses,
    owner_references_for,
)
from nodewright.controllers.node_network_config.status import EventSink
from nodewright.runtime import Client, Result, errors, get_logger, remove_finalizer

__all__ = ["FINALIZE_RETRY_SECONDS", "Lifecycle"]

log = get_logger(__name__)

FINALIZE_RETRY_SECONDS = 10.0
Object = dict[str, Any]


class Lifecycle:
    """Create, adopt and finalize NodeNetworkConfigs (see the module docstring)."""

    def __init__(
        self,
        *,
        client: Client,
        network: NetworkOperations,
        book: NicBook,
        events: EventSink,
        namespace: str,
        patch: Callable[[str, Object], Object],
    ) -> None:
        self._client = client
        self._patch = patch  # ``ConfigWrites.patch``: every answer is kept for the next passes
        self._network = network
        self._book = book
        self._events = events
        self._namespace = namespace

    def create(self, node: Object) -> None:
        """Create the Node's NodeNetworkConfig (side effect). A name the API server refuses (or a
        namespace that does not exist) is reported on the Node with a Warning Event."""
        name = node["metadata"]["name"]
        metadata: Object = {
            "name": name,
            "namespace": self._namespace,
            "labels": {"managed": "true", "owner": name},
            "finalizers": [FINALIZER],
        }
        if node["metadata"].get("uid"):
            metadata["ownerReferences"] = [controller_reference(node)]
        body: Object = {"metadata": metadata, "spec": NodeNetworkConfigSpec().to_dict()}
        try:
            self._client.create(NODE_NETWORK_CONFIG, body, self._namespace)
        except errors.AlreadyExists:
            return
        except (errors.Invalid, errors.NotFound, errors.Forbidden) as error:
            message = f"Cannot create NodeNetworkConfig {self._namespace}/{name}: {error}"
            about = {**node, "apiVersion": "v1", "kind": "Node"}  # cached list items carry no kind
            self._events.event(about, "Warning", "NodeNetworkConfigRefused", message)
            log.info("Could not create NodeNetworkConfig", node=name, error=str(error))
            return
        log.info("Created NodeNetworkConfig", node=name, namespace=self._namespace)

    def adopt(self, raw: Object, node: Object) -> Object:
        """Make ``node`` the controller of ``raw`` if it is not yet (side effect: one patch)."""
        references = owner_references_for(raw, node)
        if references is None:
            return raw
        patch = {
            "metadata": {"ownerReferences": references, "resourceVersion": raw["metadata"]["resourceVersion"]}
        }
        stored = self._patch(raw["metadata"]["name"], patch)
        log.info("Set the Node as controller of its NodeNetworkConfig", node=raw["metadata"]["name"])
        return stored

    def finalize(self, raw: Object, node: Object | None) -> Result:
        name = raw["metadata"]["name"]
        if not raw["metadata"].get("deletionTimestamp"):
            self._client.delete(NODE_NETWORK_CONFIG, name, self._namespace, ignore_not_found=True)
            log.info("Deleted NodeNetworkConfig of a deleted node", node=name)
            return Result()
        nic_id = (raw["metadata"].get("annotations") or {}).get(NETWORK_INTERFACE_ANNOTATION)
        if nic_id and FINALIZER in (raw["metadata"].get("finalizers") or []):
            remaining = self._release_everything(name, nic_id, node)
            if remaining:
                message = (
                    f"{len(remaining)} IPs are still used by pods on node {name}; waiting before release"
                )
                self._events.event(raw, "Warning", "ReleaseBlocked", message)
                return Result(requeue_after=FINALIZE_RETRY_SECONDS)
        if remove_finalizer(raw, FINALIZER):
            metadata = raw["metadata"]
            patch = {
                "metadata": {
                    "finalizers": metadata["finalizers"],
                    "resourceVersion": metadata["resourceVersion"],
                }
            }
            with contextlib.suppress(errors.NotFound):
                self._patch(name, patch)
        if nic_id:
            self._book.forget(nic_id)
        log.info("Finalized NodeNetworkConfig", node=name)
        return Result()

    def _release_everything(self, name: str, nic_id: str, node: Object | None) -> list[str]:
        """Remove every secondary IP configuration of the NIC, except (while the Node exists) those
        a pod uses; returns the names kept back."""
        try:
            nic = self._network.get_network_interface(nic_id)
        except NotFoundError:
            return []
        secondaries = nic.secondary_ip_configurations
        in_use = fresh_pod_addresses(self._client, name) if node is not None else set()
        kept = [c.name for c in secondaries if c.address is not None and c.address in in_use]
        releasable = [c.name for c in secondaries if c.name not in kept]
        if releasable:
            try:
                self._network.remove_secondary_ip_configurations(nic_id, releasable)
            except NotFoundError:
                return []
            log.info("Released IPs of a removed node", node=name, count=len(releasable))
        return kept
