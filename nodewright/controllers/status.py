"""``nodewright status``: what the reconcilers have done, for a human, from the CRs' status.

Owns ``read_view`` (read: lists NodeImages, Nodes, NodeNetworkConfigs and AzureAssignedIdentities
through the API), ``render`` (pure: a ``StatusView`` to text) and ``main_status`` (the
subcommand, once or every ``--interval`` seconds with ``--watch``). Per NodeImage: a progress
bar of nodes on the desired image, the nodes being replaced (donors and heirs), joining or
leaving (pending), the budget of new nodes, and the conditions that are not True. Per node pool
(the ``kubernetes.azure.com/agentpool`` label of the NodeNetworkConfig's node): IP addresses
allocated on the NICs, requested by the nodes, not in use (pending release) and the pools still
filling. Identity assignments: how many are Assigned, and each one that is not, with the node.
A kind whose CRD is not installed, or that this user may not list, shows why instead. Side
effects: GETs to the API server only. The figures come from ``node_image_line``, ``pool_lines``
and ``assignment_state`` (pure, over the CRs' status), which ``status_metrics`` also uses for the
manager's gauges, so the dashboard and this view show the same numbers (docs/observability.md).
"""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import dataclass, field
from typing import Any

from nodewright.runtime import NODE, Client, Kind, condition_is_true, errors

__all__ = [
    "NodeImageLine",
    "PoolLine",
    "StatusView",
    "assignment_state",
    "main_status",
    "node_image_line",
    "pool_lines",
    "read_view",
    "render",
]

NODE_IMAGE = Kind("nodewright.io/v1alpha1", "NodeImage", "nodeimages", namespaced=False)
NODE_NETWORK_CONFIG = Kind("acn.azure.com/v1alpha", "NodeNetworkConfig", "nodenetworkconfigs")
AZURE_ASSIGNED_IDENTITY = Kind("aadpodidentity.k8s.io/v1", "AzureAssignedIdentity", "azureassignedidentities")
POOL_LABEL = "kubernetes.azure.com/agentpool"
BAR_WIDTH = 20
Object = dict[str, Any]


@dataclass(frozen=True, slots=True)
class NodeImageLine:
    name: str
    image: str
    up_to_date: int
    total: int
    replacing: int
    pending: int
    budget: int
    problems: tuple[str, ...]
    stage: str = ""
    """Where the rollout stands: its state, the canary, a batch under way, a soak's end."""


@dataclass(slots=True)
class PoolLine:
    pool: str
    nodes: int = 0
    allocated: int = 0
    requested: int = 0
    not_in_use: int = 0
    filling: int = 0


@dataclass(slots=True)
class StatusView:
    """Everything ``render`` shows; ``unavailable`` names sections that could not be read."""

    nodes: int = 0
    nodes_ready: int = 0
    node_images: list[NodeImageLine] = field(default_factory=list)
    pools: list[PoolLine] = field(default_factory=list)
    assigned: int = 0
    identities: int = 0
    identity_failures: list[str] = field(default_factory=list)
    unavailable: dict[str, str] = field(default_factory=dict)


def node_image_line(image: Object) -> NodeImageLine:
    """A NodeImage's figures from its status (pure)."""
    status = image.get("status") or {}
    problems = tuple(
        f"{c.get('type')}={c.get('status')}: {c.get('message') or c.get('reason') or ''}".rstrip(": ")
        for c in status.get("conditions") or []
        if c.get("status") != "True"
    )
    return NodeImageLine(
        name=image["metadata"]["name"],
        image=str((image.get("spec") or {}).get("image", "")).rsplit("/", 1)[-1],
        up_to_date=int(status.get("upToDateNodes", 0)),
        total=int(status.get("totalNodes", 0)),
        replacing=len(status.get("donors") or []),
        pending=len(status.get("pending") or []),
        budget=int(status.get("budget", 0)),
        problems=problems,
        stage=_stage(status),
    )


def _stage(status: Object) -> str:
    """The rollout's stage in a few words (pure): state, canary, batch and soak."""
    parts = [str(status.get("rolloutState") or "")]
    if status.get("rolloutState") and status.get("rolloutState") != "Complete":
        parts.append("canary passed" if status.get("canaryPassed") else "canary")
        if status.get("batchInFlight"):
            parts.append("batch under way")
        if status.get("soakUntil"):
            parts.append(f"soaking until {status['soakUntil']}")
    return ", ".join(part for part in parts if part)


def pool_lines(configs: list[Object], nodes: list[Object]) -> list[PoolLine]:
    """Per node pool, the NodeNetworkConfigs' figures from their spec and status (pure)."""
    pool_of = {n["metadata"]["name"]: (n["metadata"].get("labels") or {}).get(POOL_LABEL, "-") for n in nodes}
    pools: dict[str, PoolLine] = {}
    for config in configs:
        line = pools.setdefault(pool_of.get(config["metadata"]["name"], "-"), PoolLine(pool=""))
        spec, status = config.get("spec") or {}, config.get("status") or {}
        allocated = sum(len(c.get("ipAssignments") or []) for c in status.get("networkContainers") or [])
        requested = int(spec.get("requestedIPCount", 0))
        line.nodes += 1
        line.allocated += allocated
        line.requested += requested
        line.not_in_use += len(spec.get("ipsNotInUse") or [])
        line.filling += allocated < requested
    for name, line in pools.items():
        line.pool = name
    return [pools[name] for name in sorted(pools)]


def _ready(node: Object) -> bool:
    return condition_is_true(node)


def assignment_state(item: Object) -> str:
    """An AzureAssignedIdentity's ``status.status`` (Created until written otherwise). Pure."""
    return str((item.get("status") or {}).get("status", "Created"))


def _identity_failure(item: Object) -> str | None:
    status = assignment_state(item)
    if status == "Assigned":
        return None
    spec = item.get("spec") or {}
    node = spec.get("nodename") or "?"
    identity = ((spec.get("azureIdentityRef") or {}).get("metadata") or {}).get("name", "?")
    where = f"{item['metadata'].get('namespace')}/{item['metadata']['name']}"
    return f"{where}: {status} (identity {identity}, node {node})"


def _list(
    client: Client, kind: Kind, view: StatusView, section: str, namespace: str | None = None
) -> list[Object]:
    try:
        return list(client.list(kind, namespace).items)
    except errors.ApiError as error:
        view.unavailable[section] = str(error.reason or error.code or error)
        return []


def read_view(client: Client, namespace: str = "kube-system") -> StatusView:
    """Read every section's objects (side effect: list requests) into a ``StatusView``."""
    view = StatusView()
    view.node_images = [node_image_line(i) for i in _list(client, NODE_IMAGE, view, "node images")]
    nodes = _list(client, NODE, view, "nodes")
    view.nodes = len(nodes)
    view.nodes_ready = sum(map(_ready, nodes))
    view.pools = pool_lines(_list(client, NODE_NETWORK_CONFIG, view, "ip pools", namespace), nodes)
    identities = _list(client, AZURE_ASSIGNED_IDENTITY, view, "identities")
    view.identities = len(identities)
    view.identity_failures = [f for f in map(_identity_failure, identities) if f]
    view.assigned = view.identities - len(view.identity_failures)
    return view


def _bar(done: int, total: int) -> str:
    filled = BAR_WIDTH * done // total if total else 0
    return "[" + "#" * filled + "-" * (BAR_WIDTH - filled) + "]"


def render(view: StatusView) -> str:
    """The text ``nodewright status`` prints (pure)."""
    lines = [f"NODES  {view.nodes_ready}/{view.nodes} ready", "NODE IMAGES"]
    for image in view.node_images:
        lines.append(
            f"  {image.name:<24} {_bar(image.up_to_date, image.total)} {image.up_to_date}/{image.total} "
            f"on {image.image}  replacing {image.replacing}  pending {image.pending}  budget {image.budget}"
            + (f"  [{image.stage}]" if image.stage else "")
        )
        lines.extend(f"    ! {problem}" for problem in image.problems)
    lines.append("  (none)" if not view.node_images and "node images" not in view.unavailable else "")
    lines.append("IP POOLS (per node pool)")
    for pool in view.pools:
        lines.append(
            f"  {pool.pool:<24} {_bar(min(pool.allocated, pool.requested), pool.requested)} "
            f"allocated {pool.allocated}/{pool.requested} requested  pending release {pool.not_in_use}  "
            f"nodes {pool.nodes} ({pool.filling} filling)"
        )
    lines.append("  (none)" if not view.pools and "ip pools" not in view.unavailable else "")
    lines.append(f"IDENTITY ASSIGNMENTS  {view.assigned}/{view.identities} assigned")
    lines.extend(f"  ! {failure}" for failure in view.identity_failures)
    lines.extend(f"({section}: {reason})" for section, reason in sorted(view.unavailable.items()))
    return "\n".join(line for line in lines if line) + "\n"


def summary(view: StatusView) -> str:
    """One line for ``make run``'s progress: rollouts, pools, identities."""
    images = ", ".join(f"image {i.name} {i.up_to_date}/{i.total}" for i in view.node_images) or "no NodeImage"
    filled = sum(p.nodes - p.filling for p in view.pools)
    nodes = sum(p.nodes for p in view.pools)
    addresses = sum(p.allocated for p in view.pools)
    return (
        f"nodes {view.nodes_ready}/{view.nodes} ready | "
        f"identities {view.assigned}/{view.identities} assigned | "
        f"ip pools {filled}/{nodes} filled ({addresses} NIC IPs) | {images}"
    )


def main_status(arguments: argparse.Namespace) -> int:
    """``nodewright status [--watch] [--interval S] [--kubeconfig PATH]``."""
    client = (
        Client.from_kubeconfig(arguments.kubeconfig) if arguments.kubeconfig else Client.from_environment()
    )
    try:
        while True:
            text = render(read_view(client, arguments.namespace))
            if arguments.watch:
                sys.stdout.write("\x1b[H\x1b[2J" + time.strftime("%H:%M:%S ") + "nodewright status\n")
            sys.stdout.write(text)
            sys.stdout.flush()
            if not arguments.watch:
                return 0
            time.sleep(arguments.interval)
    except KeyboardInterrupt:
        return 0
