"""``python -m bench.ipam --peer cilium``: Cilium's Azure IPAM operator (v1.15.19, unmodified,
built by ``bench/peers/build.sh cilium``) on the same workload as nodewright's IPAM bench, one tool
at a time, and the side-by-side report in ``bench/results/ipam-vs-cilium.{md,json,png}``.

The operator runs as its own process against the same kind of cluster and ARM emulator: it finds
the cloud through IMDS (``azEnvironment`` ``AzureStackCloud``, the subscription and resource group;
served by :class:`~nodewright.cloud.emulator.imds.MetadataProxy`, which it reaches through
``HTTP_PROXY``), reads the emulator's endpoints from go-autorest's environment file
(``AZURE_ENVIRONMENT_FILEPATH``), takes a v1 token with a client secret
(``AZURE_TENANT_ID``/``AZURE_CLIENT_ID``/``AZURE_CLIENT_SECRET``) and trusts the emulator's CA
through ``SSL_CERT_FILE``. It registers its own CRDs. Its flags are its defaults but for
``--ipam=azure``, the kubeconfig, and loopback addresses for its API and health servers. The
:class:`~bench.cilium_nodes.CiliumNodeKeeper` plays Cilium's agent for the kwok nodes
(``pre-allocate`` 16). nodewright's IPAM reconciler does not run meanwhile.

Side effects: a control plane, an emulator, the metadata proxy, the operator's process and its log
under the run's work directory; all stopped at the end.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import subprocess
import tempfile
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.cilium_nodes import CILIUM_NODE, CiliumNodeKeeper
from bench.cluster import cluster_kubeconfig
from nodewright.cloud.emulator import DEFAULT_SUBSCRIPTION, ArmEmulator
from nodewright.cloud.emulator.imds import InstanceMetadata, MetadataProxy
from nodewright.devenv.nodesim import SIMULATED_LABEL, NodeSimulator, machines_in_emulator
from nodewright.runtime import errors
from nodewright.runtime.kube.client import Client
from nodewright.runtime.kube.kinds import NAMESPACE, NODE, Kind

__all__ = [
    "PRE_ALLOCATE",
    "IpConfigurationTracker",
    "build_operator",
    "environment_file",
    "ip_configurations",
    "run_cilium",
]

PRE_ALLOCATE = 16
GROUP = "rg-bench"
CLIENT_ID = "cilium-operator"
CUSTOM_RESOURCE_DEFINITION = Kind(
    "apiextensions.k8s.io/v1", "CustomResourceDefinition", "customresourcedefinitions", namespaced=False
)
HERE = Path(__file__).resolve().parent


def build_operator() -> Path:
    """The operator binary, built once from ``bench/peers/cilium`` (minutes the first time)."""
    output = subprocess.run(
        ["bash", str(HERE / "peers" / "build.sh"), "cilium"], check=True, capture_output=True, text=True
    )
    return Path(output.stdout.strip().splitlines()[-1]) / "cilium"


def environment_file(emulator: ArmEmulator, directory: Path) -> Path:
    """go-autorest's custom-cloud file (``AzureStackCloud``) naming the emulator for ARM and Entra."""
    endpoint = emulator.endpoint + "/"
    document = {
        "name": "AzureStackCloud",
        "managementPortalURL": endpoint,
        "publishSettingsURL": endpoint,
        "serviceManagementEndpoint": endpoint,
        "resourceManagerEndpoint": endpoint,
        "activeDirectoryEndpoint": endpoint,
        "tokenAudience": endpoint,
        "resourceIdentifiers": {},
    }
    path = directory / "azure-environment.json"
    path.write_text(json.dumps(document, indent=2) + "\n")
    return path


def ip_configurations(emulator: ArmEmulator) -> set[tuple[str, str, str]]:
    """(instance, NIC, IP configuration) names on every scale-set instance now (primaries included)."""
    found: set[tuple[str, str, str]] = set()
    with emulator.state.locked() as state:
        for scale_set in state.scale_sets.values():
            for instance in scale_set.instances.values():
                profile = instance.properties.get("networkProfileConfiguration") or {}
                for nic in profile.get("networkInterfaceConfigurations") or []:
                    for configuration in (nic.get("properties") or {}).get("ipConfigurations") or []:
                        found.add((instance.identifier, str(nic.get("name")), str(configuration.get("name"))))
    return found


class IpConfigurationTracker:
    """Every IP configuration that was ever on a scale-set NIC during a run, sampled each second,
    so that IPs a tool added and later released still count as added (nodewright releases idle
    IPs in CRD mode; Cilium's Azure IPAM never does). Side effect: a sampling thread."""

    def __init__(self, emulator: ArmEmulator, interval: float = 1.0) -> None:
        self._emulator = emulator
        self.initial = ip_configurations(emulator)
        self.seen = set(self.initial)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(interval,), name="ip-tracker", daemon=True)
        self._thread.start()

    def _run(self, interval: float) -> None:
        while not self._stop.wait(interval):
            self.seen |= ip_configurations(self._emulator)

    def added(self) -> int:
        """IP configurations added since the tracker started (released ones included)."""
        self._stop.set()
        self._thread.join(timeout=10)
        self.seen |= ip_configurations(self._emulator)
        return len(self.seen - self.initial)


def _interface_name(emulator: ArmEmulator) -> str:
    with emulator.state.locked() as state:
        for scale_set in state.scale_sets.values():
            for instance in scale_set.instances.values():
                profile = instance.properties.get("networkProfileConfiguration") or {}
                for nic in profile.get("networkInterfaceConfigurations") or []:
                    return str(nic.get("name"))
    raise RuntimeError("The bench scale set has no NIC configuration")


@dataclass
class OperatorProcess:
    """The operator's process (started with :meth:`start`)."""

    binary: Path
    kubeconfig: str
    emulator: ArmEmulator
    proxy: MetadataProxy
    work: Path
    process: subprocess.Popen[bytes] | None = None
    log_path: Path = field(init=False)

    def __post_init__(self) -> None:
        self.log_path = self.work / "cilium-operator.log"

    def _secret(self) -> str:
        """A client secret registered with the emulator's Entra v1 route for Cilium's client."""
        secret = uuid.uuid4().hex
        self.emulator.entra.register_application(CLIENT_ID, secret)
        return secret

    def environment(self) -> dict[str, str]:
        keep = {k: v for k, v in os.environ.items() if k in ("PATH", "HOME", "TMPDIR")}
        return {
            **keep,
            "AZURE_ENVIRONMENT": "AzureStackCloud",
            "AZURE_ENVIRONMENT_FILEPATH": str(environment_file(self.emulator, self.work)),
            "AZURE_TENANT_ID": self.emulator.state.tenant_id,
            "AZURE_CLIENT_ID": CLIENT_ID,
            "AZURE_CLIENT_SECRET": self._secret(),
            "SSL_CERT_FILE": str(self.emulator.ca_file),
            "HTTP_PROXY": self.proxy.url,
            "http_proxy": self.proxy.url,
        }

    def start(self) -> None:
        command = [
            str(self.binary),
            "--ipam=azure",
            f"--k8s-kubeconfig-path={self.kubeconfig}",
            "--operator-api-serve-addr=127.0.0.1:0",
            "--operator-prometheus-serve-addr=127.0.0.1:0",
            "--k8s-namespace=kube-system",
        ]
        log = self.log_path.open("wb")
        self.process = subprocess.Popen(
            command, stdout=log, stderr=subprocess.STDOUT, env=self.environment(), cwd=self.work
        )
        log.close()

    def stop(self) -> None:
        if self.process is None:
            return
        self.process.terminate()
        try:
            self.process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(timeout=10)

    def exited(self) -> int | None:
        return None if self.process is None else self.process.poll()


def _wait_for_crd(client: Client, operator: OperatorProcess, timeout: float = 180.0) -> None:
    """Until the operator has registered CiliumNode (it does so at start)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert operator.exited() is None, f"operator exited; see {operator.log_path}"
        with contextlib.suppress(errors.NotFound):
            crd = client.get(CUSTOM_RESOURCE_DEFINITION, "ciliumnodes.cilium.io")
            conditions = (crd.get("status") or {}).get("conditions") or []
            if any(c.get("type") == "Established" and c.get("status") == "True" for c in conditions):
                return
        time.sleep(0.5)
    raise AssertionError(f"CiliumNode CRD not registered in {timeout:.0f} s; see {operator.log_path}")


def _wait_for_fill(
    keeper: CiliumNodeKeeper, nodes: int, operator: OperatorProcess, limit: float
) -> tuple[float, int]:
    """(seconds, nodes filled): until every CiliumNode's pool holds ``PRE_ALLOCATE`` IPs, or
    ``limit`` seconds (then seconds is infinite and the count says how far it got)."""
    started = time.monotonic()
    while True:
        pools = keeper.pools()
        filled = len([size for size in pools.values() if size >= PRE_ALLOCATE])
        if filled >= nodes:
            return time.monotonic() - started, filled
        assert operator.exited() is None, f"operator exited; see {operator.log_path}"
        if time.monotonic() - started >= limit:
            return float("inf"), filled
        time.sleep(0.5)


@dataclass
class CiliumRig:
    """What one Cilium run holds (the shape ``bench.ipam`` drives and measures)."""

    client: Client
    emulator: ArmEmulator
    namespace: str
    owner: str
    simulator: NodeSimulator
    consumer: CiliumNodeKeeper
    operator: OperatorProcess
    nodes: list[str] = field(default_factory=list)
    created_at: dict[str, float] = field(default_factory=dict)
    churn_names: set[str] = field(default_factory=set)
    alive: list[str] = field(default_factory=list)
    churn_started: float = 0.0
    churn_ended: float = 0.0
    settle_seconds: float = 0.0
    steady_started: float = 0.0
    steady_ended: float = 0.0


def run_cilium(
    nodes: int,
    *,
    latency: float,
    kubeconfig: str | None,
    drive: Any,
    figures_of: Any,
    binary: Path,
    fill_limit: float,
) -> dict[str, Any]:
    """One Cilium run: ``drive(rig, rng)`` runs the workload, ``figures_of(rig, ...)`` measures.
    If the pools are not filled within ``fill_limit`` seconds the workload is not run and the
    figures say how many nodes were filled."""
    with (
        cluster_kubeconfig(kubeconfig) as path,
        ArmEmulator() as emulator,
        tempfile.TemporaryDirectory(prefix="bench-cilium-") as work,
    ):
        client = Client.from_kubeconfig(path)
        namespace, owner = f"ipam-bench-{uuid.uuid4().hex[:6]}", f"ipam-bench-{uuid.uuid4().hex[:6]}"
        client.create(NAMESPACE, {"metadata": {"name": namespace}})
        emulator.estate.add_resource_group(GROUP)
        vnet = emulator.estate.add_virtual_network(
            GROUP, "vnet", subnets={"pods": "10.240.0.0/18" if nodes <= 50 else "10.240.0.0/16"}
        )
        emulator.estate.add_scale_set(GROUP, "vmssbench", subnet_id=vnet + "/subnets/pods", capacity=nodes)
        emulator.faults.add_latency(latency)
        metadata = InstanceMetadata(subscription_id=DEFAULT_SUBSCRIPTION, resource_group=GROUP)
        with MetadataProxy(metadata) as proxy:
            operator = OperatorProcess(binary, path, emulator, proxy, Path(work))
            keeper = CiliumNodeKeeper(
                client,
                node_selector=f"{SIMULATED_LABEL}={owner}",
                pod_namespace=namespace,
                interface_name=_interface_name(emulator),
                pre_allocate=PRE_ALLOCATE,
                interval=0.1 if nodes <= 100 else 0.5,
            )
            simulator = NodeSimulator(client, machines_in_emulator(emulator.state), owner=owner, interval=0.5)
            rig = CiliumRig(client, emulator, namespace, owner, simulator, keeper, operator)
            return _measure(
                rig, nodes, drive=drive, figures_of=figures_of, proxy=proxy, fill_limit=fill_limit
            )


def _measure(
    rig: CiliumRig, nodes: int, *, drive: Any, figures_of: Any, proxy: MetadataProxy, fill_limit: float
) -> dict[str, Any]:
    tracker = IpConfigurationTracker(rig.emulator)
    rig.operator.start()
    try:
        _wait_for_crd(rig.client, rig.operator)
        rig.simulator.start()
        selector = f"{SIMULATED_LABEL}={rig.owner}"
        deadline = time.monotonic() + 300
        while len(rig.client.list(NODE, label_selector=selector).items) < nodes:
            assert time.monotonic() < deadline, "nodes did not join"
            time.sleep(0.5)
        rig.nodes = sorted(
            n["metadata"]["name"] for n in rig.client.list(NODE, label_selector=selector).items
        )
        rig.consumer.start()
        fill, filled = _wait_for_fill(rig.consumer, nodes, rig.operator, fill_limit)
        if filled >= nodes:
            drive(rig, random.Random(7))
    finally:
        rig.consumer.stop()
        rig.operator.stop()
        rig.simulator.stop()
    added = tracker.added()
    figures: dict[str, Any] = figures_of(rig, added) if filled >= nodes else {"ips_added": added}
    figures["first_batches_seconds"] = fill
    figures["nodes_filled"] = filled
    figures["fill_limit_seconds"] = fill_limit
    figures["imds_requests"] = [(r.path, r.status) for r in proxy.requests]
    figures["operator_log_tail"] = rig.operator.log_path.read_text(errors="replace").splitlines()[-5:]
    _clean_up(rig)
    return figures


def _clean_up(rig: CiliumRig) -> None:
    with contextlib.suppress(errors.ApiError):
        rig.client.delete(NAMESPACE, rig.namespace)
    for node in rig.nodes:
        with contextlib.suppress(errors.ApiError):
            rig.client.delete(NODE, node)
        with contextlib.suppress(errors.ApiError):
            rig.client.delete(CILIUM_NODE, node)
