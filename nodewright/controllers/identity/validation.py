"""Pure validation of the identity objects: one ``Problem`` per bad object (malformed resourceID,
binding to a missing or invalid identity, a binding whose selector no pod label can carry, a
matched pod on a node that does not exist or names no Azure VM or scale set), each with a reason
and a message that names the fix. No I/O; the reconcilers turn problems into conditions and
Warning Events."""

from __future__ import annotations

from collections.abc import Container, Iterable, Mapping

from nodewright.api.aadpodidentity.v1 import POD_LABEL, AzureIdentity, AzureIdentityBinding
from nodewright.cloud.resource_ids import InvalidResourceIdError
from nodewright.controllers.identity.decisions import (
    NodeInfo,
    PodInfo,
    Problem,
    identity_key,
    usable_identities,
)
from nodewright.controllers.identity.targets import target_of_provider_id
from nodewright.runtime import label_value_problem, shown

__all__ = ["INVALID_SELECTOR", "validate"]

INVALID_SELECTOR = "InvalidSelector"
"""The reason of a binding whose spec.selector is no label value: no pod can ever match it."""


def validate(
    identities: Iterable[AzureIdentity],
    bindings: Iterable[AzureIdentityBinding],
    matched_pods: Iterable[PodInfo] = (),
    nodes: Mapping[str, NodeInfo] | None = None,
) -> list[Problem]:
    """Bad input, one problem per object and kind of fault, each with a reason and a message that
    names the fix: malformed type-0 resourceIDs, bindings to a missing or invalid identity,
    bindings whose selector is no label value, matched pods on a node that does not exist or has
    no usable providerID. Sorted by kind, namespace, name, reason."""
    binding_list = list(bindings)
    identity_list = list(identities)
    known = {identity_key(identity) for identity in identity_list}
    usable = usable_identities(identity_list)
    problems = [
        *(_identity_problem(i) for i in identity_list if identity_key(i) not in usable),
        *(
            _binding_problem(b, known)
            for b in binding_list
            if (b.namespace, b.spec.azure_identity) not in usable
        ),
        *(p for p in map(_selector_problem, binding_list) if p is not None),
    ]
    if nodes is not None:
        problems += [p for p in (_pod_problem(pod, nodes) for pod in matched_pods) if p is not None]
    return sorted(
        problems, key=lambda problem: (problem.kind, problem.namespace, problem.name, problem.reason)
    )


def _identity_problem(identity: AzureIdentity) -> Problem:
    detail = (
        "spec.resourceID is empty"
        if not identity.spec.resource_id
        else f"spec.resourceID {identity.spec.resource_id!r} is not a user-assigned identity ID"
    )
    return Problem(
        "AzureIdentity",
        identity.namespace,
        identity.name,
        "InvalidResourceID",
        f"{detail}; expected /subscriptions/<id>/resourcegroups/<group>/providers/"
        "Microsoft.ManagedIdentity/userAssignedIdentities/<name>",
    )


def _binding_problem(binding: AzureIdentityBinding, known: Container[tuple[str, str]]) -> Problem:
    if (binding.namespace, binding.spec.azure_identity) in known:
        return Problem(
            "AzureIdentityBinding",
            binding.namespace,
            binding.name,
            "IdentityInvalid",
            f"AzureIdentity {binding.namespace}/{binding.spec.azure_identity} is invalid (see its events)",
        )
    return Problem(
        "AzureIdentityBinding",
        binding.namespace,
        binding.name,
        "IdentityNotFound",
        f"AzureIdentity {binding.spec.azure_identity!r} does not exist in namespace {binding.namespace}",
    )


def _selector_problem(binding: AzureIdentityBinding) -> Problem | None:
    """A selector that is no label value (longer than 63 characters, not ASCII, ...) can never
    equal a pod's aadpodidbinding label: the API server refuses such a label on any pod."""
    problem = label_value_problem(binding.spec.selector)
    if problem is None:
        return None
    return Problem(
        "AzureIdentityBinding",
        binding.namespace,
        binding.name,
        INVALID_SELECTOR,
        f"spec.selector {shown(binding.spec.selector)} {problem}, so no pod's {POD_LABEL} label can "
        "equal it and the binding matches no pod; use a value such as the pods' app name",
    )


def _pod_problem(pod: PodInfo, nodes: Mapping[str, NodeInfo]) -> Problem | None:
    node = nodes.get(pod.node_name)
    if node is None:
        return Problem("Pod", pod.namespace, pod.name, "NodeNotFound", f"Node {pod.node_name} does not exist")
    try:
        target_of_provider_id(node.provider_id)
    except InvalidResourceIdError:
        reason = "NodeWithoutProviderID" if not node.provider_id else "InvalidProviderID"
        return Problem(
            "Pod",
            pod.namespace,
            pod.name,
            reason,
            f"Node {node.name} has no Azure VM or scale set in spec.providerID "
            f"({node.provider_id or 'empty'}); its identities cannot be assigned",
        )
    return None
