"""kwok, the Kubernetes project's kubelet stand-in, as the local cluster runs it: its Stage
documents, the RBAC its user needs and its command line.

kwok manages every Node labelled ``nodewright.io/simulated`` (the node simulator's label) and the
pods bound to them. What it does is exactly what the Stages below say:

Nodes
- ``node-ready``: a Node that is not Ready and whose machine is not stopped (annotation
  ``nodewright.io/power-state`` is not ``stopped``) gets the status a healthy kubelet reports:
  the usual conditions (Ready True, no pressure), capacity, nodeInfo, phase Running.
- ``node-stopped``: a Ready Node whose machine the simulator reports stopped turns NotReady,
  as a kubelet does on shutdown. It becomes Ready again through ``node-ready`` when the machine
  runs again.
- ``node-heartbeat``: every five minutes a Ready Node's conditions get a fresh heartbeat time
  (the kubelet's status report interval); liveness itself comes from the node Lease, which kwok
  renews every ``LEASE_SECONDS / 4`` seconds, as a kubelet does.

Pods (on managed nodes only)
- ``pod-ready``: a pending pod becomes Running and Ready at once. kwok gives it no address:
  addresses are the network's business (Azure CNS hands them out of the node's
  NodeNetworkConfig pool), so a host-network pod gets its node's address and any other pod
  none until the CNS stand-in writes one.
- ``pod-ready-with-address``: a pod labelled ``nodewright.io/pod-ip-source`` stays Pending until
  its ``status.podIP`` is set, as the CNI sets it from CNS before a container starts; then it
  becomes Running and Ready with that address untouched. This is how a pod carries an address
  from its node's pool: the simulated CNS (the NodeNetworkConfig consumer, e.g. the tests'
  ``PodAddressAgent``) patches ``status.podIP``/``podIPs`` from the pool, kwok does the rest.
- ``pod-delete``: a pod being deleted is removed at once (the kubelet's confirmation).

Pure data and argument building; writes nothing itself.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

__all__ = [
    "KWOK_USER",
    "LEASE_SECONDS",
    "MANAGED_NODE_LABEL",
    "POD_IP_SOURCE_LABEL",
    "POWER_STATE_ANNOTATION",
    "STAGES",
    "kwok_arguments",
    "kwok_rbac",
]

MANAGED_NODE_LABEL = "nodewright.io/simulated"
"""kwok plays kubelet for every Node with this label (set by the node simulator)."""
POWER_STATE_ANNOTATION = "nodewright.io/power-state"
"""On a simulated Node: ``running`` or ``stopped``, the machine's power state (cloud side)."""
POD_IP_SOURCE_LABEL = "nodewright.io/pod-ip-source"
"""On a pod: it runs only once the simulated CNS has written its address (any value, e.g.
``node-pool``)."""
KWOK_USER = "nodewright:kwok"
LEASE_SECONDS = 40
NODE_ADDRESS = "10.240.255.254"
"""The address kwok reports for a node that has none of its own (host-network pods get it)."""

_POWER = f'.metadata.annotations["{POWER_STATE_ANNOTATION}"]'
_READY = '.status.conditions.[] | select( .type == "Ready" ) | .status'

_NODE_READY_STATUS = """\
{{ $now := Now }}
{{ $info := .status.nodeInfo }}
conditions:
{{ range NodeConditions }}
- lastHeartbeatTime: {{ $now | Quote }}
  lastTransitionTime: {{ $now | Quote }}
  message: {{ .message | Quote }}
  reason: {{ .reason | Quote }}
  status: {{ .status | Quote }}
  type: {{ .type | Quote }}
{{ end }}
allocatable:
{{ with .status.allocatable }}{{ YAML . 1 }}{{ else }}  cpu: "64"
  memory: 256Gi
  pods: "250"
{{ end }}
capacity:
{{ with .status.capacity }}{{ YAML . 1 }}{{ else }}  cpu: "64"
  memory: 256Gi
  pods: "250"
{{ end }}
nodeInfo:
  architecture: {{ or $info.architecture "amd64" }}
  bootID: ""
  containerRuntimeVersion: "kwok"
  kernelVersion: "kwok"
  kubeProxyVersion: ""
  kubeletVersion: {{ or $info.kubeletVersion "v1.34.4" }}
  machineID: ""
  operatingSystem: {{ or $info.operatingSystem "linux" }}
  osImage: ""
  systemUUID: ""
phase: Running
"""

_NODE_STOPPED_STATUS = """\
{{ $now := Now }}
conditions:
- lastHeartbeatTime: {{ $now | Quote }}
  lastTransitionTime: {{ $now | Quote }}
  message: "the machine is stopped"
  reason: KubeletNotReady
  status: "False"
  type: Ready
"""

_NODE_HEARTBEAT_STATUS = """\
{{ $now := Now }}
conditions:
{{ range .status.conditions }}
- lastHeartbeatTime: {{ $now | Quote }}
  lastTransitionTime: {{ .lastTransitionTime | Quote }}
  message: {{ .message | Quote }}
  reason: {{ .reason | Quote }}
  status: {{ .status | Quote }}
  type: {{ .type | Quote }}
{{ end }}
"""


def _pod_running_status(addresses: str) -> str:
    """A Running, Ready pod status whose addresses come from the template ``addresses``."""
    return (
        """\
{{ $now := Now }}
conditions:
- {type: PodReadyToStartContainers, status: "True", lastTransitionTime: {{ $now | Quote }}}
- {type: Initialized, status: "True", lastTransitionTime: {{ $now | Quote }}}
- {type: ContainersReady, status: "True", lastTransitionTime: {{ $now | Quote }}}
- {type: Ready, status: "True", lastTransitionTime: {{ $now | Quote }}}
containerStatuses:
{{ range .spec.containers }}
- image: {{ .image | Quote }}
  name: {{ .name | Quote }}
  ready: true
  started: true
  restartCount: 0
  state:
    running:
      startedAt: {{ $now | Quote }}
{{ end }}
{{ with NodeIPsWith .spec.nodeName }}
hostIP: {{ index . 0 | Quote }}
hostIPs:
{{ range . }}
- ip: {{ . | Quote }}
{{ end }}
{{ end }}
"""
        + addresses
        + """
phase: Running
startTime: {{ $now | Quote }}
"""
    )


_HOST_NETWORK_ADDRESSES = """\
{{ if .spec.hostNetwork }}{{ with NodeIPsWith .spec.nodeName }}
podIP: {{ index . 0 | Quote }}
podIPs:
{{ range . }}
- ip: {{ . | Quote }}
{{ end }}
{{ end }}{{ end }}"""


def _stage(
    name: str, kind: str, selector: list[dict[str, Any]], next_step: dict[str, Any], delay_seconds: int = 0
) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "resourceRef": {"apiGroup": "v1", "kind": kind},
        "selector": {"matchExpressions": selector},
        "next": next_step,
    }
    if delay_seconds:
        # A random delay between the two, as kubelets' reports are spread over time.
        spec["delay"] = {
            "durationMilliseconds": delay_seconds * 1000,
            "jitterDurationMilliseconds": delay_seconds * 1100,
        }
    return {"apiVersion": "kwok.x-k8s.io/v1alpha1", "kind": "Stage", "metadata": {"name": name}, "spec": spec}


def _expression(key: str, operator: str, *values: str) -> dict[str, Any]:
    expression: dict[str, Any] = {"key": key, "operator": operator}
    if values:
        expression["values"] = list(values)
    return expression


_PENDING_POD = [
    _expression(".metadata.deletionTimestamp", "DoesNotExist"),
    _expression(".status.phase", "In", "Pending"),
    _expression(_READY, "NotIn", "True"),
]
_POOL_LABEL = f'.metadata.labels["{POD_IP_SOURCE_LABEL}"]'

STAGES: list[dict[str, Any]] = [
    _stage(
        "node-ready",
        "Node",
        [_expression(_READY, "NotIn", "True"), _expression(_POWER, "NotIn", "stopped")],
        {"statusTemplate": _NODE_READY_STATUS},
    ),
    _stage(
        "node-stopped",
        "Node",
        [_expression(_READY, "In", "True"), _expression(_POWER, "In", "stopped")],
        {"statusTemplate": _NODE_STOPPED_STATUS},
    ),
    _stage(
        "node-heartbeat",
        "Node",
        [_expression(_READY, "In", "True"), _expression(_POWER, "NotIn", "stopped")],
        {"statusTemplate": _NODE_HEARTBEAT_STATUS},
        delay_seconds=300,
    ),
    _stage(
        "pod-ready",
        "Pod",
        [*_PENDING_POD, _expression(_POOL_LABEL, "DoesNotExist")],
        {"statusTemplate": _pod_running_status(_HOST_NETWORK_ADDRESSES)},
    ),
    _stage(
        "pod-ready-with-address",
        "Pod",
        [*_PENDING_POD, _expression(_POOL_LABEL, "Exists"), _expression(".status.podIP", "Exists")],
        {"statusTemplate": _pod_running_status("")},
    ),
    _stage(
        "pod-delete",
        "Pod",
        [_expression(".metadata.deletionTimestamp", "Exists")],
        {"delete": True},
    ),
]
"""kwok's Stage documents (see the module docstring for what each does)."""


def kwok_rbac() -> list[dict[str, Any]]:
    """The ClusterRole, Role (node Leases) and bindings for ``KWOK_USER``: what a kubelet does
    to nodes, pods and leases, and nothing else."""
    subject = [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": KWOK_USER}]
    rules = [
        {"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "list", "watch"]},
        {"apiGroups": [""], "resources": ["nodes/status", "pods/status"], "verbs": ["patch", "update"]},
        {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch", "delete"]},
        {"apiGroups": ["", "events.k8s.io"], "resources": ["events"], "verbs": ["create", "patch", "update"]},
    ]
    lease_rules = [
        {
            "apiGroups": ["coordination.k8s.io"],
            "resources": ["leases"],
            "verbs": ["get", "list", "watch", "create", "update", "patch"],
        }
    ]
    role_ref = {"apiGroup": "rbac.authorization.k8s.io", "name": "nodewright:kwok"}
    return [
        {"kind": "ClusterRole", "metadata": {"name": "nodewright:kwok"}, "rules": rules},
        {
            "kind": "ClusterRoleBinding",
            "metadata": {"name": "nodewright:kwok"},
            "roleRef": {**role_ref, "kind": "ClusterRole"},
            "subjects": subject,
        },
        {
            "kind": "Role",
            "metadata": {"name": "nodewright:kwok", "namespace": "kube-node-lease"},
            "rules": lease_rules,
        },
        {
            "kind": "RoleBinding",
            "metadata": {"name": "nodewright:kwok", "namespace": "kube-node-lease"},
            "roleRef": {**role_ref, "kind": "Role"},
            "subjects": subject,
        },
    ]


def kwok_arguments(
    binary: Path, *, kubeconfig: Path, stages: Path, port: int, cert: Path, key: Path
) -> list[str]:
    """kwok's command line: manage the simulated nodes, serve ``/healthz`` over TLS on ``port``."""
    return [
        str(binary),
        f"--kubeconfig={kubeconfig}",
        f"--config={stages}",
        f"--manage-nodes-with-label-selector={MANAGED_NODE_LABEL}",
        f"--node-lease-duration-seconds={LEASE_SECONDS}",
        f"--node-ip={NODE_ADDRESS}",
        f"--server-address=127.0.0.1:{port}",
        f"--tls-cert-file={cert}",
        f"--tls-private-key-file={key}",
    ]
