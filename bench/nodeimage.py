"""``python -m bench.nodeimage [--full] [--nodes N] [--join-seconds S] [--other-nodes M] [--case LABEL]
[--kubeconfig PATH]``: a node image rollout at scale.

Rolls every node of three emulated scale sets to a new image with the node-image reconcilers
(full: 30 nodes, a machine joins 20 s after it starts; quick: 6 nodes, 2 s), one pod per node to
drain: with maxSurge 1 and 3, with maxSurge 3 and a soak after each batch (full 10 s, quick 2 s),
and with a bad image whose machines stop as their Node registers, caught at the canary and
rolled back (heirReadyTimeout full 30 s, quick 5 s). Reports the time (NodeImage created until
every node runs the final image, the rollout is Complete or RolledBack, the extra machines are
gone and no PendingNode is left) next to its lower bound, the most extra machines and the most
machines on the new image seen at once, and the ARM calls by operation; then the controller's own
cost: its passes, their CPU time (``nodewright_rollout_pass_cpu_seconds``), the pod LISTs and Node
GETs the API server answered during the rollout (``apiserver_request_total``, every client), and
the bench process's RSS (manager, emulator and simulator share it). ``--other-nodes`` adds Nodes
of a scale set no NodeImage claims, in the manager's view, relabelled 20 times a second while the
rollout runs (a cluster around the pool: its changes must not cost the rollout anything).

``run(full)`` returns the table as text. Starts a private control plane unless ``--kubeconfig``
is given. Side effects: threads, loopback network I/O, a temporary directory.
"""

from __future__ import annotations

import argparse
import contextlib
import math
import os
import tempfile
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from bench.cluster import cluster_kubeconfig
from bench.pass_metrics import pass_counts
from bench.pass_profile import profiled_passes
from bench.processes import status_bytes
from bench.rollout_timeline import RolloutTimeline
from nodewright.api.aadpodidentity.v1 import RESOURCES as IDENTITY_RESOURCES
from nodewright.api.acn.v1alpha import RESOURCES as NETWORK_RESOURCES
from nodewright.api.nodewright.v1alpha1 import RESOURCES
from nodewright.cloud.config import CloudSettings, CredentialKind, CredentialSettings
from nodewright.cloud.emulator import DEFAULT_SUBSCRIPTION, ArmEmulator
from nodewright.cloud.emulator.certificates import issue_loopback_certificates
from nodewright.cloud.factory import Cloud, build_cloud
from nodewright.controllers.node_image import install
from nodewright.controllers.node_image.grouping import NODE_IMAGE_ANNOTATION
from nodewright.controllers.node_image.options import NodeImageSettings
from nodewright.controllers.node_image.resources import NODE_IMAGE, PENDING_NODE, SCALING_GROUP
from nodewright.devenv.crds import install_crds
from nodewright.devenv.nodesim import SIMULATED_LABEL, NodeSimulator, machines_in_emulator
from nodewright.runtime import errors
from nodewright.runtime.kube.client import Client
from nodewright.runtime.kube.kinds import NODE, POD, Kind
from nodewright.runtime.process.config import parse_config
from nodewright.runtime.process.manager import Manager

__all__ = ["Case", "Rollout", "Scale", "cases", "run"]

OLD_IMAGE = "/CommunityGalleries/nodewright-bench/images/node/versions/1.0.0"
NEW_IMAGE = "/CommunityGalleries/nodewright-bench/images/node/versions/2.0.0"
RESOURCE_GROUP = "rg-bench-nodeimage"
SCALE_SETS = 3
SURGES = (1, 3)


@dataclass(frozen=True)
class Scale:
    nodes: int
    join_seconds: float
    other_nodes: int = 0


QUICK = Scale(nodes=6, join_seconds=2.0)
FULL = Scale(nodes=30, join_seconds=20.0)


@dataclass
class Rollout:
    """One measured rollout. ``label`` names the row; ``most_on_new`` is the most live machines on
    the new image at once (the canary bound, for the rollback row)."""

    label: str
    max_surge: int
    seconds: float
    lower_bound: float
    most_extra_machines: int
    arm_calls: dict[str, int] = field(default_factory=dict)
    most_on_new: int = 0
    cost: ControllerCost | None = None
    timeline: list[str] = field(default_factory=list)
    """The per-replacement breakdown (``rollout_timeline``), as markdown lines."""

    @property
    def total_calls(self) -> int:
        return sum(self.arm_calls.values())


@dataclass(frozen=True)
class ControllerCost:
    """What the rollout cost the controller itself (see the module docstring)."""

    passes: int
    pass_cpu_mean_ms: float
    pass_cpu_p99_ms: float
    """The upper bound of the histogram bucket holding the 99th percentile."""
    pod_lists: int
    node_gets: int
    manager_pod_lists: int
    manager_node_gets: int
    rss_start_mib: float
    rss_peak_mib: float


def _manager_counts(manager: Manager) -> tuple[int, float, float]:
    """The nodeimage controller's passes, and its passes' CPU mean and p99 bound (ms)."""
    counts = pass_counts(manager.metrics.render().decode())
    return int(counts.passes), counts.mean_ms, counts.p99_ms


def _api_counts(client: Client) -> tuple[int, int]:
    """Pod LISTs and Node GETs the API server has answered so far (every client's)."""
    lists = gets = 0.0
    for family in text_string_to_metric_families(client.request("GET", "/metrics").text):
        for sample in family.samples:
            if sample.name != "apiserver_request_total":
                continue
            verb, resource = sample.labels.get("verb"), sample.labels.get("resource")
            if verb == "LIST" and resource == "pods":
                lists += sample.value
            elif verb == "GET" and resource == "nodes" and not sample.labels.get("subresource"):
                gets += sample.value
    return int(lists), int(gets)


class _ClientCounts:
    """The pod LISTs and Node GETs the manager's reconcilers send through its client (a spy: each
    call still goes to the API server; the informers list through ``list_pages``)."""

    def __init__(self, manager: Manager) -> None:
        self.pod_lists = self.node_gets = 0
        client = manager.client
        real_list, real_get = client.list, client.get

        def counted_list(kind: Kind, *args: Any, **kwargs: Any) -> Any:
            self.pod_lists += kind == POD
            return real_list(kind, *args, **kwargs)

        def counted_get(kind: Kind, *args: Any, **kwargs: Any) -> Any:
            self.node_gets += kind == NODE
            return real_get(kind, *args, **kwargs)

        setattr(client, "list", counted_list)  # noqa: B010 - instance attributes over the methods
        setattr(client, "get", counted_get)  # noqa: B010


def _rss_mib() -> float:
    return status_bytes(os.getpid(), "VmRSS") / 2**20


class _OtherNodes:
    """Nodes of a scale set no NodeImage claims, in the manager's view (kwok makes them Ready and
    heartbeats them), relabelled ``CHURN_PER_SECOND`` times a second by ``churn`` until stopped."""

    CHURN_PER_SECOND = 20

    def __init__(self, client: Client, owner: str, count: int) -> None:
        self.client = client
        self.names = [f"{owner}-other-{index}" for index in range(count)]
        scale_set = (
            f"/subscriptions/{DEFAULT_SUBSCRIPTION}/resourceGroups/{RESOURCE_GROUP}"
            f"/providers/Microsoft.Compute/virtualMachineScaleSets/{owner}-other"
        )
        for index, name in enumerate(self.names):
            metadata = {"name": name, "labels": {SIMULATED_LABEL: f"{owner}-other"}}
            spec = {"providerID": f"azure://{scale_set}/virtualMachines/{index}"}
            client.create(NODE, {"metadata": metadata, "spec": spec})
        self.stopped = threading.Event()
        self.thread = threading.Thread(target=self.churn, daemon=True, name="other-nodes")

    def churn(self) -> None:
        tick = 0
        while not self.stopped.wait(1 / self.CHURN_PER_SECOND) and self.names:
            name = self.names[tick % len(self.names)]
            with contextlib.suppress(errors.NotFound):
                self.client.patch(NODE, name, {"metadata": {"labels": {"bench/tick": str(tick)}}})
            tick += 1

    def close(self) -> None:
        self.stopped.set()
        if self.thread.is_alive():
            self.thread.join(5)
        for name in self.names:
            with contextlib.suppress(errors.NotFound):
                self.client.delete(NODE, name)


@dataclass(frozen=True)
class Case:
    """What one row rolls: the NodeImage spec beyond image and maxSurge, whether the new image is
    bad (its machines stop as their Node registers), the image every node must end on, and the
    lower bound for the row."""

    label: str
    max_surge: int
    spec: dict[str, object] = field(default_factory=dict)
    bad_image: bool = False
    soak_seconds: float = 0.0
    heir_ready_seconds: float = 0.0

    @property
    def final_image(self) -> str:
        return OLD_IMAGE if self.bad_image else NEW_IMAGE

    def lower_bound(self, scale: Scale) -> float:
        """Good image: batches of maxSurge joins, each followed by its soak (pipelined without a
        soak: nodes / maxSurge joins). Bad image: the canary's join, then heirReadyTimeout."""
        if self.bad_image:
            return scale.join_seconds + self.heir_ready_seconds
        if self.soak_seconds:
            batches = math.ceil(scale.nodes / self.max_surge)
            return batches * (scale.join_seconds + self.soak_seconds)
        return scale.nodes / self.max_surge * scale.join_seconds


class _Runner:
    def __init__(self, manager: Manager) -> None:
        self.manager = manager
        self.thread = threading.Thread(target=manager.run, daemon=True)
        self.thread.start()

    def stop(self) -> None:
        self.manager.stop()
        self.thread.join(30)


class _Estate:
    """Three scale sets of old nodes with one pod each, a node simulator, a namespace."""

    def __init__(self, client: Client, emulator: ArmEmulator, scale: Scale) -> None:
        self.suffix = uuid.uuid4().hex[:6]
        self.owner = f"bench-{self.suffix}"
        self.selector = f"{SIMULATED_LABEL}={self.owner}"
        self.manager_selector = f"{SIMULATED_LABEL} in ({self.owner},{self.owner}-other)"
        """What the manager watches: the pools' Nodes and the other Nodes around them."""
        self.others = _OtherNodes(client, self.owner, scale.other_nodes)
        estate = emulator.estate
        subnet = estate.add_virtual_network(
            RESOURCE_GROUP, f"vnet{self.suffix}", subnets={"nodes": "10.0.0.0/16"}
        )
        per_set = [
            scale.nodes // SCALE_SETS + (1 if i < scale.nodes % SCALE_SETS else 0) for i in range(SCALE_SETS)
        ]
        self.scale_sets = [
            estate.add_scale_set(
                RESOURCE_GROUP,
                f"s{i}{self.suffix}",
                subnet_id=subnet + "/subnets/nodes",
                capacity=count,
                image={"communityGalleryImageId": OLD_IMAGE},
                computer_name_prefix=f"s{i}{self.suffix}",
            )
            for i, count in enumerate(per_set)
        ]
        self.simulator = NodeSimulator(
            client, machines_in_emulator(emulator.state), owner=self.owner, interval=0.5
        )
        self.simulator.sync_once()
        self.simulator.join_delay = scale.join_seconds
        self.simulator.start()
        namespace = f"bench-{self.suffix}"
        client.create(Kind("v1", "Namespace", "namespaces", False), {"metadata": {"name": namespace}})
        for node in client.list(NODE, label_selector=self.selector).items:
            name = node["metadata"]["name"]
            body = {
                "metadata": {"name": f"web-{name}", "namespace": namespace},
                "spec": {"nodeName": name, "containers": [{"name": "c", "image": "busybox"}]},
            }
            client.create(POD, body)

    def census(self, emulator: ArmEmulator) -> tuple[int, int]:
        """Live machines, and how many of them run the new image."""
        with emulator.state.locked():
            instances = [
                instance
                for scale_set in self.scale_sets
                for instance in emulator.state.scale_sets[scale_set.lower()].instances.values()
                if instance.provisioning_state != "Deleting"
            ]
            on_new = sum(1 for i in instances if _image_of(i.document) == NEW_IMAGE)
        return len(instances), on_new

    def stop_bad_machines(self, client: Client, emulator: ArmEmulator) -> None:
        """Play the bad image: every new-image machine whose Node registered is stopped."""
        nodes = {n["metadata"]["name"]: n for n in client.list(NODE, label_selector=self.selector).items}
        with emulator.state.locked():
            bad = [
                instance.document["id"]
                for scale_set in self.scale_sets
                for instance in emulator.state.scale_sets[scale_set.lower()].instances.values()
                if _image_of(instance.document) == NEW_IMAGE
                and instance.power_state == "running"
                and instance.document["properties"]["osProfile"]["computerName"].lower() in nodes
            ]
        for machine in bad:
            emulator.state.set_power_state(machine, "stopped")


def _image_of(document: dict[str, object]) -> object:
    properties = document.get("properties") or {}
    assert isinstance(properties, dict)
    storage = properties.get("storageProfile") or {}
    assert isinstance(storage, dict)
    reference = storage.get("imageReference") or {}
    assert isinstance(reference, dict)
    return reference.get("communityGalleryImageId")


def _manager(kubeconfig: str, emulator: ArmEmulator, selector: str) -> tuple[_Runner, Cloud, _ClientCounts]:
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
    install(manager, NodeImageSettings(node_label_selector=selector), cloud.compute, cloud.standalone)
    counts = _ClientCounts(manager)
    return _Runner(manager), cloud, counts


def _roll(client: Client, kubeconfig: str, emulator: ArmEmulator, scale: Scale, case: Case) -> Rollout:
    """Build three scale sets of old nodes, roll them, measure; cleans up its objects. The
    emulator must be fresh: the node simulator turns every machine in it into a Node."""
    estate = _Estate(client, emulator, scale)
    runner, cloud, counts = _manager(kubeconfig, emulator, estate.manager_selector)
    node_image = f"bench-{estate.suffix}"
    timeline = RolloutTimeline(client, estate.selector)
    timeline.start()
    emulator.requests.clear()
    estate.others.thread.start()
    api_before, rss_start = _api_counts(client), _rss_mib()
    rss_peak = rss_start
    started = time.monotonic()
    most_extra = most_on_new = 0
    try:
        spec = {"image": NEW_IMAGE, "maxSurge": case.max_surge, **case.spec}
        client.create(NODE_IMAGE, {"metadata": {"name": node_image}, "spec": spec})
        for scale_set in estate.scale_sets:
            spec = {"groupID": scale_set, "nodeImage": node_image}
            client.create(
                SCALING_GROUP, {"metadata": {"name": scale_set.rsplit("/", 1)[1].lower()}, "spec": spec}
            )
        while True:
            if case.bad_image:
                estate.stop_bad_machines(client, emulator)
            live, on_new = estate.census(emulator)
            most_extra, most_on_new = max(most_extra, live - scale.nodes), max(most_on_new, on_new)
            rss_peak = max(rss_peak, _rss_mib())
            if (
                _finished(client, estate.selector, node_image, scale.nodes, case.final_image)
                and live == scale.nodes
            ):
                break
            if time.monotonic() - started > 40 * scale.nodes * (scale.join_seconds + 5):
                raise RuntimeError("the rollout did not finish")
            time.sleep(0.2)
        seconds = time.monotonic() - started
        calls = dict(sorted(emulator.requests.counts_by_operation().items()))
        api_after = _api_counts(client)
        passes, cpu_mean, cpu_p99 = _manager_counts(runner.manager)
        cost = ControllerCost(
            passes,
            cpu_mean,
            cpu_p99,
            api_after[0] - api_before[0],
            api_after[1] - api_before[1],
            counts.pod_lists,
            counts.node_gets,
            rss_start,
            rss_peak,
        )
    finally:
        timeline.stop()
        runner.stop()
        estate.others.close()
        estate.simulator.stop()
        cloud.close()
        _clean(client, node_image, estate.scale_sets, estate.selector)
    breakdown = timeline.table(scale.join_seconds, case.max_surge)
    return Rollout(
        case.label,
        case.max_surge,
        seconds,
        case.lower_bound(scale),
        most_extra,
        calls,
        most_on_new,
        cost,
        breakdown,
    )


def _finished(client: Client, selector: str, node_image: str, count: int, image: str) -> bool:
    nodes = client.list(NODE, label_selector=selector).items
    if len(nodes) != count or any(
        (n["metadata"].get("annotations") or {}).get(NODE_IMAGE_ANNOTATION) != image for n in nodes
    ):
        return False
    status = client.get(NODE_IMAGE, node_image).get("status") or {}
    up_to_date = any(
        c["type"] == "UpToDate" and c["status"] == "True" for c in status.get("conditions") or []
    )
    return (
        up_to_date and not status.get("pending") and status.get("rolloutState") in ("Complete", "RolledBack")
    )


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
    around = f", {scale.other_nodes} other Nodes relabelled 20/s around them" if scale.other_nodes else ""
    lines = [
        f"node image rollout: {scale.nodes} nodes over {SCALE_SETS} scale sets{around}, "
        f"join time {scale.join_seconds:g} s, one pod per node to drain, production defaults otherwise",
        "",
        "| case | maxSurge | rollout (s) | lower bound (s) | ratio | most extra machines "
        "| most on new image | ARM calls | per node |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for rollout in rollouts:
        lines.append(
            f"| {rollout.label} | {rollout.max_surge} | {rollout.seconds:.1f} | {rollout.lower_bound:.1f} | "
            f"{rollout.seconds / rollout.lower_bound:.2f} | {rollout.most_extra_machines} | "
            f"{rollout.most_on_new} | {rollout.total_calls} | {rollout.total_calls / scale.nodes:.1f} |"
        )
    lines += ["", "| ARM operation | " + " | ".join(r.label for r in rollouts) + " |"]
    lines.append("|---|" + "---|" * len(rollouts))
    for operation in operations:
        lines.append(
            f"| {operation} | " + " | ".join(str(r.arm_calls.get(operation, 0)) for r in rollouts) + " |"
        )
    lines.append("")
    lines.append(
        "lower bound = nodes / maxSurge x join time (a replacement cannot start before the previous "
        "machines of its budget have joined); with a soak, every batch of maxSurge joins is followed "
        "by its soak; for the bad image, the canary's join plus heirReadyTimeout (the rollback then "
        "removes the canaries). Every row has the default canary of one node per scale set. ARM calls "
        "are every request the emulator answered (long-running operation polls included)."
    )
    timelines = [line for r in rollouts for line in ["", f"timeline of {r.label}:", "", *r.timeline]]
    return "\n".join([*lines, "", *_cost_table(rollouts), *timelines])


def _cost_table(rollouts: list[Rollout]) -> list[str]:
    lines = [
        "| case | passes | pass CPU mean (ms) | pass CPU p99 <= (ms) | pod LISTs (manager / all) "
        "| Node GETs (manager / all) | RSS start -> peak (MiB) |",
        "|---|---|---|---|---|---|---|",
    ]
    for rollout in rollouts:
        cost = rollout.cost
        if cost is None:
            continue
        lines.append(
            f"| {rollout.label} | {cost.passes} | {cost.pass_cpu_mean_ms:.1f} | {cost.pass_cpu_p99_ms:g} | "
            f"{cost.manager_pod_lists} / {cost.pod_lists} | {cost.manager_node_gets} / {cost.node_gets} | "
            f"{cost.rss_start_mib:.0f} -> {cost.rss_peak_mib:.0f} |"
        )
    lines += [
        "",
        "passes and pass CPU: the nodeimage controller's (its worker thread's CPU time per pass, I/O "
        "waits excluded); pod LISTs and Node GETs: the manager's reconcilers' (its informers' own "
        "lists and watches apart) / every client's, as the API server counted them during the "
        "rollout (kwok and the node simulator included); RSS: the bench process (manager, ARM "
        "emulator and node simulator).",
    ]
    return lines


def cases(scale: Scale) -> list[Case]:
    """The rows: two surges with a good image, a canary with a soak after each batch, and a bad
    image caught at the canary and rolled back."""
    full = scale.join_seconds >= FULL.join_seconds
    soak = 10.0 if full else 2.0
    heir_ready = 30.0 if full else 5.0
    return [
        *(Case(f"maxSurge {surge}", surge) for surge in SURGES),
        Case("canary + soak", 3, {"canary": 1, "soakDuration": f"{soak:g}s"}, soak_seconds=soak),
        Case(
            "bad image, rolled back",
            3,
            {"canary": 1, "heirReadyTimeout": f"{heir_ready:g}s"},
            bad_image=True,
            heir_ready_seconds=heir_ready,
        ),
    ]


def run(
    full: bool, kubeconfig: str | None = None, *, scale: Scale | None = None, only: str | None = None
) -> str:
    """Run the benchmark (``scale`` overrides the quick or full sizes, ``only`` runs the one case
    of that label); returns the table."""
    scale = scale or (FULL if full else QUICK)
    rollouts: list[Rollout] = []
    certificates = issue_loopback_certificates()
    with cluster_kubeconfig(kubeconfig) as config:
        client = Client.from_kubeconfig(config)
        install_crds(client, [*RESOURCES, *NETWORK_RESOURCES, *IDENTITY_RESOURCES])
        for case in cases(scale):
            if only is not None and case.label != only:
                continue
            with (
                tempfile.TemporaryDirectory(prefix="bench-nodeimage-") as directory,
                ArmEmulator(state_dir=Path(directory), certificates=certificates) as emulator,
            ):
                emulator.estate.add_resource_group(RESOURCE_GROUP)
                rollouts.append(_roll(client, config, emulator, scale, case))
    return _table(scale, rollouts)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.nodeimage", description=__doc__)
    parser.add_argument("--full", action="store_true", help="30 nodes, 20 s joins (default: 6 nodes, 2 s)")
    parser.add_argument("--kubeconfig", help="use this cluster instead of a private control plane")
    parser.add_argument("--nodes", type=int, help="nodes in the pools (default: the size's)")
    parser.add_argument("--join-seconds", type=float, help="how long a machine takes to join")
    parser.add_argument("--other-nodes", type=int, default=0, help="Nodes around the pools (none)")
    parser.add_argument("--case", help="run only the case of this label, such as 'maxSurge 3'")
    parser.add_argument("--profile", help="write a cProfile of the NodeImage passes here (pstats)")
    arguments = parser.parse_args(argv)
    base = FULL if arguments.full else QUICK
    scale = Scale(
        arguments.nodes or base.nodes,
        base.join_seconds if arguments.join_seconds is None else arguments.join_seconds,
        arguments.other_nodes,
    )
    with profiled_passes(arguments.profile):
        print(run(arguments.full, arguments.kubeconfig, scale=scale, only=arguments.case))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
