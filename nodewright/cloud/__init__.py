"""cloud: Azure access through the real SDKs, and a local ARM emulator. Knows nothing of Kubernetes.

Build everything with ``build_cloud(CloudSettings(...))``; the services it returns
(``ComputeService``, ``NetworkService``, ``IdentityService``) take and return this package's own
frozen values (``resource_ids``, ``models``) and raise ``CloudError`` subclasses.

Retries: exactly one layer retries each kind of failure, so retries never multiply.

- Transport failures (connection refused or reset, read timeout): azure-core's ``RetryPolicy``
  (``retry_total``, exponential from ``retry_backoff_factor``). Nothing else retries them.
- 429: nobody retries at once. The shared request budget (``budget``) holds every request of the
  class (reads, writes or deletes) of that subscription and principal for ``Retry-After``, or a
  derived time when there is none; the caller gets ``ThrottledError`` and its work queue retries.
- 5xx, 409, failed long-running operations: not azure-core (``retry_status=0``); the caller gets a
  ``CloudError`` naming code and target, the target backs off (``backoff``: 5 s doubling to
  1 min), and the work queue retries; calls made during the backoff are refused unsent
  (``BackingOffError``, a quiet error).
- 412 (stale etag): the service re-reads and retries a few times itself (``conflict_retries``).
"""

from nodewright.cloud.backoff import BackingOffError, TargetBackoff
from nodewright.cloud.budget import ArmBudget, ArmBudgets, BudgetObserver
from nodewright.cloud.compute import ComputeService, IdentityUpdateIncompleteError
from nodewright.cloud.config import (
    CloudSettings,
    CredentialKind,
    CredentialSettings,
    StaticTokenCredential,
    build_credential,
)
from nodewright.cloud.errors import (
    CloudError,
    ConflictError,
    IdentityRejectedError,
    LimitExceededError,
    NotFoundError,
    PreconditionFailed,
    PreconditionFailedError,
    SubnetFullError,
    ThrottledError,
)
from nodewright.cloud.factory import Cloud, CloudClients, build_clients, build_cloud
from nodewright.cloud.identity_updates import IdentityPatch, plan_identity_patches
from nodewright.cloud.models import (
    IdentityAssignment,
    IdentityInfo,
    IdentityRejection,
    IdentityUpdateResult,
    ImageReference,
    InstanceInfo,
    IpConfigurationInfo,
    NicInfo,
    NicListing,
    NodeState,
    ResourceIdentities,
    ScaleOutAccepted,
    SubnetInfo,
    node_state_from_status_codes,
)
from nodewright.cloud.msi import IdentityService
from nodewright.cloud.network import NetworkService
from nodewright.cloud.resource_ids import (
    InvalidResourceIdError,
    MachineId,
    NetworkInterfaceId,
    ResourceGroupId,
    ResourceId,
    ScaleSetId,
    ScaleSetInstanceId,
    SubnetId,
    UserAssignedIdentityId,
    VirtualMachineId,
    normalize_identity_id,
    parse_machine_id,
    parse_network_interface_id,
    parse_provider_id,
    parse_resource_group_id,
    parse_resource_id,
    parse_scale_set_id,
    parse_subnet_id,
    parse_user_assigned_identity_id,
)
from nodewright.cloud.standalone_machines import MachineModel, StandaloneMachineService
from nodewright.cloud.throttle import (
    CallEvent,
    CallObserver,
    InMemoryCallCounter,
    NullObserver,
    RetryAfterGate,
    TokenBucket,
)

__all__ = [
    "ArmBudget",
    "ArmBudgets",
    "BackingOffError",
    "BudgetObserver",
    "CallEvent",
    "CallObserver",
    "Cloud",
    "CloudClients",
    "CloudError",
    "CloudSettings",
    "ComputeService",
    "ConflictError",
    "CredentialKind",
    "CredentialSettings",
    "IdentityAssignment",
    "IdentityInfo",
    "IdentityPatch",
    "IdentityRejectedError",
    "IdentityRejection",
    "IdentityService",
    "IdentityUpdateIncompleteError",
    "IdentityUpdateResult",
    "ImageReference",
    "InMemoryCallCounter",
    "InstanceInfo",
    "InvalidResourceIdError",
    "IpConfigurationInfo",
    "LimitExceededError",
    "MachineId",
    "MachineModel",
    "NetworkInterfaceId",
    "NetworkService",
    "NicInfo",
    "NicListing",
    "NodeState",
    "NotFoundError",
    "NullObserver",
    "PreconditionFailed",
    "PreconditionFailedError",
    "ResourceGroupId",
    "ResourceId",
    "ResourceIdentities",
    "RetryAfterGate",
    "ScaleOutAccepted",
    "ScaleSetId",
    "ScaleSetInstanceId",
    "StandaloneMachineService",
    "StaticTokenCredential",
    "SubnetFullError",
    "SubnetId",
    "SubnetInfo",
    "TargetBackoff",
    "ThrottledError",
    "TokenBucket",
    "UserAssignedIdentityId",
    "VirtualMachineId",
    "build_clients",
    "build_cloud",
    "build_credential",
    "node_state_from_status_codes",
    "normalize_identity_id",
    "parse_machine_id",
    "parse_network_interface_id",
    "parse_provider_id",
    "parse_resource_group_id",
    "parse_resource_id",
    "parse_scale_set_id",
    "parse_subnet_id",
    "parse_user_assigned_identity_id",
    "plan_identity_patches",
]
