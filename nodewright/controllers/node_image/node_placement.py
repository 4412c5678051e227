"""Placing a claimed Node: the scale set and image annotations the NodeImage reconciler groups
by, read from the Node's providerID and, for what it cannot say, the cloud.

Owns ``NodePlacement`` (a ``RolloutWrites`` mixin of ``NodeImageReconciler``): a Flexible scale
set's member is placed once from its VM's GET (a standalone VM is remembered and not asked
again); a node's image comes from its machine's GET, made once for a new machine (a step's: the
read is kept for its Join, or taken from the Join's). Side effects: ARM GETs, Node patches.
"""

from __future__ import annotations

from nodewright.cloud.errors import NotFoundError
from nodewright.cloud.resource_ids import (
    InvalidResourceIdError,
    ResourceGroupId,
    ScaleSetInstanceId,
    VirtualMachineId,
    parse_provider_id,
    parse_scale_set_id,
)
from nodewright.controllers.node_image.grouping import (
    NODE_IMAGE_ANNOTATION,
    SCALING_GROUP_ANNOTATION,
    ClusterNode,
)
from nodewright.controllers.node_image.rollout_writes import RolloutWrites
from nodewright.runtime import NODE, get_logger

__all__ = ["NodePlacement"]

log = get_logger(__name__)


class NodePlacement(RolloutWrites):
    """Annotates claimed Nodes with their scale set and image (see the module docstring)."""

    def known_standalone(self, provider_id: str) -> bool:
        """Whether the cloud said this VM belongs to no scale set (read by the Node watch too)."""
        return provider_id in self._standalone_machines

    def _place_member(self, node: ClusterNode) -> ClusterNode:
        """A VM node without a scale-set annotation annotated with the Flexible scale set its VM is
        a member of (and its image), read from the cloud once; standalone VMs are remembered so
        they are not asked for again (side effects: a GET, a Node patch)."""
        if node.scaling_group_id or node.provider_id in self._standalone_machines:
            return node
        try:
            machine = parse_provider_id(node.provider_id)
        except InvalidResourceIdError:
            return node
        if not isinstance(machine, VirtualMachineId):
            return node
        try:
            instance = self._cloud.get_instance(machine)
        except NotFoundError:
            return node
        if instance.scale_set_id is None:
            self._standalone_machines.add(node.provider_id)
            return node
        annotations = {SCALING_GROUP_ANNOTATION: str(parse_scale_set_id(instance.scale_set_id))}
        if instance.image is not None and not node.image:
            annotations[NODE_IMAGE_ANNOTATION] = instance.image.format()
        body = {"metadata": {"annotations": annotations}}
        patched = self._patch(NODE, self._stores.nodes, node.name, body, "annotate-node")
        log.info("Placed node in its Flexible scale set", node=node.name, scale_set=instance.scale_set_id)
        return ClusterNode.from_object(patched) if patched is not None else node

    def _placement(self, node: ClusterNode, *, step_machine: bool) -> tuple[dict[str, str], str | None]:
        """The annotations a node lacks, read from its providerID and the cloud (once for a new
        machine: ``step_machine``, one a capacity step in flight adds), or a problem."""
        try:
            machine = parse_provider_id(node.provider_id)
        except InvalidResourceIdError:
            return {}, f"providerID {node.provider_id!r} is not an Azure machine"
        if isinstance(machine, ScaleSetInstanceId):
            annotations = {SCALING_GROUP_ANNOTATION: str(machine.scale_set)}
        elif node.scaling_group_id:
            annotations = {}  # a Flexible scale set's member, placed by ``_place_member``
        else:  # a standalone VM, claimed by a group of its resource group's standalone VMs
            group = ResourceGroupId(machine.subscription_id, machine.resource_group)
            annotations = {SCALING_GROUP_ANNOTATION: str(group)}
        if not node.image:
            instance = self.recall_machine(node.provider_id)  # read for its Join already?
            try:
                if instance is None:
                    instance = self._cloud.get_instance(machine)
                    if step_machine:
                        self.remember_machine(instance)  # for its Join, once its step ended
            except NotFoundError:
                return {}, f"no machine {machine} at the cloud"
            image = instance.image
            if image is not None:
                annotations[NODE_IMAGE_ANNOTATION] = image.format()
        return {k: v for k, v in annotations.items() if node.annotations.get(k) != v}, None
