"""``python -m bench.nodeimage [--full] [--kubeconfig PATH]``: a node image rollout at scale.

Rolls every node of three emulated scale sets to a new image with the node-image reconcilers
(full: 30 nodes, a machine joins 20 s after it starts; quick: 6 nodes, 2 s), once with maxSurge
1 and once with 3, one pod per node to drain. Reports the rollout time (NodeImage created until
every node runs the new image, every old machine is gone and no PendingNode is left) next to the
lower bound ``nodes / maxSurge x join time``, the most extra machines seen at once, and the ARM
calls by operation.

``run(full)`` returns the table as text. Starts a private control plane unless ``--kubeconfig``
is given. Side effects: threads, loopback network I/O, a temporary directory.
"""

from __future__ import annotations

import argparse
import contextlib
import tempfile
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from bench.cluster import cluster_kubeconfig
from nodewright.api.nodewright.v1alpha1 import RESOURCES
from nodewright.cloud.config import CloudSettings, CredentialKind, CredentialSettings
from nodewright.cloud.emulator import DEFAULT_SUBSCRIPTION, ArmEmulator
from nodewright.cloud.emulator.certificates import issue_loopback_certificates
from nodewright.cloud.factory import build_cloud
from nodewright.controllers.node_image import install
from nodewright.controllers.node_image.decisions import NODE_IMAGE_ANNOTATION
from nodewright.controllers.node_image.options import NodeImageSettings
from nodewright.controllers.node_image.resources import NODE_IMAGE, PENDING_NODE, SCALING_GROUP
from nodewright.devenv.crds import install_crds
from nodewright.devenv.nodesim import SIMULATED_LABEL, NodeSimulator, machines_in_emulator
from nodewright.runtime import errors
from nodewright.runtime.client import Client
from nodewright.runtime.config import parse_config
from nodewright.runtime.kinds import NODE, POD, Kind
from nodewright.runtime.manager import Manager

__all__ = ["Rollout", "Scale", "run"]

OLD_IMAGE = "/CommunityGalleries/nodewright-bench/images/node/versions/1.0.0"
NEW_IMAGE = "/CommunityGalleries/nodewright-bench/images/node/versions/2.0.0"
RESOURCE_GROUP = "rg-bench-nodeimage"
SCALE_SETS = 3
SURGES = (1, 3)


@dataclass(frozen=True)
class Scale:
    nodes: int
    join_seconds: float


QUICK = Scale(nodes=6, join_seconds=2.0)
FULL = Scale(nodes=30, join_seconds=20.0)


@dataclass
class Rollout:
    """One measured rollout."""

    max_surge: int
    seconds: float
    lower_bound: float
    most_extra_machines: int
    arm_calls: dict[str, int] = field(default_factory=dict)

    @property
    def total_calls(self) -> int:
        return sum(self.arm_calls.values())


class _Runner:
    def __init__(self, manager: Manager) -> None:
        self.manager = manager
        self.thread = threading.Thread(target=manager.run, daemon=True)
        self.thread.start()

    def stop(self) -> None:
        self.manager.stop()
        self.thread.join(30)


def _roll(client: Client, kubeconfig: str, emulator: ArmEmulator, scale: Scale, max_surge: int) -> Rollout:
    """Build three scale sets of old nodes, roll them, measure; cleans up its objects. The
    emulator must be fresh: the node simulator turns every machine in it into a Node."""
    suffix = uuid.uuid4().hex[:6]
    owner = f"bench-{suffix}"
    estate = emulator.estate
    subnet = estate.add_virtual_network(RESOURCE_GROUP, f"vnet{suffix}", subnets={"nodes": "10.0.0.0/16"})
    per_set = [
        scale.nodes // SCALE_SETS + (1 if i < scale.nodes % SCALE_SETS else 0) for i in range(SCALE_SETS)
    ]
    scale_sets = [
        estate.add_scale_set(
            RESOURCE_GROUP,
            f"s{i}{suffix}",
            subnet_id=subnet + "/subnets/nodes",
            capacity=count,
            image={"communityGalleryImageId": OLD_IMAGE},
            computer_name_prefix=f"s{i}{suffix}",
        )
        for i, count in enumerate(per_set)
    ]
    simulator = NodeSimulator(client, machines_in_emulator(emulator.state), owner=owner, interval=0.5)
    simulator.sync_once()
    simulator.join_delay = scale.join_seconds
    simulator.start()
    selector = f"{SIMULATED_LABEL}={owner}"
    namespace = f"bench-{suffix}"
    client.create(Kind("v1", "Namespace", "namespaces", False), {"metadata": {"name": namespace}})
    for node in client.list(NODE, label_selector=selector).items:
        name = node["metadata"]["name"]
        body = {
            "metadata": {"name": f"web-{name}", "namespace": namespace},
            "spec": {"nodeName": name, "containers": [{"name": "c", "image": "busybox"}]},
        }
        client.create(POD, body)

    settings = CloudSettings(
        subscription_id=DEFAULT_SUBSCRIPTION,
        arm_endpoint=emulator.endpoint,
        credential=CredentialSettings(kind=CredentialKind.STATIC_TOKEN, static_token="bench"),  # noqa: S106 - the emulator takes any token
        ca_bundle=str(emulator.ca_file),
        polling_interval=0.0,
    )
    cloud = build_cloud(settings)
    config = parse_config(
        {
            "metrics": {"bindAddress": "0"},
            "health": {"bindAddress": "0"},
            "leaderElection": {"enabled": False},
            "logging": {"level": "warning"},
        },
        "bench",
    )
    manager = Manager(config, kubeconfig=kubeconfig)
    install(manager, NodeImageSettings(node_label_selector=selector), cloud.compute)
    runner = _Runner(manager)
    node_image = f"bench-{suffix}"
    emulator.requests.clear()
    started = time.monotonic()
    most_extra = 0
    try:
        client.create(
            NODE_IMAGE,
            {"metadata": {"name": node_image}, "spec": {"image": NEW_IMAGE, "maxSurge": max_surge}},
        )
        for scale_set in scale_sets:
            spec = {"groupID": scale_set, "nodeImage": node_image}
            client.create(
                SCALING_GROUP, {"metadata": {"name": scale_set.rsplit("/", 1)[1].lower()}, "spec": spec}
            )
        while True:
            with emulator.state.locked():
                live = sum(
                    1
                    for scale_set in scale_sets
                    for instance in emulator.state.scale_sets[scale_set.lower()].instances.values()
                    if instance.provisioning_state != "Deleting"
                )
            most_extra = max(most_extra, live - scale.nodes)
            if _finished(client, selector, node_image, scale.nodes) and live == scale.nodes:
                break
            if time.monotonic() - started > 40 * scale.nodes * (scale.join_seconds + 5):
                raise RuntimeError("the rollout did not finish")
            time.sleep(0.2)
        seconds = time.monotonic() - started
        calls = dict(sorted(emulator.requests.counts_by_operation().items()))
    finally:
        runner.stop()
        simulator.stop()
        cloud.close()
        _clean(client, node_image, scale_sets, selector)
    return Rollout(max_surge, seconds, scale.nodes / max_surge * scale.join_seconds, most_extra, calls)


def _finished(client: Client, selector: str, node_image: str, count: int) -> bool:
    nodes = client.list(NODE, label_selector=selector).items
    if len(nodes) != count or any(
        (n["metadata"].get("annotations") or {}).get(NODE_IMAGE_ANNOTATION) != NEW_IMAGE for n in nodes
    ):
        return False
    status = client.get(NODE_IMAGE, node_image).get("status") or {}
    up_to_date = any(
        c["type"] == "UpToDate" and c["status"] == "True" for c in status.get("conditions") or []
    )
    return up_to_date and not status.get("pending")


def _clean(client: Client, node_image: str, scale_sets: list[str], selector: str) -> None:
    with contextlib.suppress(errors.NotFound):
        client.delete(NODE_IMAGE, node_image)
    for scale_set in scale_sets:
        with contextlib.suppress(errors.NotFound):
            client.delete(SCALING_GROUP, scale_set.rsplit("/", 1)[1].lower())
    for pending in client.list(PENDING_NODE).items:
        if any(pending["spec"]["groupID"].lower() == s.lower() for s in scale_sets):
            with contextlib.suppress(errors.NotFound):
                client.delete(PENDING_NODE, pending["metadata"]["name"])
    for node in client.list(NODE, label_selector=selector).items:
        with contextlib.suppress(errors.NotFound):
            client.delete(NODE, node["metadata"]["name"])


def _table(scale: Scale, rollouts: list[Rollout]) -> str:
    operations = sorted({operation for rollout in rollouts for operation in rollout.arm_calls})
    lines = [
        f"node image rollout: {scale.nodes} nodes over {SCALE_SETS} scale sets, "
        f"join time {scale.join_seconds:g} s, one pod per node to drain, production defaults otherwise",
        "",
        "| maxSurge | rollout (s) | lower bound (s) | ratio | most extra machines | ARM calls | per node |",
        "|---|---|---|---|---|---|---|",
    ]
    for rollout in rollouts:
        lines.append(
            f"| {rollout.max_surge} | {rollout.seconds:.1f} | {rollout.lower_bound:.1f} | "
            f"{rollout.seconds / rollout.lower_bound:.2f} | {rollout.most_extra_machines} | "
            f"{rollout.total_calls} | {rollout.total_calls / scale.nodes:.1f} |"
        )
    lines += ["", "| ARM operation | " + " | ".join(f"maxSurge {r.max_surge}" for r in rollouts) + " |"]
    lines.append("|---|" + "---|" * len(rollouts))
    for operation in operations:
        lines.append(
            f"| {operation} | " + " | ".join(str(r.arm_calls.get(operation, 0)) for r in rollouts) + " |"
        )
    lines.append("")
    lines.append(
        "lower bound = nodes / maxSurge x join time: a replacement cannot start before the previous "
        "machines of its budget have joined. ARM calls are every request the emulator answered "
        "(long-running operation polls included)."
    )
    return "\n".join(lines)


def run(full: bool, kubeconfig: str | None = None) -> str:
    """Run the benchmark; returns the table."""
    scale = FULL if full else QUICK
    rollouts: list[Rollout] = []
    certificates = issue_loopback_certificates()
    with cluster_kubeconfig(kubeconfig) as config:
        client = Client.from_kubeconfig(config)
        install_crds(client, RESOURCES)
        for max_surge in SURGES:
            with (
                tempfile.TemporaryDirectory(prefix="bench-nodeimage-") as directory,
                ArmEmulator(state_dir=Path(directory), certificates=certificates) as emulator,
            ):
                emulator.estate.add_resource_group(RESOURCE_GROUP)
                rollouts.append(_roll(client, config, emulator, scale, max_surge))
    return _table(scale, rollouts)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.nodeimage", description=__doc__)
    parser.add_argument("--full", action="store_true", help="30 nodes, 20 s joins (default: 6 nodes, 2 s)")
    parser.add_argument("--kubeconfig", help="use this cluster instead of a private control plane")
    arguments = parser.parse_args(argv)
    print(run(arguments.full, arguments.kubeconfig))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
