"""Secondary IP configurations of a uniform scale-set instance, the part of ``ComputeService`` that
node_network_config's NIC writes use on Uniform scale sets (``network`` sends them here).

Owns ``InstanceIpConfigurations``: read the instance's model (from its scale set's listing while
the scale set is written in a burst, ``instance_models``; else a GET), edit its
``networkInterfaceConfigurations``, clear ``storageProfile.imageReference``, PUT it back with its
etag: waiting for the operation, or, given ``on_done``, handing it to the shared
``operations.OperationTracker`` so the caller's thread is free at once. A listed model whose etag
no longer matches (412) is read again with a GET and edited again, once; a 412 after a GET is the
caller's. Serialised per instance; the write's share of the budget is taken before the read it
rests on (``calls.GuardedCalls.prepaid_write``). Side effects: ARM reads and writes.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any

from azure.core import MatchConditions
from azure.mgmt.compute import ComputeManagementClient
from azure.mgmt.compute import models as compute_models

from nodewright.cloud.calls import GuardedCalls
from nodewright.cloud.errors import NotFoundError, PreconditionFailedError
from nodewright.cloud.instance_models import InstanceModels
from nodewright.cloud.ip_configurations import changed
from nodewright.cloud.locks import KeyedLocks
from nodewright.cloud.operations import OperationOutcome, OperationTracker
from nodewright.cloud.resource_ids import ScaleSetInstanceId

__all__ = ["INSTANCE_PUT", "InstanceIpConfigurations"]

INSTANCE_PUT = "PUT Microsoft.Compute/virtualMachineScaleSets/virtualMachines"
"""A scale-set instance's PUT, named as the budget names requests (``throttle.operation_name``)."""


class InstanceIpConfigurations:
    """A scale-set instance's IP configuration edits (mixed into ``ComputeService``, which sets
    the attributes below)."""

    _compute: ComputeManagementClient
    _call: GuardedCalls
    _machine_locks: KeyedLocks
    operations: OperationTracker
    instance_models: InstanceModels

    def reserved_instance_write(self) -> AbstractContextManager[float]:
        """``GuardedCalls.reserved_write`` of a scale-set instance's PUT."""
        return self._call.reserved_write(INSTANCE_PUT)

    def edit_scale_set_instance_ip_configurations(
        self,
        instance: ScaleSetInstanceId,
        nic_name: str,
        edit: Callable[[list[dict[str, Any]]], list[dict[str, Any]]],
        on_done: Callable[[OperationOutcome], None] | None = None,
    ) -> bool:
        """Apply ``edit`` to the instance model's IP configurations of NIC ``nic_name`` and PUT the
        instance (with its etag, image reference cleared). Without ``on_done``, waits for the
        operation; with it, returns once ARM accepted the PUT and the operation tracker calls
        ``on_done`` when the operation ends. Returns whether anything changed (nothing sent, and
        ``on_done`` never called, otherwise). Serialised per instance. Raises ``NotFoundError``
        when the NIC is not in the model."""

        def send(body: dict[str, Any], etag: str | None) -> None:
            polling = self.operations.polling() if on_done is not None else None

            def put() -> Any:
                poller = self._compute.virtual_machine_scale_set_vms.begin_update(
                    instance.resource_group,
                    instance.scale_set_name,
                    instance.instance_id,
                    compute_models.VirtualMachineScaleSetVM(body),
                    etag=etag,
                    match_condition=MatchConditions.IfNotModified if etag else None,
                    polling=polling if polling is not None else True,
                )
                return poller if polling is not None else poller.result()

            self._call("compute.put_scale_set_instance", put, instance, write=True)
            if polling is not None and on_done is not None:
                self._call.track(self.operations, "compute.put_scale_set_instance", instance, polling, ended)

        def ended(outcome: OperationOutcome) -> None:
            self.instance_models.forget(instance)  # a listing sent while it ran shows it unfinished
            if on_done is not None:
                on_done(outcome)

        return self._edit_instance_ip_configurations(instance, nic_name, edit, send)

    def _edit_instance_ip_configurations(
        self,
        instance: ScaleSetInstanceId,
        nic_name: str,
        edit: Callable[[list[dict[str, Any]]], list[dict[str, Any]]],
        send: Callable[[dict[str, Any], str | None], None],
    ) -> bool:
        """Read the instance (from its scale set's listing during a burst, else a GET), edit its
        NIC's IP configurations, ``send`` the model when changed. A listed model whose etag no
        longer matches (412) is read again with a GET and edited again, once."""
        self._call.check_write(instance)
        with (
            self._call.prepaid_write("compute.put_scale_set_instance", INSTANCE_PUT, instance),
            self._machine_locks.hold(str(instance)),
        ):
            listed = self.instance_models.model(instance)
            if listed is not None:
                try:
                    return self._edit_and_send(instance, nic_name, edit, send, listed)
                except PreconditionFailedError:
                    pass  # changed since it was listed: read it and decide again
                finally:
                    self.instance_models.forget(instance)  # written, or no longer its model
            return self._edit_and_send(instance, nic_name, edit, send, self._get_instance_model(instance))

    def _get_instance_model(self, instance: ScaleSetInstanceId) -> tuple[dict[str, Any], str | None]:
        model = self._call(
            "compute.get_scale_set_instance",
            lambda: self._compute.virtual_machine_scale_set_vms.get(
                instance.resource_group, instance.scale_set_name, instance.instance_id
            ),
            instance,
        )
        return model.as_dict(), model.etag

    @staticmethod
    def _edit_and_send(
        instance: ScaleSetInstanceId,
        nic_name: str,
        edit: Callable[[list[dict[str, Any]]], list[dict[str, Any]]],
        send: Callable[[dict[str, Any], str | None], None],
        model: tuple[dict[str, Any], str | None],
    ) -> bool:
        """Edit the model (document, etag) and ``send`` it when changed; whether it was sent."""
        body, etag = model
        properties = body.setdefault("properties", {})
        network_profile = properties.get("networkProfileConfiguration") or {}
        nic_configurations: list[dict[str, Any]] = network_profile.get("networkInterfaceConfigurations") or []
        nic = next(
            (entry for entry in nic_configurations if str(entry.get("name", "")).lower() == nic_name.lower()),
            None,
        )
        if nic is None:
            raise NotFoundError(f"Scale-set instance {instance} has no NIC configuration {nic_name!r}")
        nic_properties = nic.setdefault("properties", {})
        before: list[dict[str, Any]] = nic_properties.get("ipConfigurations") or []
        after = edit(before)
        if not changed(before, after):
            return False
        nic_properties["ipConfigurations"] = after
        storage = properties.get("storageProfile")
        if isinstance(storage, dict):
            storage.pop("imageReference", None)
        send(body, etag)
        return True
