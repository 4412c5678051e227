"""The local demo behind ``make run``: a whole nodewright installation on one machine.

Owns ``LocalEnvironment``: the real control plane (API server, controller manager, scheduler and
kwok as the kubelets), the ARM emulator seeded with a small estate
(config/emulator/seed-sample.yaml), the node simulator, the CRDs generated from
``nodewright.api``, the samples under config/samples, a Deployment with a PodDisruptionBudget on
the user pool (``WORKLOAD``, whose pods move to the new-image nodes as the NodeImage rolls), the
Azure CNS NodeSubnet stand-in (``cns_nodesubnet``) handing pods addresses from their node's NIC
pool, which the manager's ``node-network-config`` (consumer ``nodesubnet``) sizes, and the
manager itself as a child process (``nodewright run``) configured for the emulator; plus a
progress line that tells a newcomer what the reconcilers are doing and how many of the
Deployment's pods have an address from their node's pool; and a real Prometheus (``prometheus``)
scraping the manager's HTTPS endpoint with the token of a ServiceAccount bound to
``nodewright-metrics-reader``, loaded with config/prometheus/rules.yaml. Everything is torn down
by ``stop``.

Side effects: processes, loopback ports, files under the work directory.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from nodewright.api import RESOURCES
from nodewright.cloud.emulator import DEFAULT_SUBSCRIPTION, ArmEmulator
from nodewright.controllers.status import read_view, summary
from nodewright.devenv.cns_nodesubnet import NodeSubnetConsumer
from nodewright.devenv.cns_nodesubnet_nmagent import answers_in_emulator
from nodewright.devenv.controlplane import ControlPlane, free_port, terminate_process_group
from nodewright.devenv.crds import install_crds
from nodewright.devenv.kwok import POD_IP_SOURCE_LABEL
from nodewright.devenv.nodesim import SIMULATED_LABEL, NodeSimulator, machines_in_emulator
from nodewright.devenv.paths import DEFAULT_CACHE
from nodewright.devenv.prometheus import (
    Prometheus,
    grant_metrics_reader,
    scrape_config,
    scrape_job,
    scraper_token,
)
from nodewright.ipam import addresses_of
from nodewright.runtime import errors
from nodewright.runtime.kube.client import Client
from nodewright.runtime.kube.kinds import Kind

__all__ = ["LocalEnvironment", "manager_config"]

REPOSITORY = Path(__file__).resolve().parents[2]
CRD = Kind(
    "apiextensions.k8s.io/v1", "CustomResourceDefinition", "customresourcedefinitions", namespaced=False
)
NAMESPACE = "nodewright-system"
SCRAPER = "prometheus"
"""The ServiceAccount whose token Prometheus scrapes with (bound to nodewright-metrics-reader)."""
METRICS_JOB = "nodewright"


def manager_config(
    emulator: ArmEmulator, metrics_port: int, health_port: int, namespace: str = NAMESPACE
) -> dict[str, Any]:
    """The manager's config for the demo: every reconciler on, Azure through the emulator."""
    cloud = {
        "subscriptionId": DEFAULT_SUBSCRIPTION,
        "armEndpoint": emulator.endpoint,
        "caBundle": str(emulator.ca_file),
        "pollingInterval": 0.5,
        # The emulator accepts any bearer token; never put a real secret in a config file.
        "credential": {"kind": "static-token", "staticToken": "local-emulator"},
    }
    return {
        "metrics": {"bindAddress": f"127.0.0.1:{metrics_port}"},
        "health": {"bindAddress": f"127.0.0.1:{health_port}"},
        "leaderElection": {"enabled": True, "namespace": namespace, "name": "nodewright-leader"},
        "logging": {"level": "info", "format": "text"},
        "cache": {"compressedKinds": ["Pod"]},
        "reconcilers": {
            name: {"options": {"cloud": cloud, **options}} for name, options in DEMO_RECONCILERS.items()
        },
    }


DEMO_RECONCILERS: dict[str, dict[str, Any]] = {
    "identity-assignment": {"repairInterval": 60},
    "node-network-config": {"namespace": "kube-system", "nicRefreshSeconds": 5, "consumer": "nodesubnet"},
    "node-image": {"nodeLabelSelector": "kubernetes.azure.com/agentpool=vmss-user"},
}
"""Reconciler name -> its options in the demo, besides the shared ``cloud`` block."""

NODE = Kind("v1", "Node", "nodes", namespaced=False)
AZURE_ASSIGNED_IDENTITY = Kind("aadpodidentity.k8s.io/v1", "AzureAssignedIdentity", "azureassignedidentities")


NODE_IMAGE = Kind("nodewright.io/v1alpha1", "NodeImage", "nodeimages", namespaced=False)
NODE_NETWORK_CONFIG = Kind("acn.azure.com/v1alpha", "NodeNetworkConfig", "nodenetworkconfigs")
SIMULATOR_OWNER = "demo"
DEPLOYMENT = Kind("apps/v1", "Deployment", "deployments")
POD = Kind("v1", "Pod", "pods")
POD_DISRUPTION_BUDGET = Kind("policy/v1", "PodDisruptionBudget", "poddisruptionbudgets")
NODE_IMAGE_ANNOTATION = "nodewright.io/node-image"
WORKLOAD = "shop"
"""A Deployment (two replicas, at most one unavailable) on the user pool, which the NodeImage
sample rolls: its pods move to the new-image nodes (``kubectl get pods -o wide``)."""


def pool_addresses(client: Client) -> dict[str, set[str]]:
    """Node name -> the addresses its NodeNetworkConfig records on the NIC (kube-system)."""
    pools: dict[str, set[str]] = {}
    for config in client.list(NODE_NETWORK_CONFIG, "kube-system").items:
        containers = (config.get("status") or {}).get("networkContainers") or []
        pools[config["metadata"]["name"]] = {
            address
            for container in containers
            for assignment in container.get("ipAssignments") or []
            for address in addresses_of(str(assignment.get("ip", "")))
        }
    return pools


def workload_progress(client: Client) -> str:
    """How many of the demo Deployment's pods are Ready, how many on the new image, and how
    many have an address from their node's NIC pool."""
    images = {str((i.get("spec") or {}).get("image", "")).lower() for i in client.list(NODE_IMAGE).items}
    node_images = {
        n["metadata"]["name"]: str(
            (n["metadata"].get("annotations") or {}).get(NODE_IMAGE_ANNOTATION, "")
        ).lower()
        for n in client.list(NODE).items
    }
    pods = [
        p
        for p in client.list(POD, "default").items
        if (p["metadata"].get("labels") or {}).get("app") == WORKLOAD
    ]
    ready = [p for p in pods if _pod_ready(p)]
    moved = [p for p in ready if node_images.get(p["spec"].get("nodeName", "")) in images]
    pools = pool_addresses(client)
    pooled = [
        p
        for p in pods
        if (p.get("status") or {}).get("podIP") in pools.get(p["spec"].get("nodeName", ""), set())
    ]
    return (
        f"{WORKLOAD} {len(ready)}/{len(pods)} pods ready, {len(moved)}/{len(pods)} on the new image, "
        f"{len(pooled)}/{len(pods)} with a pool IP"
    )


def _pod_ready(pod: dict[str, Any]) -> bool:
    conditions = (pod.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


def workload_objects() -> list[tuple[Kind, dict[str, Any]]]:
    """The demo's Deployment and its PodDisruptionBudget (see ``WORKLOAD``)."""
    labels = {"app": WORKLOAD}
    template = {
        "metadata": {"labels": {**labels, POD_IP_SOURCE_LABEL: "node-pool"}},
        "spec": {
            "nodeSelector": {"kubernetes.azure.com/agentpool": "vmss-user"},
            "containers": [{"name": WORKLOAD, "image": "mcr.microsoft.com/azuredocs/aks-helloworld:v1"}],
        },
    }
    metadata = {"name": WORKLOAD, "namespace": "default"}
    return [
        (
            DEPLOYMENT,
            {
                "metadata": metadata,
                "spec": {"replicas": 2, "selector": {"matchLabels": labels}, "template": template},
            },
        ),
        (
            POD_DISRUPTION_BUDGET,
            {"metadata": metadata, "spec": {"maxUnavailable": 1, "selector": {"matchLabels": labels}}},
        ),
    ]


class LocalEnvironment:
    """Control plane + ARM emulator + node simulator + CRDs + samples + manager."""

    def __init__(
        self,
        work_dir: Path,
        *,
        seed: Path,
        samples: Path,
        join_delay: float = 3.0,
        prometheus: bool = True,
        manager_module: str = "nodewright.controllers.main",
        manager_arguments: tuple[str, ...] = (),
    ) -> None:
        """``prometheus`` False leaves Prometheus out; ``manager_module`` (run as ``python -m``
        with ``run --config FILE`` and ``manager_arguments``) lets a test wrap the manager."""
        self.work_dir = work_dir
        self.start_prometheus = prometheus
        self.manager_module = manager_module
        self.manager_arguments = manager_arguments
        self.seed = seed
        self.samples = samples
        self.join_delay = join_delay
        self.plane: ControlPlane | None = None
        self.emulator: ArmEmulator | None = None
        self.simulator: NodeSimulator | None = None
        self.cns: NodeSubnetConsumer | None = None
        self.manager: subprocess.Popen[bytes] | None = None
        self.prometheus: Prometheus | None = None
        self.client: Client | None = None
        self.metrics_port = free_port()
        self.health_port = free_port()

    @property
    def kubectl(self) -> Path:
        return Path(os.environ.get("NODEWRIGHT_BIN", DEFAULT_CACHE / "bin")) / "kubectl"

    def start(self, say: Callable[[str], None]) -> None:
        """Bring everything up, in dependency order, reporting each step through ``say``."""
        shutil.rmtree(self.work_dir / "etcd", ignore_errors=True)  # every run starts empty
        self.work_dir.mkdir(parents=True, exist_ok=True)
        say("Starting etcd, kube-apiserver, kube-controller-manager, kube-scheduler and kwok ...")
        self.plane = ControlPlane(work_dir=self.work_dir)
        self.plane.start()
        self.client = Client.from_kubeconfig(self.plane.kubeconfig)
        say(f"Starting the ARM emulator with {self.seed.relative_to(REPOSITORY)} ...")
        self.emulator = ArmEmulator(state_dir=self.work_dir / "arm-emulator")
        self.emulator.start()
        self.emulator.estate.apply_file(self.seed)
        say("Starting the node simulator (emulated machines become Nodes) ...")
        self.simulator = NodeSimulator(
            self.client,
            machines_in_emulator(self.emulator.state),
            join_delay=self.join_delay,
            owner=SIMULATOR_OWNER,
        )
        self.simulator.start()
        say("Starting Azure CNS NodeSubnet (a stand-in) on every node: pods get IPs from their NIC ...")
        self.cns = NodeSubnetConsumer(
            self.client,
            answers_in_emulator(self.emulator.state),
            node_selector=f"{SIMULATED_LABEL}={SIMULATOR_OWNER}",
            interval=0.5,
        )
        self.cns.start()
        say(f"Installing {len(RESOURCES)} CRDs ...")
        install_crds(self.client)
        self.client.create(
            Kind("v1", "Namespace", "namespaces", namespaced=False), {"metadata": {"name": NAMESPACE}}
        )
        if any(self.samples.glob("*.yaml")):
            say(f"Applying the samples in {self.samples.relative_to(REPOSITORY)} ...")
            self._kubectl("apply", "-f", str(self.samples))
        say(f"Running Deployment {WORKLOAD} on the user pool (its pods will move to new-image nodes) ...")
        self._start_workload()
        say("Starting the manager (nodewright run) ...")
        self._start_manager()
        if self.start_prometheus:
            say("Starting Prometheus (scrapes the manager over HTTPS with a metrics-reader token) ...")
            self._start_prometheus()

    def scrape_jobs(self) -> list[dict[str, Any]]:
        """The demo's scrape job: the manager's HTTPS endpoint, with the scraper's token (side
        effect: creates the ServiceAccount, its binding and a token file)."""
        assert self.client is not None
        grant_metrics_reader(self.client, SCRAPER, NAMESPACE)
        token = scraper_token(self.client, SCRAPER, NAMESPACE, self.work_dir / "prometheus" / "token")
        return [scrape_job(METRICS_JOB, f"127.0.0.1:{self.metrics_port}", token)]

    def _start_prometheus(self) -> None:
        config = scrape_config(self.scrape_jobs())
        self.prometheus = Prometheus(
            self.work_dir / "prometheus", config, self.work_dir / "logs" / "prometheus.log"
        )
        self.prometheus.start()

    def _start_workload(self) -> None:
        """Create ``WORKLOAD``: the scheduler places its pods on the old-image user nodes (they
        join within seconds), long before the rollout's first heir exists."""
        assert self.client is not None
        for kind, body in workload_objects():
            self.client.create(kind, body)

    def _kubectl(self, *arguments: str) -> None:
        assert self.plane is not None
        subprocess.run(
            [str(self.kubectl), *arguments],
            env={**os.environ, "KUBECONFIG": str(self.plane.kubeconfig)},
            check=True,
            capture_output=True,
            timeout=120,
        )

    def _start_manager(self) -> None:
        assert self.plane is not None
        assert self.emulator is not None
        config_path = self.work_dir / "manager-config.yaml"
        config = manager_config(self.emulator, self.metrics_port, self.health_port)
        config_path.write_text(yaml.safe_dump(config, sort_keys=False))
        log = os.open(self.work_dir / "logs" / "manager.log", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            self.manager = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    self.manager_module,
                    "run",
                    "--config",
                    str(config_path),
                    *self.manager_arguments,
                ],
                env={**os.environ, "KUBECONFIG": str(self.plane.kubeconfig)},
                stdout=log,
                stderr=log,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
        finally:
            os.close(log)

    def failure(self) -> str | None:
        """Why the environment is broken (a process exited), or None."""
        assert self.plane is not None
        for name, process in (
            ("etcd", self.plane.etcd_process),
            ("kube-apiserver", self.plane.apiserver_process),
            *self.plane.component_processes.items(),
            ("manager", self.manager),
            ("prometheus", self.prometheus.process if self.prometheus else None),
        ):
            if process is not None and process.poll() is not None:
                return f"{name} exited with code {process.returncode} (logs in {self.work_dir / 'logs'})"
        return None

    def progress(self) -> str:
        """One line: ``nodewright status``'s summary of what every reconciler has done so far,
        and where the demo Deployment's pods run."""
        assert self.client is not None
        parts = []
        for line in (lambda client: summary(read_view(client)), workload_progress):
            try:
                parts.append(line(self.client))
            except errors.ApiError as error:
                parts.append(f"({error.reason or error.code})")
        return " | ".join(parts)

    def stop(self) -> None:
        """Tear everything down, newest first; safe to call on a half-started environment."""
        if self.prometheus is not None:
            self.prometheus.stop()
        terminate_process_group(self.manager, grace=40, after_kill=10)
        if self.cns is not None:
            self.cns.stop()
        if self.simulator is not None:
            self.simulator.stop()
        if self.emulator is not None:
            self.emulator.stop()
        if self.plane is not None:
            self.plane.stop()
