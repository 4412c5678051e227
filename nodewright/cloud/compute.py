"""Compute operations on VMs, VM scale sets and their instances, through azure-mgmt-compute.

Owns: user-assigned identities of a VM or scale set (read; delta PATCH planned by
``identity_updates``, at most 150 per request, a rejected identity isolated and the rest
retried, what landed re-read on failure; a PATCH's result is its own answer once its operation
Succeeded, with no final GET: ``lro.py``); a scale set's model image (get and set); scale out by
any count in one capacity PATCH whose operation the ``operations.OperationTracker`` follows;
delete an instance; instance view to ``NodeState``; an instance's image; and, through
``instance_ip_configurations.InstanceIpConfigurations``, the secondary IP configurations of a
uniform scale-set instance (its model listed a scale set at a time during a burst of writes:
``instance_models``); through ``boot_pools.ScaleSetBootPools``, the IP configurations a scale
set's model gives new instances. Every method does I/O and may raise a ``CloudError``; each call goes
through ``calls.GuardedCalls`` (counted on the ``CallObserver``, held back while its target backs
off), as ``network``'s do. ``network`` uses the scale-set instance path; ``factory`` builds this
service.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from contextlib import nullcontext
from typing import Any, TypeVar

from azure.core import MatchConditions
from azure.mgmt.compute import ComputeManagementClient
from azure.mgmt.compute import models as compute_models

from nodewright.cloud.backoff import TargetBackoff
from nodewright.cloud.boot_pools import ScaleSetBootPools
from nodewright.cloud.budget import ArmBudget
from nodewright.cloud.calls import GuardedCalls
from nodewright.cloud.errors import CloudError, IdentityRejectedError, NotFoundError, PreconditionFailedError
from nodewright.cloud.identity_updates import (
    MAX_IDENTITIES_PER_REQUEST,
    IdentityPatch,
    apply_patch,
    plan_identity_patches,
)
from nodewright.cloud.instance_ids import list_scale_set_instance_documents, list_scale_set_instance_ids
from nodewright.cloud.instance_ip_configurations import InstanceIpConfigurations
from nodewright.cloud.instance_models import InstanceModels
from nodewright.cloud.locks import KeyedLocks
from nodewright.cloud.lro import AnswerKeepingPolling
from nodewright.cloud.models import (
    IdentityRejection,
    IdentityUpdateResult,
    ImageReference,
    InstanceInfo,
    NodeState,
    ResourceIdentities,
    ScaleOutAccepted,
    node_state_from_status_codes,
)
from nodewright.cloud.operations import OperationOutcome, OperationTracker
from nodewright.cloud.resource_ids import (
    PROVIDER_ID_PREFIX,
    MachineId,
    ScaleSetId,
    ScaleSetInstanceId,
    VirtualMachineId,
)
from nodewright.cloud.throttle import DEFAULT_PACING_MAX_WAIT_SECONDS, CallObserver, TokenBucket

log = logging.getLogger(__name__)

T = TypeVar("T")

CONFLICT_RETRIES = 3
"""Fresh reads after a 412 (the target changed under a PATCH) before giving up for this pass."""

IdentityTarget = VirtualMachineId | ScaleSetId


class IdentityUpdateIncompleteError(CloudError):
    """An identity update stopped part-way. ``identities`` is what was re-read afterwards (``None``
    if that read failed too), ``rejected`` the identities isolated before the failure; the
    original error is ``cause`` (and ``__cause__``)."""

    def __init__(
        self,
        cause: CloudError,
        identities: ResourceIdentities | None,
        rejected: tuple[IdentityRejection, ...],
    ) -> None:
        super().__init__(
            f"Identity update stopped: {cause.message}", status_code=cause.status_code, code=cause.code
        )
        self.cause = cause
        self.target = cause.target
        self.quiet = cause.quiet
        self.retry_after: float | None = getattr(cause, "retry_after", None)
        self.retry_at: float | None = getattr(cause, "retry_at", None)
        self.identities = identities
        self.rejected = rejected


def image_from_sdk(reference: compute_models.ImageReference | None) -> ImageReference | None:
    """Our ``ImageReference`` from the SDK's (``None`` when the machine names no image)."""
    if reference is None:
        return None
    result = ImageReference(
        id=reference.id,
        community_gallery_image_id=reference.community_gallery_image_id,
        shared_gallery_image_id=reference.shared_gallery_image_id,
        publisher=reference.publisher,
        offer=reference.offer,
        sku=reference.sku,
        version=reference.version,
    )
    if result == ImageReference():
        return None
    return result


def identities_from_sdk(identity: Any, etag: str | None = None) -> ResourceIdentities:
    """Our ``ResourceIdentities`` from an SDK identity block (VM or scale set) and the
    resource's etag."""
    if identity is None:
        return ResourceIdentities.from_parts("None", (), etag)
    user_assigned = identity.user_assigned_identities or {}
    return ResourceIdentities.from_parts(identity.type, user_assigned.keys(), etag)


def _status_codes(instance_view: Any) -> list[str]:
    if instance_view is None:
        return []
    return [status.code for status in (instance_view.statuses or []) if status.code]


class ComputeService(InstanceIpConfigurations, ScaleSetBootPools):
    """Compute operations for nodewright (see the module docstring)."""

    def __init__(
        self,
        compute: ComputeManagementClient,
        *,
        observer: CallObserver | None = None,
        backoff: TargetBackoff | None = None,
        max_identities_per_request: int = MAX_IDENTITIES_PER_REQUEST,
        polling_interval: float,
        operations: OperationTracker | None = None,
        budget: ArmBudget | None = None,
        pacing_max_wait_seconds: float = DEFAULT_PACING_MAX_WAIT_SECONDS,
        mutation_bucket: TokenBucket | None = None,
    ) -> None:
        self._compute = compute
        self.polling_interval = polling_interval
        self.operations = operations or OperationTracker(interval=polling_interval, observer=observer)
        self._call = GuardedCalls(observer, backoff, budget, pacing_max_wait_seconds, mutation_bucket)
        self.max_identities_per_request = max_identities_per_request
        self._scale_set_locks = KeyedLocks()
        self._machine_locks = KeyedLocks()
        self.instance_models = InstanceModels(self.list_instance_documents)

    # Identities -------------------------------------------------------------------------------

    def get_identities(self, target: IdentityTarget) -> ResourceIdentities:
        """The identity block of a VM or scale set (GET)."""
        if isinstance(target, ScaleSetId):
            scale_set = self._call(
                "compute.get_scale_set",
                lambda: self._compute.virtual_machine_scale_sets.get(target.resource_group, target.name),
                target,
            )
            return identities_from_sdk(scale_set.identity, scale_set.etag)
        machine = self._call(
            "compute.get_virtual_machine",
            lambda: self._compute.virtual_machines.get(target.resource_group, target.name),
            target,
        )
        return identities_from_sdk(machine.identity, machine.etag)

    def _send_identity_patch(
        self, target: IdentityTarget, patch: IdentityPatch, etag: str | None
    ) -> ResourceIdentities | None:
        """One identity PATCH, guarded by ``etag`` (If-Match) when given: a 412 means the target
        changed since it was read, and nothing was applied."""
        body = {"identity": patch.body()}
        condition = MatchConditions.IfNotModified if etag else None
        scale_set = isinstance(target, ScaleSetId)
        compute, models = self._compute, compute_models
        operations: Any = compute.virtual_machine_scale_sets if scale_set else compute.virtual_machines
        update: Any = models.VirtualMachineScaleSetUpdate if scale_set else models.VirtualMachineUpdate
        landed = self._call(
            "compute.patch_scale_set_identities" if scale_set else "compute.patch_virtual_machine_identities",
            lambda: operations.begin_update(
                target.resource_group,
                target.name,
                update(body),
                etag=etag,
                match_condition=condition,
                polling=AnswerKeepingPolling(self.polling_interval),  # no final GET: the answer is the result
            ).result(),
            target,
            write=True,
        )
        return identities_from_sdk(landed.identity, landed.etag) if landed is not None else None

    def update_identities(
        self,
        target: IdentityTarget,
        add: Iterable[str] = (),
        remove: Iterable[str] = (),
        *,
        current: ResourceIdentities | None = None,
        max_per_request: int | None = None,
    ) -> IdentityUpdateResult:
        """Add and remove user-assigned identities on a VM or scale set; a system-assigned
        identity is kept. Side effects: GET (skipped when the caller passes the ``current``
        identities it has read), then PATCHes of ``identity`` only (150 entries at most each, or
        ``max_per_request``). Each PATCH carries the etag of the state it was planned from
        (If-Match) when known: if the target changed since, the first PATCH raises
        ``PreconditionFailedError`` with nothing applied, and the caller decides again from a
        fresh read.
        An identity ARM rejects by name (LinkedAuthorizationFailed,
        FailedIdentityOperation) is dropped and the rest retried; the result lists rejections.
        Any other failure re-reads what landed and raises ``IdentityUpdateIncompleteError``.
        """
        wanted = {identity_id.lower() for identity_id in add}
        unwanted = {identity_id.lower() for identity_id in remove}
        self._call.check_write(target)
        with self._scale_set_locks.hold(str(target)):
            planned_by_caller = current is not None
            if current is None:
                current = self.get_identities(target)
            stale_reads = 0
            excluded: set[str] = set()
            rejected: list[IdentityRejection] = []
            requests, chunk = 0, max_per_request or self.max_identities_per_request
            while True:
                patches = plan_identity_patches(current, wanted - excluded, unwanted - excluded, chunk)
                if not patches:
                    break
                patch = patches[0]
                requests += 1
                try:
                    landed = self._send_identity_patch(target, patch, current.etag)
                except PreconditionFailedError:
                    stale_reads += 1
                    if (planned_by_caller and requests == 1) or stale_reads > CONFLICT_RETRIES:
                        raise  # nothing applied: the caller decides again from a fresh read
                    current = self.get_identities(target)
                    continue
                except IdentityRejectedError as error:
                    excluded.update(self._set_aside(target, patch, error, rejected))
                    current = self.get_identities(target)
                    continue
                except CloudError as error:
                    raise self._incomplete(target, error, rejected) from error
                current = landed if landed is not None else apply_patch(current, patch)
            return IdentityUpdateResult(identities=current, rejected=tuple(rejected), requests=requests)

    def _set_aside(
        self,
        target: IdentityTarget,
        patch: IdentityPatch,
        error: IdentityRejectedError,
        rejected: list[IdentityRejection],
    ) -> list[str]:
        """The identities of ``patch`` that ARM refused by name (recorded in ``rejected``), to
        retry the rest without them; raises ``IdentityUpdateIncompleteError`` when none is named."""
        in_patch = {identity_id for identity_id, _ in patch.changes}
        named = [identity_id for identity_id in error.identity_ids if identity_id in in_patch]
        if not named and len(in_patch) == 1:
            named = list(in_patch)
        if not named:
            raise self._incomplete(target, error, rejected) from error
        rejected.extend(IdentityRejection(name, error.code or "", error.message) for name in named)
        log.warning(
            "Identity rejected by ARM, retrying without it: target=%s identities=%s code=%s",
            target,
            named,
            error.code,
        )
        return named

    def _incomplete(
        self, target: IdentityTarget, error: CloudError, rejected: list[IdentityRejection]
    ) -> IdentityUpdateIncompleteError:
        try:
            landed: ResourceIdentities | None = self.get_identities(target)
        except CloudError:
            landed = None
        return IdentityUpdateIncompleteError(error, landed, tuple(rejected))

    # Scale set model image ---------------------------------------------------------------------

    def get_scale_set_image(self, scale_set: ScaleSetId) -> ImageReference | None:
        """The image of the scale set's model (new instances get it)."""
        model = self._call(
            "compute.get_scale_set",
            lambda: self._compute.virtual_machine_scale_sets.get(scale_set.resource_group, scale_set.name),
            scale_set,
        )
        profile = model.virtual_machine_profile
        storage = profile.storage_profile if profile is not None else None
        return image_from_sdk(storage.image_reference if storage is not None else None)

    def set_scale_set_image(self, scale_set: ScaleSetId, image: ImageReference) -> None:
        """PATCH the scale set's model image; waits for the operation. Existing instances keep theirs."""
        body = {
            "properties": {"virtualMachineProfile": {"storageProfile": {"imageReference": image.to_arm()}}}
        }
        self._call(
            "compute.set_scale_set_image",
            lambda: self._compute.virtual_machine_scale_sets.begin_update(
                scale_set.resource_group, scale_set.name, compute_models.VirtualMachineScaleSetUpdate(body)
            ).result(),
            scale_set,
            write=True,
        )

    # Instances ---------------------------------------------------------------------------------

    def list_instance_ids(self, scale_set: ScaleSetId) -> list[str]:
        """The instance IDs of a scale set (one paged list, read raw: no SDK model per instance,
        see ``instance_ids``)."""
        return self._call(
            "compute.list_scale_set_instances",
            lambda: list_scale_set_instance_ids(self._compute, scale_set),
        )

    def list_instance_documents(self, scale_set: ScaleSetId) -> tuple[list[dict[str, Any]], int]:
        """Every instance's model as listed, and the pages read, for ``instance_models`` (no
        target: a failed list holds nothing else of the scale set back; its callers GET)."""
        return self._call(
            "compute.list_scale_set_instance_models",
            lambda: list_scale_set_instance_documents(self._compute, scale_set),
        )

    def list_instances(self, scale_set: ScaleSetId) -> list[InstanceInfo]:
        """Every instance of a scale set, with its state from the instance view when listed."""

        def list_all() -> list[InstanceInfo]:
            return [
                self._instance_info(instance)
                for instance in self._compute.virtual_machine_scale_set_vms.list(
                    scale_set.resource_group, scale_set.name, expand="instanceView"
                )
            ]

        return self._call("compute.list_scale_set_instances", list_all)

    def scale_out(
        self,
        scale_set: ScaleSetId,
        count: int,
        record_before: Callable[[list[str]], None],
        on_done: Callable[[OperationOutcome], None],
    ) -> ScaleOutAccepted:
        """Raise the scale set's capacity by ``count`` in one PATCH; once ARM accepted it, list the
        instances again and return the capacity asked for with the instances that are new. The
        operation tracker follows the operation and calls ``on_done`` when it ends (the caller's
        thread never waits for it).

        Side effects: list the instance IDs, hand them (sorted) to ``record_before`` (the caller
        records them, so it can find the new instances by difference after a restart; an
        exception there stops the scale-out before it starts), GET, PATCH ``sku.capacity``, list
        again. ARM takes any capacity step in one PATCH. Serialised per scale set within this
        process up to the second list, so two callers never raise the same capacity and no delete
        lands between a read of the capacity and the PATCH (``delete_instance``).
        """
        if count < 1:
            raise ValueError(f"scale-out of {scale_set.name} by {count}")
        self._call.check_write(scale_set)
        with self._scale_set_locks.hold(str(scale_set)):
            before = self.list_instance_ids(scale_set)
            record_before(sorted(before, key=_instance_sort_key))
            capacity = self._capacity(scale_set) + count
            body = {"sku": {"capacity": capacity}}
            polling = self.operations.polling()
            self._call(
                "compute.scale_out",
                lambda: self._compute.virtual_machine_scale_sets.begin_update(
                    scale_set.resource_group,
                    scale_set.name,
                    compute_models.VirtualMachineScaleSetUpdate(body),
                    polling=polling,
                ),
                scale_set,
                write=True,
            )
            self._call.track(self.operations, "compute.scale_out", scale_set, polling, on_done)
            log.info("Scaling out scale set: scale_set=%s capacity=%d added=%d", scale_set, capacity, count)
            try:
                after = self.list_instance_ids(scale_set)
            except CloudError:  # accepted all the same: the caller finds them when it ends
                after = before
        added = sorted(set(after) - set(before), key=_instance_sort_key)
        return ScaleOutAccepted(capacity, tuple(added))

    def _capacity(self, scale_set: ScaleSetId) -> int:
        model = self._call(
            "compute.get_scale_set",
            lambda: self._compute.virtual_machine_scale_sets.get(scale_set.resource_group, scale_set.name),
            scale_set,
        )
        return int(model.sku.capacity or 0) if model.sku is not None else 0

    def get_primary_network_interface(self, machine: MachineId) -> str:
        """The ARM ID of a machine's primary NIC (the one marked primary, else the first), read
        from the VM or scale-set instance model. Raises ``NotFoundError`` when the machine is
        gone or has no NIC."""
        if isinstance(machine, ScaleSetInstanceId):
            model: Any = self._call(
                "compute.get_machine_network_profile",
                lambda: self._compute.virtual_machine_scale_set_vms.get(
                    machine.resource_group, machine.scale_set_name, machine.instance_id
                ),
            )
        else:
            model = self._call(
                "compute.get_machine_network_profile",
                lambda: self._compute.virtual_machines.get(machine.resource_group, machine.name),
            )
        profile = getattr(model, "network_profile", None)
        references: list[Any] = list(getattr(profile, "network_interfaces", None) or [])
        if not references:
            raise NotFoundError(
                f"Machine {machine} has no network interface", code="NetworkInterfaceNotFound"
            )
        primary = next(
            (reference for reference in references if getattr(reference, "primary", False)), references[0]
        )
        return str(primary.id)

    def get_instance(self, machine: MachineId) -> InstanceInfo:
        """A VM or scale-set instance with its state (from the instance view) and image."""
        if isinstance(machine, ScaleSetInstanceId):
            instance = self._call(
                "compute.get_scale_set_instance",
                lambda: self._compute.virtual_machine_scale_set_vms.get(
                    machine.resource_group, machine.scale_set_name, machine.instance_id, expand="instanceView"
                ),
                machine,
            )
            return self._instance_info(instance)
        vm = self._call(
            "compute.get_virtual_machine",
            lambda: self._compute.virtual_machines.get(
                machine.resource_group, machine.name, expand="instanceView"
            ),
            machine,
        )
        return self._instance_info(vm)

    def _instance_info(self, machine: Any) -> InstanceInfo:
        os_profile = machine.os_profile
        computer_name = (
            str(os_profile.computer_name) if os_profile is not None and os_profile.computer_name else ""
        )
        codes = _status_codes(machine.instance_view)
        if (
            not any(code.lower().startswith("provisioningstate/") for code in codes)
            and machine.provisioning_state
        ):
            codes.insert(0, f"ProvisioningState/{machine.provisioning_state}")
        storage = machine.storage_profile
        return InstanceInfo(
            id=str(machine.id),
            name=(computer_name or str(machine.name)).lower(),
            computer_name=computer_name,
            provider_id=PROVIDER_ID_PREFIX + str(machine.id),
            state=node_state_from_status_codes(codes),
            image=image_from_sdk(storage.image_reference if storage is not None else None),
            instance_id=getattr(machine, "instance_id", None),
            scale_set_id=getattr(getattr(machine, "virtual_machine_scale_set", None), "id", None),
        )

    def get_node_state(self, machine: MachineId) -> NodeState:
        """The machine's state from its instance view; a machine that is gone is ``TERMINATED``."""
        try:
            if isinstance(machine, ScaleSetInstanceId):
                view: Any = self._call(
                    "compute.get_instance_view",
                    lambda: self._compute.virtual_machine_scale_set_vms.get_instance_view(
                        machine.resource_group, machine.scale_set_name, machine.instance_id
                    ),
                )
            else:
                view = self._call(
                    "compute.get_instance_view",
                    lambda: self._compute.virtual_machines.instance_view(
                        machine.resource_group, machine.name
                    ),
                )
        except NotFoundError:
            return NodeState.TERMINATED
        return node_state_from_status_codes(_status_codes(view))

    def delete_instance(self, machine: MachineId, member_of: ScaleSetId | None = None) -> None:
        """Delete a scale-set instance or a VM and wait; one already gone counts as deleted.

        ARM lowers a scale set's capacity when it accepts the delete of a Uniform instance or of a
        Flexible member (a VM whose scale set is ``member_of``), so that delete is sent under the
        scale set's lock, which ``scale_out`` holds from its read of the capacity to its PATCH: a
        delete accepted between the two would make that PATCH (the capacity read plus the step)
        add one machine more than the step. The wait is outside the lock."""
        if isinstance(machine, ScaleSetInstanceId):
            scale_set: ScaleSetId | None = machine.scale_set
            operation = "compute.delete_scale_set_instance"
        else:
            scale_set, operation = member_of, "compute.delete_virtual_machine"

        def begin() -> Any:
            if isinstance(machine, ScaleSetInstanceId):
                return self._compute.virtual_machine_scale_set_vms.begin_delete(
                    machine.resource_group, machine.scale_set_name, machine.instance_id
                )
            return self._compute.virtual_machines.begin_delete(machine.resource_group, machine.name)

        def delete() -> None:
            with self._scale_set_locks.hold(str(scale_set)) if scale_set is not None else nullcontext():
                poller = begin()
            poller.result()

        try:
            self._call(operation, delete, machine, write=True)
        except NotFoundError:
            log.info("Instance already deleted: machine=%s", machine)
            return
        log.info("Deleted instance: machine=%s", machine)


def _instance_sort_key(instance_id: str) -> tuple[int, str]:
    return (int(instance_id), instance_id) if instance_id.isdigit() else (1 << 62, instance_id)
