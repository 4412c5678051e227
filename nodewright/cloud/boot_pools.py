"""The IP configurations a Uniform scale set's model gives every new instance: its *boot pool*.

Azure builds a new instance's NICs from the scale set's model, so secondary IP configurations in
the model's primary NIC configuration are on the machine, with addresses, when it boots; no
write to the instance is needed, nor can one start before the create has ended (Compute runs one
operation on an instance at a time). AKS gives Azure CNI's static mode its pods' addresses this
way. ``node_network_config`` adopts such configurations into a node's pool like any unaccounted
one (``ipam.allocation``).

Owns ``ScaleSetBootPools``, mixed into ``ComputeService`` (the pure edit is
``boot_configurations``): read a scale
set's boot pool (one GET) and PATCH the model's NIC configurations with the scale set's etag
(If-Match), handing the operation to the shared ``OperationTracker``. A model change reaches no
existing instance on a scale set whose upgrade policy is ``Manual`` (its instances then show
``latestModelApplied: false``); under ``Automatic`` or ``Rolling`` Azure would upgrade every
instance to it, replacing the IP configurations their pods use, so ``ScaleSetBootPool.writable``
is False there and callers write nothing. Side effects: ARM reads and writes.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from azure.core import MatchConditions
from azure.mgmt.compute import ComputeManagementClient
from azure.mgmt.compute import models as compute_models

from nodewright.cloud.boot_configurations import (
    boot_configuration_count,
    boot_subnet_id,
    with_boot_configurations,
)
from nodewright.cloud.calls import GuardedCalls
from nodewright.cloud.errors import CloudError
from nodewright.cloud.operations import OperationOutcome, OperationTracker
from nodewright.cloud.resource_ids import ScaleSetId

__all__ = ["ScaleSetBootPool", "ScaleSetBootPools"]


@dataclass(frozen=True)
class ScaleSetBootPool:
    """A scale set's model as far as its boot pool goes."""

    scale_set: ScaleSetId
    etag: str | None
    upgrade_mode: str
    """``Manual``, ``Automatic`` or ``Rolling`` (Azure's default, when absent, is ``Manual``)."""
    uniform: bool
    count: int
    """Our secondary IP configurations in the model's primary NIC configuration."""
    foreign: int
    """Other secondary IP configurations there (the user's own)."""
    nic_configurations: tuple[dict[str, Any], ...]

    @property
    def subnet_id(self) -> str | None:
        """The subnet the boot pool's addresses come from."""
        return boot_subnet_id(self.nic_configurations)

    @property
    def writable(self) -> bool:
        """Whether a model change reaches only new instances (Uniform, upgrade policy Manual)."""
        return self.uniform and self.upgrade_mode.lower() == "manual"


class ScaleSetBootPools:
    """A scale set's boot pool, read and written (mixed into ``ComputeService``, which sets the
    attributes below)."""

    _compute: ComputeManagementClient
    _call: GuardedCalls
    operations: OperationTracker

    def get_scale_set_boot_pool(self, scale_set: ScaleSetId) -> ScaleSetBootPool:
        """One GET of the scale set's model."""
        model = self._call(
            "compute.get_scale_set",
            lambda: self._compute.virtual_machine_scale_sets.get(scale_set.resource_group, scale_set.name),
            scale_set,
        )
        document: dict[str, Any] = model.as_dict()
        properties = document.get("properties") or {}
        profile = (properties.get("virtualMachineProfile") or {}).get("networkProfile") or {}
        nic_configurations = tuple(profile.get("networkInterfaceConfigurations") or [])
        ours, foreign = boot_configuration_count(nic_configurations)
        return ScaleSetBootPool(
            scale_set=scale_set,
            etag=model.etag,
            upgrade_mode=str((properties.get("upgradePolicy") or {}).get("mode") or "Manual"),
            uniform=str(properties.get("orchestrationMode") or "Uniform").lower() == "uniform",
            count=ours,
            foreign=foreign,
            nic_configurations=nic_configurations,
        )

    def begin_set_scale_set_boot_pool(
        self, pool: ScaleSetBootPool, count: int, on_done: Callable[[OperationOutcome], None]
    ) -> None:
        """PATCH the model's NIC configurations to carry ``count`` of ours, If-Match the etag
        ``pool`` was read with (412: read it again); returns once ARM accepted it, the operation
        tracker calls ``on_done`` when it ends. Refuses (``CloudError``) a scale set that is not
        ``writable``."""
        if not pool.writable:
            raise CloudError(
                f"The model of {pool.scale_set} reaches its instances (upgrade policy "
                f"{pool.upgrade_mode}): its boot pool is not written"
            )
        self._call.check_write(pool.scale_set)
        nic_configurations = with_boot_configurations(pool.nic_configurations, count)
        body = {
            "properties": {
                "virtualMachineProfile": {
                    "networkProfile": {"networkInterfaceConfigurations": nic_configurations}
                }
            }
        }
        polling = self.operations.polling()
        scale_set = pool.scale_set
        self._call(
            "compute.set_scale_set_boot_pool",
            lambda: self._compute.virtual_machine_scale_sets.begin_update(
                scale_set.resource_group,
                scale_set.name,
                compute_models.VirtualMachineScaleSetUpdate(body),
                etag=pool.etag,
                match_condition=MatchConditions.IfNotModified if pool.etag else None,
                polling=polling,
            ),
            scale_set,
            write=True,
        )
        self._call.track(self.operations, "compute.set_scale_set_boot_pool", scale_set, polling, on_done)
