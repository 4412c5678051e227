"""The CNS NodeSubnet stand-in's pass against a real API server, with NMAgent's answers set by the
test and a clock the test moves: CNS serves every selected Node from its start, pods or not; its
"Assigned" is its own CNI ADD/DEL bookkeeping across namespaces; a hung fetch freezes that node's
pool for good. Nodes here have no kubelet: pods are bound by the test and stay as written."""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field

import pytest

from nodewright.devenv.cns_nodesubnet import FetchHungError, NodeSubnetConsumer
from nodewright.devenv.cns_nodesubnet_nmagent import Interfaces, LaggedNMAgent
from nodewright.runtime import errors
from nodewright.runtime.kube.client import Client
from nodewright.runtime.kube.kinds import NAMESPACE, NODE, POD
from tests.conftest import Cluster
from tests.controllers.node_network_config.test_nodesubnet_cns import answer

ADDRESSES = [f"10.240.0.{i}" for i in range(10, 14)]


@dataclass
class Rig:
    client: Client
    label: str
    arm: dict[str, Interfaces] = field(default_factory=dict)
    now: float = 0.0
    nodes: list[str] = field(default_factory=list)
    namespaces: list[str] = field(default_factory=list)

    def consumer(self) -> NodeSubnetConsumer:
        return NodeSubnetConsumer(
            self.client,
            lambda: dict(self.arm),
            node_selector=f"cns-test={self.label}",
            nmagent_lag=0.0,
            seed=2,
            clock=lambda: self.now,
        )

    def node(self) -> str:
        name = f"cns-{uuid.uuid4().hex[:8]}"
        self.client.create(NODE, {"metadata": {"name": name, "labels": {"cns-test": self.label}}})
        self.nodes.append(name)
        return name

    def namespace(self) -> str:
        name = f"cns-{uuid.uuid4().hex[:8]}"
        self.client.create(NAMESPACE, {"metadata": {"name": name}})
        self.namespaces.append(name)
        return name

    def pod(self, namespace: str, node: str, address: str | None = None) -> str:
        name = f"pod-{uuid.uuid4().hex[:6]}"
        body = {
            "metadata": {"name": name},
            "spec": {"nodeName": node, "containers": [{"name": "app", "image": "app"}]},
        }
        self.client.create(POD, body, namespace)
        if address:
            status = {"status": {"podIP": address, "podIPs": [{"ip": address}]}}
            self.client.patch(POD, name, status, namespace, subresource="status")
        return name

    def pod_ip(self, namespace: str, name: str) -> str | None:
        return (self.client.get(POD, name, namespace).get("status") or {}).get("podIP")

    def sync_at(self, consumer: NodeSubnetConsumer, now: float) -> int:
        self.now = now
        return consumer.sync_once()


@pytest.fixture
def rig(cluster: Cluster) -> Iterator[Rig]:
    made = Rig(Client.from_kubeconfig(cluster.kubeconfig), uuid.uuid4().hex[:8])
    yield made
    for node in made.nodes:
        with contextlib.suppress(errors.ApiError):
            made.client.delete(NODE, node)
    for namespace in made.namespaces:
        with contextlib.suppress(errors.ApiError):
            made.client.delete(NAMESPACE, namespace)


def test_assigned_is_the_stand_ins_own_cni_bookkeeping_across_namespaces(rig: Rig) -> None:
    """Pods of two namespaces on one node get distinct addresses (CNI ADD); a pod whose podIP
    someone else wrote is not Assigned, so an answer dropping that address is applied; a pod
    that is gone is a CNI DEL and its address is Available again."""
    node, first, second = rig.node(), rig.namespace(), rig.namespace()
    rig.arm[node] = answer(*ADDRESSES)
    consumer = rig.consumer()
    one, two = rig.pod(first, node), rig.pod(second, node)
    foreign = rig.pod(first, node, address="10.240.0.13")
    assert rig.sync_at(consumer, 0.0) == 2
    given = {rig.pod_ip(first, one), rig.pod_ip(second, two)}
    assert len(given) == 2
    assert "10.240.0.13" not in given  # (seed 2) so dropping it below hits no Assigned address
    assert set(consumer.assigned(node)) == {f"{first}/{one}", f"{second}/{two}"}
    assert rig.pod_ip(first, foreign) == "10.240.0.13"
    kept = ADDRESSES[:3]
    rig.arm[node] = answer(*kept)
    rig.sync_at(consumer, 4.0)
    assert consumer.refused_updates() == 0
    assert consumer.known(node) == set(kept)
    rig.client.delete(POD, one, first, grace_period_seconds=0)
    rig.sync_at(consumer, 5.0)
    assert set(consumer.assigned(node)) == {f"{second}/{two}"}
    state = consumer.node_state(node)
    assert state is not None
    assert str(rig.pod_ip(second, two)) not in state.available()
    assert len(state.available()) == len(kept) - 1


def test_every_node_is_fetched_from_cns_start_with_or_without_pods(rig: Rig) -> None:
    """Two nodes without a pod: each CNS fetches at start, then on its doubling schedule; a NIC
    change on one is picked up at that node's next fetch."""
    quiet, changing = rig.node(), rig.node()
    rig.arm = {quiet: answer(*ADDRESSES[:2]), changing: answer(*ADDRESSES[:2])}
    consumer = rig.consumer()
    for now in (0.0, 4.0, 12.0):
        rig.sync_at(consumer, now)
    for node in (quiet, changing):
        schedule = consumer.schedule(node)
        assert schedule is not None
        assert (schedule.interval, schedule.next_fetch) == (16.0, 28.0)
        assert consumer.known(node) == set(ADDRESSES[:2])
    rig.arm[changing] = answer(*ADDRESSES)
    rig.sync_at(consumer, 27.0)
    assert consumer.known(changing) == set(ADDRESSES[:2])
    rig.sync_at(consumer, 28.0)
    assert consumer.known(changing) == set(ADDRESSES)
    assert consumer.known(quiet) == set(ADDRESSES[:2])


class _HangingNMAgent(LaggedNMAgent):
    """An NMAgent whose answers on ``hung`` nodes never come back."""

    hung: set[str]

    def answer(self, node: str, now: float) -> Interfaces | None:
        if node in self.hung:
            raise FetchHungError(node)
        return super().answer(node, now)


def test_a_hung_fetch_freezes_that_nodes_pool_for_good(rig: Rig) -> None:
    """CNS's fetch has no timeout: once NMAgent does not answer on a node, that node's CNS never
    fetches again (its pool stays, pods are still served from it); the other node goes on."""
    frozen, other = rig.node(), rig.node()
    rig.arm = {frozen: answer(*ADDRESSES[:2]), other: answer(*ADDRESSES[:2])}
    consumer = rig.consumer()
    hanging = _HangingNMAgent(lambda: dict(rig.arm), lag=0.0, sample_seconds=0.0)
    hanging.hung = set()
    consumer.nmagent = hanging
    rig.sync_at(consumer, 0.0)
    hanging.hung.add(frozen)
    rig.arm = {frozen: answer(*ADDRESSES), other: answer(*ADDRESSES)}
    for now in (4.0, 8.0, 100.0, 2000.0):
        rig.sync_at(consumer, now)
    assert consumer.known(frozen) == set(ADDRESSES[:2])
    assert consumer.known(other) == set(ADDRESSES)
    namespace = rig.namespace()
    pod = rig.pod(namespace, frozen)
    rig.sync_at(consumer, 2001.0)
    assert rig.pod_ip(namespace, pod) in ADDRESSES[:2]
