"""aadpodidentity.k8s.io/v1 models, field for field as aad-pod-identity v1.8 writes and reads them.

Owns the four kinds and their nested types: AzureIdentity (which Azure identity a pod may use),
AzureIdentityBinding (which pods, by the ``aadpodidbinding`` label, get it), AzureAssignedIdentity
(one pod's use of one identity on one node, which the NMI node agent reads to serve tokens) and
AzurePodIdentityException (pods NMI lets through untouched). The identity reconcilers in
``nodewright.controllers.identity`` read and write them. Imports nothing internal beyond the
model base.

Wire compatibility, decided field by field against upstream's ``pkg/apis/aadpodidentity/v1``
types and its CRD YAML (``charts/aad-pod-identity/crds/crd.yaml``):

- JSON names are upstream's, including their spelling (``resourceID``, ``clientID``,
  ``adResourceID``, ``nodename`` in lower case next to ``podNamespace``).
- ``omitempty`` is mirrored: scalars are left out when zero. Go's encoding/json never omits a
  struct value, so objects MIC wrote carry ``clientPassword: {}`` and ``metadata: {...}`` inside
  spec and status (upstream embeds an ObjectMeta there); those fields are ``None`` when absent and
  written back whenever present, so both a user's manifest and a MIC-written object round-trip
  unchanged. ``type`` works the same way: manifests spell out ``type: 0`` and MIC leaves it out.
- AzureAssignedIdentity embeds AzureIdentity and AzureIdentityBinding objects
  (``x-kubernetes-embedded-resource``, so the API server insists on a valid apiVersion and
  kind); the model reads whatever kind it finds (MIC before v1.6 wrote ``v1.AzureIdentity``).
  NMI reads ``spec.pod``, ``spec.podNamespace``, ``spec.azureIdentityRef.spec`` and
  ``status.status`` of the objects labelled ``nodename=<node>``. MIC copied the whole objects,
  status and resourceVersion included; nodewright copies the spec and the naming metadata only
  (``Embedded*.of``), so status updates of an AzureIdentity do not rewrite every assignment.
- The group is a protected ``k8s.io`` one: like upstream's, our CRDs carry
  ``api-approved.kubernetes.io: unapproved``, without which the API server refuses them.
- Same group, version, plural, singular, list kind and scope (all Namespaced), no short names,
  as upstream. The identity type is an integer 0/1/2 (the CRD enforces the three values).
- Status subresource: upstream's CRDs have none, and MIC wrote status through the main resource.
  Ours enable it for all four kinds. NMI never writes these objects (it only lists and watches),
  so it cannot tell the difference; users' ``kubectl apply`` of AzureIdentity manifests can no
  longer clobber the status we resolve; and generation only moves on spec changes. The one
  consequence: a MIC still running would have its status writes silently ignored, so MIC must be
  scaled to zero before nodewright manages identities (two managers would fight over the VMs'
  identities anyway).
- Our additions are optional status fields only, which aad-pod-identity's Go types ignore:
  AzureIdentity ``status.clientID``, ``principalID``, ``retrievalError``, ``nextRecheckTime``,
  ``observedGeneration``, ``conditions``; AzureIdentityBinding ``status.conditions``;
  AzureAssignedIdentity ``status.target``, ``addedByNodewright``, ``conditions``.
"""

from __future__ import annotations

import dataclasses
import enum
from dataclasses import dataclass
from typing import Any, ClassVar

from nodewright.api.base import Model, NamedByMetadata, PrinterColumn, Resource, field, json_name_of
from nodewright.api.meta import Condition

__all__ = [
    "API_VERSION",
    "APPROVAL_ANNOTATION",
    "APPROVAL_VALUE",
    "ASSIGNED_IDENTITY_FINALIZER",
    "ASSIGNED_STATUS_ASSIGNED",
    "ASSIGNED_STATUS_CREATED",
    "ASSIGNED_STATUS_UNASSIGNED",
    "BEHAVIOR_ANNOTATION",
    "BEHAVIOR_NAMESPACED",
    "CONDITION_ASSIGNED",
    "CONDITION_CLIENT_ID_CURRENT",
    "CONDITION_IDENTITY_FOUND",
    "CONDITION_RESOLVED",
    "CONDITION_SELECTOR_VALID",
    "CONDITION_WORKLOAD_IDENTITY_MIGRATION",
    "CRD_GROUP",
    "MIGRATION_CUT_OVER",
    "NODE_NAME_LABEL",
    "POD_LABEL",
    "WORKLOAD_IDENTITY_LABEL",
    "AzureAssignedIdentity",
    "AzureAssignedIdentitySpec",
    "AzureAssignedIdentityStatus",
    "AzureIdentity",
    "AzureIdentityBinding",
    "AzureIdentityBindingSpec",
    "AzureIdentityBindingStatus",
    "AzureIdentitySpec",
    "AzureIdentityStatus",
    "AzurePodIdentityException",
    "AzurePodIdentityExceptionSpec",
    "AzurePodIdentityExceptionStatus",
    "EmbeddedAzureIdentity",
    "EmbeddedAzureIdentityBinding",
    "IdentityType",
    "SecretReference",
]

CRD_GROUP = "aadpodidentity.k8s.io"
API_VERSION = f"{CRD_GROUP}/v1"
APPROVAL_ANNOTATION = "api-approved.kubernetes.io"
APPROVAL_VALUE = "unapproved"

POD_LABEL = "aadpodidbinding"
"""The pod label whose value must equal an AzureIdentityBinding's ``spec.selector``."""
BEHAVIOR_ANNOTATION = "aadpodidentity.k8s.io/Behavior"
"""On an AzureIdentity: ``namespaced`` confines it to pods and bindings of its own namespace."""
BEHAVIOR_NAMESPACED = "namespaced"
NODE_NAME_LABEL = "nodename"
"""On an AzureAssignedIdentity: the node its pod runs on (NMI lists by this label)."""
ASSIGNED_IDENTITY_FINALIZER = "azureassignedidentity.finalizers.aadpodidentity.k8s.io"
"""MIC's finalizer on AzureAssignedIdentities, kept so their cloud side is cleaned up first."""

ASSIGNED_STATUS_CREATED = "Created"
"""The AzureAssignedIdentity exists; the identity is not (yet) confirmed on the node."""
ASSIGNED_STATUS_ASSIGNED = "Assigned"
"""The identity is on the node's VM or scale set; NMI serves tokens for it."""
ASSIGNED_STATUS_UNASSIGNED = "Unassigned"
"""The identity was removed from the node (or was not ours to remove); the object is going away."""

CONDITION_RESOLVED = "Resolved"
"""AzureIdentity: True when clientId and principalId were read from Azure for the current spec."""
CONDITION_CLIENT_ID_CURRENT = "ClientIDCurrent"
"""AzureIdentity: False when spec.clientID differs from the identity's real clientId in Azure
(it was deleted and recreated under the same name, aad-pod-identity #521) or is not set."""
CONDITION_IDENTITY_FOUND = "IdentityFound"
"""AzureIdentityBinding: False when the AzureIdentity it names does not exist or is invalid."""
CONDITION_SELECTOR_VALID = "SelectorValid"
"""AzureIdentityBinding: False when spec.selector is no label value (longer than 63 characters,
not ASCII, ...): no pod can carry it as its aadpodidbinding label, so the binding matches none."""
CONDITION_WORKLOAD_IDENTITY_MIGRATION = "WorkloadIdentityMigration"
"""AzureIdentityBinding: the stage of its migration to workload identity; True with reason
``MIGRATION_CUT_OVER`` once its pods' owners were switched (pods labelled ``WORKLOAD_IDENTITY_LABEL``
then get no pod identity through it)."""
MIGRATION_CUT_OVER = "CutOver"
WORKLOAD_IDENTITY_LABEL = "azure.workload.identity/use"
"""The pod label Azure Workload Identity's webhook acts on."""
CONDITION_ASSIGNED = "Assigned"
"""AzureAssignedIdentity: why the identity is or is not on the node (rejected by ARM, node not
resolvable to a VM or scale set, ...)."""


def _conditions_schema() -> dict[str, Any]:
    """A fresh dict per field, so the generated YAML has no anchors and aliases."""
    return {"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["type"]}


_GO_OBJECT_META = {"type": "object", "description": "An ObjectMeta upstream's Go types embed here; unused."}
_INT32 = {"format": "int32"}


class IdentityType(enum.IntEnum):
    """What kind of credential an AzureIdentity names."""

    USER_ASSIGNED_MSI = 0
    SERVICE_PRINCIPAL = 1
    SERVICE_PRINCIPAL_CERTIFICATE = 2


@dataclass(kw_only=True)
class _WireModel(Model):
    """A model whose fields named in WRITTEN_WHEN_PRESENT are written whenever they are not None,
    even when empty or zero (see the module docstring: Go struct values and explicit type 0)."""

    WRITTEN_WHEN_PRESENT: ClassVar[tuple[str, ...]] = ()

    def to_dict(self) -> dict[str, Any]:
        result = super().to_dict()
        for model_field in dataclasses.fields(self):
            if model_field.name not in self.WRITTEN_WHEN_PRESENT:
                continue
            value = getattr(self, model_field.name)
            if value is None:
                continue
            if isinstance(value, Model):
                result[json_name_of(model_field)] = value.to_dict()
            elif isinstance(value, enum.Enum):
                result[json_name_of(model_field)] = value.value
            else:
                result[json_name_of(model_field)] = value
        return result


@dataclass(kw_only=True)
class SecretReference(Model):
    """A reference to a Secret (core/v1 SecretReference)."""

    name: str = field(default="", description="The name of the Secret.")
    namespace: str = field(default="", description="The namespace of the Secret.")


@dataclass(kw_only=True)
class _GroupResource(Resource):
    """A top-level kind of this group. ``k8s.io`` groups are protected: the API server refuses a CRD
    without the ``api-approved.kubernetes.io`` annotation, which upstream sets to ``unapproved``."""

    API_VERSION: ClassVar[str] = API_VERSION

    @classmethod
    def custom_resource_definition(cls) -> dict[str, Any]:
        crd = super().custom_resource_definition()
        crd["metadata"]["annotations"] = {APPROVAL_ANNOTATION: APPROVAL_VALUE}
        return crd


# AzureIdentity -----------------------------------------------------------------------------------


@dataclass(kw_only=True)
class AzureIdentitySpec(_WireModel):
    """The credential specifications of an identity on Azure."""

    WRITTEN_WHEN_PRESENT: ClassVar[tuple[str, ...]] = ("metadata", "type", "client_password")

    metadata: Any = field(default=None, schema=_GO_OBJECT_META)
    type: IdentityType | None = field(
        default=None,
        description=(
            "0: user-assigned managed identity, 1: service principal with a client secret, "
            "2: service principal with a certificate. Absent means 0."
        ),
    )
    resource_id: str = field(
        json="resourceID",
        default="",
        description=(
            "The ARM resource ID of the user-assigned identity (type 0): /subscriptions/<id>/"
            "resourcegroups/<group>/providers/Microsoft.ManagedIdentity/userAssignedIdentities/<name>."
        ),
    )
    client_id: str = field(
        json="clientID", default="", description="The client ID of the identity or service principal."
    )
    client_password: SecretReference | None = field(
        json="clientPassword", default=None, description="The Secret holding a service principal's secret."
    )
    tenant_id: str = field(json="tenantID", default="", description="The service principal's primary tenant.")
    auxiliary_tenant_ids: list[str] = field(
        json="auxiliaryTenantIDs",
        default_factory=list,
        description="The service principal's auxiliary tenants.",
        schema={"nullable": True},
    )
    ad_resource_id: str = field(
        json="adResourceID",
        default="",
        description="For a service principal: the AD resource to ask tokens for.",
    )
    ad_endpoint: str = field(
        json="adEndpoint", default="", description="For a service principal: the AD endpoint."
    )
    replicas: int | None = field(default=None, schema={**_INT32, "nullable": True})

    @property
    def identity_type(self) -> IdentityType:
        """The type, with upstream's default (an absent type is a user-assigned identity)."""
        return self.type if self.type is not None else IdentityType.USER_ASSIGNED_MSI


@dataclass(kw_only=True)
class AzureIdentityStatus(_WireModel):
    """Upstream's replica count, plus what nodewright read about the identity from Azure."""

    WRITTEN_WHEN_PRESENT: ClassVar[tuple[str, ...]] = ("metadata",)

    metadata: Any = field(default=None, schema=_GO_OBJECT_META)
    available_replicas: int = field(default=0, schema=_INT32)
    client_id: str = field(
        json="clientID",
        default="",
        description="nodewright: the identity's clientId as Azure reports it (empty when unknown).",
    )
    principal_id: str = field(
        json="principalID",
        default="",
        description="nodewright: the identity's principalId as Azure reports it (empty when unknown).",
    )
    retrieval_error: str = field(
        default="",
        description="nodewright: why the last lookup in Azure failed (at most 1024 characters).",
        schema={"maxLength": 1024},
    )
    next_recheck_time: str = field(
        default="",
        description="nodewright: when the identity is looked up in Azure again (unset: at the next pass).",
        schema={"format": "date-time"},
    )
    observed_generation: int = field(
        default=0, description="nodewright: the generation the status describes.", schema={"minimum": 0}
    )
    conditions: list[Condition] = field(
        default_factory=list,
        description="nodewright: Resolved, ClientIDCurrent.",
        schema=_conditions_schema(),
    )


@dataclass(kw_only=True)
class AzureIdentity(_GroupResource):
    """An Azure identity (user-assigned managed identity or service principal) pods may use."""

    KIND: ClassVar[str] = "AzureIdentity"
    PLURAL: ClassVar[str] = "azureidentities"
    PRINTER_COLUMNS: ClassVar[tuple[PrinterColumn, ...]] = (
        PrinterColumn("Type", ".spec.type", type="integer"),
        PrinterColumn("ClientID", ".spec.clientID"),
        PrinterColumn("ClientID Current", '.status.conditions[?(@.type=="ClientIDCurrent")].status'),
        PrinterColumn("Resolved ClientID", ".status.clientID", priority=1),
        PrinterColumn("ResourceID", ".spec.resourceID", priority=1),
        PrinterColumn("Age", ".metadata.creationTimestamp", type="date"),
    )

    spec: AzureIdentitySpec = field(default_factory=AzureIdentitySpec, omit_empty=False)
    status: AzureIdentityStatus = field(default_factory=AzureIdentityStatus)

    @property
    def is_namespaced(self) -> bool:
        """Whether the per-identity annotation confines this identity to its namespace."""
        annotations = self.metadata.get("annotations") or {}
        return annotations.get(BEHAVIOR_ANNOTATION) == BEHAVIOR_NAMESPACED


# AzureIdentityBinding ----------------------------------------------------------------------------


@dataclass(kw_only=True)
class AzureIdentityBindingSpec(_WireModel):
    """Which pods (label aadpodidbinding equal to selector) may use which AzureIdentity (by name, in
    the binding's namespace)."""

    WRITTEN_WHEN_PRESENT: ClassVar[tuple[str, ...]] = ("metadata",)

    metadata: Any = field(default=None, schema=_GO_OBJECT_META)
    azure_identity: str = field(
        json="azureIdentity", default="", description="The name of the AzureIdentity, in this namespace."
    )
    selector: str = field(
        default="", description="Pods whose aadpodidbinding label has exactly this value match."
    )
    weight: int = field(default=0, description="Unused by nodewright; kept for upstream compatibility.")


@dataclass(kw_only=True)
class AzureIdentityBindingStatus(_WireModel):
    """Upstream's replica count, plus nodewright's conditions."""

    WRITTEN_WHEN_PRESENT: ClassVar[tuple[str, ...]] = ("metadata",)

    metadata: Any = field(default=None, schema=_GO_OBJECT_META)
    available_replicas: int = field(default=0, schema=_INT32)
    conditions: list[Condition] = field(
        default_factory=list,
        description="nodewright: IdentityFound, SelectorValid, WorkloadIdentityMigration.",
        schema=_conditions_schema(),
    )


@dataclass(kw_only=True)
class AzureIdentityBinding(_GroupResource):
    """Brings together the pods that match a selector and the identity they can use."""

    KIND: ClassVar[str] = "AzureIdentityBinding"
    PLURAL: ClassVar[str] = "azureidentitybindings"
    PRINTER_COLUMNS: ClassVar[tuple[PrinterColumn, ...]] = (
        PrinterColumn("AzureIdentity", ".spec.azureIdentity"),
        PrinterColumn("Selector", ".spec.selector"),
        PrinterColumn("Identity Found", '.status.conditions[?(@.type=="IdentityFound")].status', priority=1),
        PrinterColumn("Age", ".metadata.creationTimestamp", type="date"),
    )

    spec: AzureIdentityBindingSpec = field(default_factory=AzureIdentityBindingSpec, omit_empty=False)
    status: AzureIdentityBindingStatus = field(default_factory=AzureIdentityBindingStatus)


# AzureAssignedIdentity ---------------------------------------------------------------------------


_EMBEDDED_METADATA_KEYS = ("name", "namespace", "uid")


@dataclass(kw_only=True)
class _EmbeddedResource(Model, NamedByMetadata):
    """Base of the objects an AzureAssignedIdentity embeds whole: apiVersion, kind (kept as the
    writer spelt it) and metadata, whose schema the API server owns for embedded resources."""

    api_version: str = field(default=API_VERSION)
    kind: str = field(default="")
    metadata: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def openapi_schema(cls) -> dict[str, Any]:
        schema = super().openapi_schema()
        schema["properties"]["metadata"] = {"type": "object"}
        return schema


@dataclass(kw_only=True)
class EmbeddedAzureIdentity(_EmbeddedResource):
    """A whole AzureIdentity as embedded in an AzureAssignedIdentity."""

    kind: str = field(default="AzureIdentity")
    spec: AzureIdentitySpec = field(default_factory=AzureIdentitySpec, omit_empty=False)
    status: AzureIdentityStatus = field(default_factory=AzureIdentityStatus)

    @classmethod
    def of(cls, identity: AzureIdentity) -> EmbeddedAzureIdentity:
        """The copy nodewright embeds: the spec whole (what NMI reads) and the metadata that names
        the object (name, namespace, uid). Unlike MIC, no status or resourceVersion is copied, so
        the AzureIdentity's status updates do not rewrite every AzureAssignedIdentity."""
        return cls(
            metadata={
                key: identity.metadata[key] for key in _EMBEDDED_METADATA_KEYS if key in identity.metadata
            },
            spec=AzureIdentitySpec.from_dict(identity.spec.to_dict()),
        )


@dataclass(kw_only=True)
class EmbeddedAzureIdentityBinding(_EmbeddedResource):
    """A whole AzureIdentityBinding as embedded in an AzureAssignedIdentity."""

    kind: str = field(default="AzureIdentityBinding")
    spec: AzureIdentityBindingSpec = field(default_factory=AzureIdentityBindingSpec, omit_empty=False)
    status: AzureIdentityBindingStatus = field(default_factory=AzureIdentityBindingStatus)

    @classmethod
    def of(cls, binding: AzureIdentityBinding) -> EmbeddedAzureIdentityBinding:
        """The copy nodewright embeds: the spec whole and the naming metadata (no status)."""
        return cls(
            metadata={
                key: binding.metadata[key] for key in _EMBEDDED_METADATA_KEYS if key in binding.metadata
            },
            spec=AzureIdentityBindingSpec.from_dict(binding.spec.to_dict()),
        )


_EMBEDDED = {"x-kubernetes-embedded-resource": True}


@dataclass(kw_only=True)
class AzureAssignedIdentitySpec(_WireModel):
    """One pod's use of one identity on one node, with copies of the identity and binding."""

    WRITTEN_WHEN_PRESENT: ClassVar[tuple[str, ...]] = ("metadata",)

    metadata: Any = field(default=None, schema=_GO_OBJECT_META)
    azure_identity_ref: EmbeddedAzureIdentity | None = field(
        json="azureIdentityRef",
        default=None,
        description="The AzureIdentity used, embedded whole.",
        schema=_EMBEDDED,
    )
    azure_binding_ref: EmbeddedAzureIdentityBinding | None = field(
        json="azureBindingRef",
        default=None,
        description="The AzureIdentityBinding that matched, embedded whole.",
        schema=_EMBEDDED,
    )
    pod: str = field(default="", description="The pod's name.")
    pod_namespace: str = field(default="", description="The pod's namespace.")
    node_name: str = field(json="nodename", default="", description="The node the pod runs on.")
    replicas: int | None = field(default=None, schema={**_INT32, "nullable": True})


@dataclass(kw_only=True)
class AzureAssignedIdentityStatus(_WireModel):
    """Upstream's state (Created, Assigned, Unassigned), plus what nodewright needs to remove the
    identity safely later."""

    WRITTEN_WHEN_PRESENT: ClassVar[tuple[str, ...]] = ("metadata",)

    metadata: Any = field(default=None, schema=_GO_OBJECT_META)
    status: str = field(
        default="", description="Created, Assigned (NMI serves tokens only then) or Unassigned."
    )
    available_replicas: int = field(default=0, schema=_INT32)
    target: str = field(
        default="",
        description=(
            "nodewright: the ARM ID (lower case) of the virtual machine or scale set the identity was "
            "put on; kept so it can be removed there even after the node is gone."
        ),
    )
    added_by_nodewright: bool = field(
        default=False,
        description=(
            "nodewright: true when nodewright added the identity to the target (it was absent, or "
            "another assignment of nodewright's had added it). nodewright removes only such identities."
        ),
    )
    conditions: list[Condition] = field(
        default_factory=list, description="nodewright: Assigned.", schema=_conditions_schema()
    )


@dataclass(kw_only=True)
class AzureAssignedIdentity(_GroupResource):
    """The identity <-> pod mapping that is matched, read by NMI on the pod's node."""

    KIND: ClassVar[str] = "AzureAssignedIdentity"
    PLURAL: ClassVar[str] = "azureassignedidentities"
    PRINTER_COLUMNS: ClassVar[tuple[PrinterColumn, ...]] = (
        PrinterColumn("Pod", ".spec.pod"),
        PrinterColumn("Pod Namespace", ".spec.podNamespace"),
        PrinterColumn("Identity", ".spec.azureIdentityRef.metadata.name"),
        PrinterColumn("Node", ".spec.nodename"),
        PrinterColumn("Status", ".status.status"),
        PrinterColumn("Target", ".status.target", priority=1),
        PrinterColumn("Age", ".metadata.creationTimestamp", type="date"),
    )

    spec: AzureAssignedIdentitySpec = field(default_factory=AzureAssignedIdentitySpec, omit_empty=False)
    status: AzureAssignedIdentityStatus = field(default_factory=AzureAssignedIdentityStatus)


# AzurePodIdentityException -----------------------------------------------------------------------


@dataclass(kw_only=True)
class AzurePodIdentityExceptionSpec(_WireModel):
    """Pods with all of these labels get their token requests proxied by NMI without checks."""

    WRITTEN_WHEN_PRESENT: ClassVar[tuple[str, ...]] = ("metadata",)

    metadata: Any = field(default=None, schema=_GO_OBJECT_META)
    pod_labels: dict[str, str] = field(default_factory=dict, description="The labels a pod must carry.")


@dataclass(kw_only=True)
class AzurePodIdentityExceptionStatus(_WireModel):
    """Upstream's (unused) status."""

    WRITTEN_WHEN_PRESENT: ClassVar[tuple[str, ...]] = ("metadata",)

    metadata: Any = field(default=None, schema=_GO_OBJECT_META)
    status: str = ""


@dataclass(kw_only=True)
class AzurePodIdentityException(_GroupResource):
    """Pods that do not need NMI to process their token requests."""

    KIND: ClassVar[str] = "AzurePodIdentityException"
    PLURAL: ClassVar[str] = "azurepodidentityexceptions"
    PRINTER_COLUMNS: ClassVar[tuple[PrinterColumn, ...]] = (
        PrinterColumn("Age", ".metadata.creationTimestamp", type="date"),
    )

    spec: AzurePodIdentityExceptionSpec = field(
        default_factory=AzurePodIdentityExceptionSpec, omit_empty=False
    )
    status: AzurePodIdentityExceptionStatus = field(default_factory=AzurePodIdentityExceptionStatus)
