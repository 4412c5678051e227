"""The start check of the server-side write fence: are its policy and binding installed?

Owns ``check_server_fence`` and the pure ``server_fence_problem`` it decides with. The
server-side fence is a ValidatingAdmissionPolicy (config/fence, ``fence.SERVER_FENCE_POLICY``)
whose binding takes the leader-election Lease as its param: the API server refuses every write
of the manager's identity that does not come from the Lease's current holder. The manager cannot
install it (that takes cluster-admin rights it must not hold); it reads the two objects by name
at start and, when they are missing, unreadable or bound to another Lease, logs one WARNING
saying that only the client-side fence (``fence.py``) stands, and runs on. It never stops the
manager. Side effects: two GETs and at most one log line.
"""

from __future__ import annotations

from typing import Any

from nodewright.runtime.kube import errors
from nodewright.runtime.kube.client import Client
from nodewright.runtime.kube.fence import SERVER_FENCE_POLICY
from nodewright.runtime.kube.kinds import Kind
from nodewright.runtime.observe.logs import get_logger
from nodewright.runtime.process.rbac import PolicyRule

__all__ = [
    "SERVER_FENCE_RULES",
    "VALIDATING_ADMISSION_POLICY",
    "VALIDATING_ADMISSION_POLICY_BINDING",
    "check_server_fence",
    "server_fence_problem",
]

log = get_logger(__name__)

VALIDATING_ADMISSION_POLICY = Kind(
    "admissionregistration.k8s.io/v1",
    "ValidatingAdmissionPolicy",
    "validatingadmissionpolicies",
    namespaced=False,
)
VALIDATING_ADMISSION_POLICY_BINDING = Kind(
    "admissionregistration.k8s.io/v1",
    "ValidatingAdmissionPolicyBinding",
    "validatingadmissionpolicybindings",
    namespaced=False,
)

SERVER_FENCE_RULES: tuple[PolicyRule, ...] = (
    PolicyRule(
        "admissionregistration.k8s.io",
        ("validatingadmissionpolicies", "validatingadmissionpolicybindings"),
        ("get",),
        resource_names=(SERVER_FENCE_POLICY,),
    ),
)
"""What the start check reads: the two objects, by name. Not required at start (a manager
without them warns and runs), so ``required_rules`` leaves them out."""


def server_fence_problem(
    policy: dict[str, Any] | None, binding: dict[str, Any] | None, lease_namespace: str, lease_name: str
) -> str | None:
    """What keeps the installed objects from fencing writes on the Lease ``lease_namespace/
    lease_name``, or None when they do (pure)."""
    if policy is None:
        return f"ValidatingAdmissionPolicy {SERVER_FENCE_POLICY} is not installed"
    if binding is None:
        return f"ValidatingAdmissionPolicyBinding {SERVER_FENCE_POLICY} is not installed"
    spec = binding.get("spec") or {}
    if spec.get("policyName") != SERVER_FENCE_POLICY:
        return (
            f"ValidatingAdmissionPolicyBinding {SERVER_FENCE_POLICY} binds policy {spec.get('policyName')!r}"
        )
    if "Deny" not in (spec.get("validationActions") or []):
        return f"ValidatingAdmissionPolicyBinding {SERVER_FENCE_POLICY} does not deny (validationActions)"
    param = spec.get("paramRef") or {}
    if (param.get("namespace"), param.get("name")) != (lease_namespace, lease_name):
        bound = f"{param.get('namespace')}/{param.get('name')}"
        return f"ValidatingAdmissionPolicyBinding {SERVER_FENCE_POLICY} names Lease {bound}"
    return None


def _read(client: Client, kind: Kind) -> dict[str, Any] | None:
    try:
        return client.get(kind, SERVER_FENCE_POLICY)
    except errors.NotFound:
        return None


def check_server_fence(client: Client, lease_namespace: str, lease_name: str) -> str | None:
    """Read the policy and its binding; log one WARNING and return the problem when they do not
    fence writes on the Lease, else log one INFO line and return None. Never raises for an
    API failure (a forbidden read is reported as a problem)."""
    lease = f"{lease_namespace}/{lease_name}"
    try:
        problem = server_fence_problem(
            _read(client, VALIDATING_ADMISSION_POLICY),
            _read(client, VALIDATING_ADMISSION_POLICY_BINDING),
            lease_namespace,
            lease_name,
        )
    except errors.ApiError as error:
        problem = f"cannot read {SERVER_FENCE_POLICY}: {error}"
    if problem is None:
        log.info("Found server-side write fence", policy=SERVER_FENCE_POLICY, lease=lease)
        return None
    log.warning(
        "Found no server-side write fence",
        problem=problem,
        lease=lease,
        consequence="a deposed leader's late write can still be stored; install config/fence",
    )
    return problem
