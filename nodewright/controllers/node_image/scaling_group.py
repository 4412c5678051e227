"""ScalingGroupReconciler: keeps a scale set's model image on its NodeImage's image (a group of
standalone VMs has no model at the cloud: the image is recorded in its status, after its resource
group and subnet are found; a missing one is a False condition like a missing scale set).

Reads the ScalingGroup and its NodeImage from the cache (the NodeImage's previous image while
its rollout is rolled back, see ``rollout_state``), the scale set's model image from the
cloud, PATCHes the model when it differs (existing machines keep theirs; new ones boot the new
image), and reports the image in ``status.imageReference`` with an ``ImageApplied`` condition.
A missing scale set, a missing NodeImage or an image reference that does not parse is a False
condition and a Warning Event, and nothing is changed. The NodeImage reconciler creates machines
in a scale set only once this status names the desired image.

Only the ScalingGroup holding the scale set's claim writes (``targeting``): one that another
ScalingGroup's claim holds reads nothing at the cloud and gets ``ImageApplied=False`` reason
``ClaimedByOther`` naming the holder's NodeImage and ScalingGroup, with one Warning Event; the
holder asks again, from a fresh list of the API server, right before it PATCHes the model, and
waits (without writing) while its claim has not settled. Neighbours: ``node_image`` (reads the
status), ``targeting`` (the claim), ``cloud.compute`` through ``ScalingGroupCloud``.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable
from typing import Any, Literal, Protocol

from nodewright.api.base import ValidationError
from nodewright.api.nodewright.v1alpha1 import CONDITION_IMAGE_APPLIED, NodeImage, ScalingGroup
from nodewright.cloud.errors import CloudError, NotFoundError
from nodewright.cloud.models import ImageReference
from nodewright.cloud.resource_ids import (
    InvalidResourceIdError,
    ScaleSetId,
    parse_resource_group_id,
    parse_scale_set_id,
)
from nodewright.controllers.node_image.collaborators import Collaborators, WithCollaborators
from nodewright.controllers.node_image.grouping import InvalidImageError, parse_desired_image
from nodewright.controllers.node_image.resources import SCALING_GROUP
from nodewright.controllers.node_image.rollout_state import RolloutMemory, desired_image_of
from nodewright.controllers.node_image.targeting import (
    claim_holder,
    claim_settles_at,
    claimed_by_message,
    parse_scaling_groups,
)
from nodewright.runtime import PolicyRule, Request, Result, Store, get_logger, replace_status, set_condition

__all__ = ["RBAC_RULES", "ScalingGroupCloud", "ScalingGroupReconciler"]

log = get_logger(__name__)

RBAC_RULES: tuple[PolicyRule, ...] = (
    PolicyRule("nodewright.io", ("scalinggroups",), ("get", "list", "watch")),
    PolicyRule("nodewright.io", ("scalinggroups/status",), ("get", "update")),
    PolicyRule("nodewright.io", ("nodeimages",), ("get", "list", "watch")),
)


class ScalingGroupCloud(Protocol):
    """The cloud operations the ScalingGroup reconciler needs (``ComputeService`` has them)."""

    def get_scale_set_image(self, scale_set: ScaleSetId) -> ImageReference | None: ...

    def set_scale_set_image(self, scale_set: ScaleSetId, image: ImageReference) -> None: ...


class ScalingGroupReconciler(WithCollaborators[ScalingGroupCloud]):
    """Applies the NodeImage's image to the scale set's model (see the module docstring)."""

    def __init__(
        self, collaborators: Collaborators[ScalingGroupCloud], *, scaling_groups: Store, node_images: Store
    ) -> None:
        super().__init__(collaborators)
        self._scaling_groups = scaling_groups
        self._node_images = node_images

    def reconcile(self, request: Request) -> Result:
        cached = self._scaling_groups.get(request.name)
        if cached is None or (cached.get("metadata") or {}).get("deletionTimestamp"):
            return Result()
        obj = copy.deepcopy(cached)
        try:
            scaling_group = ScalingGroup.from_object(obj)
        except ValidationError as error:
            return self._refuse(obj, "InvalidSpec", str(error))
        held_back = self._check_claim(obj, scaling_group, self._scaling_groups.list())
        if held_back is not None:
            return held_back
        node_image_object = self._node_images.get(scaling_group.spec.node_image)
        if node_image_object is None:
            return self._refuse(
                obj, "NodeImageNotFound", f"No NodeImage named {scaling_group.spec.node_image}"
            )
        try:
            node_image = NodeImage.from_object(copy.deepcopy(node_image_object))
            memory = RolloutMemory.from_status(node_image.status)
            desired = parse_desired_image(desired_image_of(memory, node_image.spec.image))
        except (ValidationError, InvalidImageError) as error:
            return self._refuse(obj, "InvalidImageReference", str(error))
        if scaling_group.spec.standalone:
            return self._record_standalone_image(obj, scaling_group, desired)
        return self._apply_to_scale_set(obj, scaling_group, desired)

    def _apply_to_scale_set(
        self, obj: dict[str, Any], scaling_group: ScalingGroup, desired: ImageReference
    ) -> Result:
        """Set the scale set's model image to ``desired`` when it differs; report it."""
        try:
            scale_set = parse_scale_set_id(scaling_group.spec.group_id)
        except InvalidResourceIdError as error:
            return self._refuse(obj, "InvalidSpec", str(error))
        try:
            current = self._cloud.get_scale_set_image(scale_set)
        except NotFoundError:
            self._refuse(obj, "ScaleSetNotFound", f"No scale set {scaling_group.spec.group_id}")
            return Result(requeue_after=self._settings.scaling_group_resync_seconds)
        if current is None or not current.same_image(desired):
            held_back = self._check_claim(obj, scaling_group, self._client.list(SCALING_GROUP).items)
            if held_back is not None:
                return held_back
            self._checkpoint("set-image")
            try:
                self._cloud.set_scale_set_image(scale_set, desired)
            except CloudError as error:
                self._write_status(obj, "False", "SetImageFailed", str(error), image=current)
                self._events.event(obj, "Warning", "SetImageFailed", str(error))
                raise
            self._events.event(
                obj,
                "Normal",
                "ImageApplied",
                f"Scale set {scale_set.name} now creates machines from {desired}",
            )
            log.info("Set scale set image", scaling_group=scaling_group.name, image=str(desired))
            current = desired
        self._write_status(obj, "True", "Applied", f"New machines boot {current}", image=current)
        return Result(requeue_after=self._settings.scaling_group_resync_seconds)

    def _record_standalone_image(
        self, obj: dict[str, Any], scaling_group: ScalingGroup, desired: ImageReference
    ) -> Result:
        """A group of standalone VMs has no model at the cloud: check that its resource group and
        subnet exist (reads only), then record ``desired`` as the image new VMs are built from."""
        resync = Result(requeue_after=self._settings.scaling_group_resync_seconds)
        machines = scaling_group.spec.virtual_machines
        assert machines is not None  # the API requires it for a resource group groupID
        group = parse_resource_group_id(scaling_group.spec.group_id)
        try:
            self._standalone.list_machine_names(group)
        except NotFoundError:
            self._refuse(obj, "ResourceGroupNotFound", f"No resource group {scaling_group.spec.group_id}")
            return resync
        try:
            self._standalone.subnet_location(machines.subnet_id)
        except NotFoundError:
            self._refuse(obj, "SubnetNotFound", f"No subnet {machines.subnet_id}")
            return resync
        recorded = (obj.get("status") or {}).get("imageReference") or ""
        if not recorded or not ImageReference.parse(recorded).same_image(desired):
            message = f"Standalone VMs of {group.resource_group} are now created from {desired}"
            self._events.event(obj, "Normal", "ImageApplied", message)
            log.info("Recorded standalone group image", scaling_group=scaling_group.name, image=str(desired))
        self._write_status(obj, "True", "Applied", f"New machines boot {desired}", image=desired)
        return resync

    def _check_claim(
        self, obj: dict[str, Any], scaling_group: ScalingGroup, objects: Iterable[dict[str, Any]]
    ) -> Result | None:
        """None when ``scaling_group`` holds a settled claim on its scale set among ``objects``
        (the cache's ScalingGroups, or a fresh list right before a write); else what to return:
        ClaimedByOther when another holds it, a wait while the claim settles, nothing once gone."""
        holder = claim_holder(parse_scaling_groups(objects), scaling_group.spec.group_id)
        if holder is None:
            return Result()  # not in a fresh list: deleted meanwhile
        if holder.name != scaling_group.name:
            return self._refuse(obj, "ClaimedByOther", claimed_by_message(scaling_group, holder))
        settles_at = claim_settles_at(holder)
        if settles_at is not None and self._clock() < settles_at:
            return Result(requeue_after=max(0.1, (settles_at - self._clock()).total_seconds()))
        return None

    def _refuse(self, obj: dict[str, Any], reason: str, message: str) -> Result:
        """Report what keeps the image from being applied; nothing is changed at the cloud. The
        Warning Event goes out when the problem is new, not on every resync."""
        previous: dict[str, Any] = next(
            (
                c
                for c in (obj.get("status") or {}).get("conditions") or []
                if c.get("type") == CONDITION_IMAGE_APPLIED
            ),
            {},
        )
        if (previous.get("status"), previous.get("reason"), previous.get("message")) != (
            "False",
            reason,
            message,
        ):
            self._events.event(obj, "Warning", reason, message)
            log.info("Refused to apply image", scaling_group=obj["metadata"]["name"], reason=reason)
        self._write_status(obj, "False", reason, message, image=None)
        return Result()

    def _write_status(
        self,
        obj: dict[str, Any],
        status: Literal["True", "False", "Unknown"],
        reason: str,
        message: str,
        *,
        image: ImageReference | None,
    ) -> None:
        generation = int(obj["metadata"].get("generation", 0))
        existing = obj.get("status") or {}
        conditions = copy.deepcopy(existing.get("conditions") or [])
        set_condition(conditions, CONDITION_IMAGE_APPLIED, status, reason, message, generation)
        desired: dict[str, Any] = {"conditions": conditions, "observedGeneration": generation}
        reference = image.format() if image is not None else existing.get("imageReference", "")
        if reference:
            desired["imageReference"] = reference
        if desired == existing:
            return
        self._checkpoint("scaling-group-status")

        replace_status(self._client, SCALING_GROUP, obj, desired)
