"""Both halves together, against a fake NIC per node and one shared subnet: random pod churn,
node-side and control-side rounds in any order, leaked IP configurations, capacity errors and
time passing. Each half runs the node_network_config reconciler's own plan stage (``plan``:
``plan_spec`` as the node agent, then as the control plane following that spec, ``plan_nic``,
``account``) over a ``NicBook``, as a pass does (``record.remember_pass``); only the NIC writes
and the node agent's address book are simulated. After every step: no address on two NICs or in
two statuses, every status IP on its NIC, no pod's IP ever released, books consistent.
``settle`` then checks that the system converges: every pod served, the request met, no
unaccounted IP configuration left after GC."""

from __future__ import annotations

import dataclasses
import itertools
from dataclasses import dataclass, field

from hypothesis import event
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from nodewright.controllers.node_network_config.nic_book import NicBook, NicMemory
from nodewright.controllers.node_network_config.options import NodeNetworkConfigSettings
from nodewright.controllers.node_network_config.plan import account, plan_nic, plan_spec
from nodewright.controllers.node_network_config.record import remember_pass, remember_spec
from nodewright.ipam import CountFacts, NicIpConfiguration, PoolScaler, pool_target
from tests.ipam.address_book import AddressBook, NoFreeAddressError, find_address_conflicts
from tests.ipam.strategies import STATEFUL, address

NODES = ("node-a", "node-b")
SUBNET_SIZE = 64
CAPACITY = 40
SCALER = PoolScaler(batch_size=8, request_threshold_percent=50, max_ip_count=CAPACITY)
GRACE = 600.0
AGENT = NodeNetworkConfigSettings(
    demand_from_pods=True,
    scaler=SCALER,
    scale_down_delay_seconds=0.0,
    release_settle_seconds=0.0,
    leak_grace_period_seconds=GRACE,
)
"""The node's half: nodewright as the node agent, writing the spec from the pods."""
CONTROL = dataclasses.replace(AGENT, demand_from_pods=False)
"""The control plane's half: following the spec the node agent wrote."""


class FakeSubnet:
    """Hands out the lowest free address; takes released ones back."""

    def __init__(self, size: int) -> None:
        self.free = [address(i) for i in range(size)]

    def take(self) -> str:
        self.free.sort()
        return self.free.pop(0)

    def give_back(self, value: str) -> None:
        assert value not in self.free, f"{value} released twice"
        self.free.append(value)


@dataclass
class Node:
    nic: list[NicIpConfiguration] = field(default_factory=list)
    accounted: set[str] = field(default_factory=set)
    status: list[tuple[str, str]] = field(default_factory=list)
    requested: int = 0
    ips_not_in_use: tuple[str, ...] = ()
    book: AddressBook = field(default_factory=AddressBook)
    pods: set[str] = field(default_factory=set)

    def demand(self) -> int:
        return len(self.pods)

    def waiting(self) -> list[str]:
        return sorted(pod for pod in self.pods if self.book.address_of_pod(pod) is None)


class IpamSimulation(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.subnet = FakeSubnet(SUBNET_SIZE)
        self.nodes = {node: Node() for node in NODES}
        self.book = NicBook(backoff_base_seconds=2.0, backoff_cap_seconds=60.0, leak_grace_seconds=GRACE)
        self.now = 0.0
        self.names = (f"ipconfig-{i}" for i in itertools.count())
        self.pod_numbers = itertools.count()

    # -- the cluster ------------------------------------------------------------------------

    @rule(node=st.sampled_from(NODES), count=st.integers(min_value=1, max_value=12))
    def add_pods(self, node: str, count: int) -> None:
        state = self.nodes[node]
        for _ in range(count):
            state.pods.add(f"default/pod-{next(self.pod_numbers)}")
        self._serve_waiting(state)

    @rule(node=st.sampled_from(NODES), data=st.data())
    def delete_pods(self, node: str, data: st.DataObject) -> None:
        state = self.nodes[node]
        if not state.pods:
            return
        gone = data.draw(st.sets(st.sampled_from(sorted(state.pods)), min_size=1))
        for pod in gone:
            state.pods.discard(pod)
            state.book.unbind(pod)

    @rule(seconds=st.sampled_from([1.0, 30.0, 300.0, 700.0]))
    def tick(self, seconds: float) -> None:
        self.now += seconds

    @rule(node=st.sampled_from(NODES))
    def leak(self, node: str) -> None:
        """A crash between a NIC write and the status write leaves an unaccounted configuration."""
        state = self.nodes[node]
        if self.subnet.free and len(state.nic) < CAPACITY:
            state.nic.append(NicIpConfiguration(next(self.names), self.subnet.take()))

    # -- the two halves -----------------------------------------------------------------------

    @rule(node=st.sampled_from(NODES))
    def node_side(self, node: str) -> None:
        state = self.nodes[node]
        memory = self.book.memory(node)
        spec = plan_spec(AGENT, self._facts(state, state.book.in_use_addresses(), memory), memory)
        remember_spec(self.book, node, spec, self.now)
        state.requested = spec.requested
        state.ips_not_in_use = spec.listed
        # Like Azure CNS, the node keeps its own pending-release marks: an IP once marked is never
        # handed to a pod again, and leaves the book only when the status no longer lists it.
        state.book.mark_pending(spec.marked)
        self._serve_waiting(state)

    @rule(node=st.sampled_from(NODES))
    def control_side(self, node: str) -> None:
        state = self.nodes[node]
        memory = self.book.memory(node)
        if not memory.guard.may_write(self.now):
            return
        in_use = self._all_pod_addresses()
        spec = plan_spec(CONTROL, self._facts(state, in_use, memory), memory)
        plan = plan_nic(CONTROL, spec, state.nic, state.accounted, in_use, memory, self.now)
        if plan.collected:
            event("leaked IP configuration collected")
        removed = set(plan.removals)
        for configuration in state.nic:
            if configuration.name in removed and configuration.address is not None:
                self.subnet.give_back(configuration.address)
        state.nic = [c for c in state.nic if c.name not in removed]
        added: list[str] = []
        if plan.add_count:
            guard = self.book.guard(node)
            if len(self.subnet.free) < plan.add_count:
                event("capacity error")
                self.book.set_guard(node, guard.after_capacity_error(plan.add_count, self.now))
            else:
                for _ in range(plan.add_count):
                    configuration = NicIpConfiguration(next(self.names), self.subnet.take())
                    state.nic.append(configuration)
                    added.append(configuration.name)
                self.book.set_guard(node, guard.after_success(added=len(added)))
        accounting = account(state.nic, state.accounted, plan, added, spec)
        remember_pass(self.book, node, spec, accounting, self.now)
        state.accounted = set(accounting.accounted)
        state.status = accounting.assignments
        orphaned = state.book.sync_status(state.status, self.now)
        assert orphaned == [], f"IPs released under pods {orphaned}"
        self._serve_waiting(state)

    @rule()
    def settle(self) -> None:
        """Run rounds until quiet, past the grace period: everything converges."""
        for _ in range(8):
            self.now += GRACE
            for node in NODES:
                self.node_side(node)
                self.control_side(node)
        for node, state in self.nodes.items():
            assert {c.name for c in state.nic} == state.accounted, f"{node}: unaccounted IPs survived GC"
        total_target = sum(pool_target(state.demand(), SCALER) for state in self.nodes.values())
        if total_target > SUBNET_SIZE:
            event("subnet too small for every target")
            return  # the subnet cannot serve every target: convergence is not promised
        for node, state in self.nodes.items():
            # Only pods beyond the node's maximum may wait for an address.
            assert len(state.waiting()) == max(0, state.demand() - CAPACITY), f"{node}: pods without an IP"
            assert len(state.status) - len(state.ips_not_in_use) == state.requested
            assert state.requested == pool_target(state.demand(), SCALER)

    # -- invariants ---------------------------------------------------------------------------

    @invariant()
    def no_address_twice(self) -> None:
        on_nics = {node: [(c.name, c.address) for c in s.nic if c.address] for node, s in self.nodes.items()}
        assert find_address_conflicts(on_nics) == []
        statuses = {node: state.status for node, state in self.nodes.items()}
        assert find_address_conflicts(statuses) == []
        everywhere = [a for s in self.nodes.values() for c in s.nic if (a := c.address)]
        assert not set(everywhere) & set(self.subnet.free)

    @invariant()
    def status_ips_are_on_their_nic(self) -> None:
        for state in self.nodes.values():
            on_nic = {(c.name, c.address) for c in state.nic}
            assert set(state.status) <= on_nic

    @invariant()
    def pods_keep_their_ips(self) -> None:
        for state in self.nodes.values():
            status_addresses = {a for _, a in state.status}
            for pod in state.pods:
                held = state.book.address_of_pod(pod)
                assert held is None or held in status_addresses
            pending = set(state.ips_not_in_use)
            assert not {e.name for e in state.book.entries() if e.pod is not None} & pending

    @invariant()
    def pending_ips_stay_listed(self) -> None:
        """#962: every IP the node holds back for release is in ipsNotInUse until it is released."""
        for state in self.nodes.values():
            assert set(state.book.pending_release()) <= set(state.ips_not_in_use)

    @invariant()
    def within_capacity(self) -> None:
        for state in self.nodes.values():
            assert len(state.nic) <= CAPACITY
            state.book.check()

    # -- helpers ------------------------------------------------------------------------------

    def _facts(self, state: Node, in_use: set[str], memory: NicMemory) -> CountFacts:
        return CountFacts(
            demand=state.demand(),
            assignments=state.status,
            in_use_addresses=in_use,
            requested_ip_count=state.requested,
            ips_not_in_use=state.ips_not_in_use,
            surplus_since=memory.surplus_since,
            now=self.now,
        )

    def _all_pod_addresses(self) -> set[str]:
        return {a for state in self.nodes.values() for a in state.book.in_use_addresses()}

    def _serve_waiting(self, state: Node) -> None:
        for pod in state.waiting():
            try:
                state.book.bind(pod)
            except NoFreeAddressError:
                return


IpamSimulation.TestCase.settings = STATEFUL
test_ipam_simulation = IpamSimulation.TestCase


def _check(machine: IpamSimulation) -> None:
    machine.no_address_twice()
    machine.status_ips_are_on_their_nic()
    machine.pods_keep_their_ips()
    machine.pending_ips_stay_listed()
    machine.within_capacity()


def test_scale_up_right_after_scale_down_in_the_simulation() -> None:
    """#962 as a sequence (random search finds it too, but rarely): fill a node, shrink demand so
    IPs are marked, grow it before the control plane releases them, then settle. The marked IPs
    stay listed until released and every pod ends up with an address."""
    machine = IpamSimulation()
    machine.add_pods("node-a", 12)
    for step in (machine.node_side, machine.control_side):
        step("node-a")
        _check(machine)
    pods = sorted(machine.nodes["node-a"].pods)
    for pod in pods[:10]:
        machine.nodes["node-a"].pods.discard(pod)
        machine.nodes["node-a"].book.unbind(pod)
    machine.node_side("node-a")
    marked = set(machine.nodes["node-a"].ips_not_in_use)
    assert marked
    _check(machine)
    machine.add_pods("node-a", 12)
    machine.node_side("node-a")
    assert marked <= set(machine.nodes["node-a"].ips_not_in_use)
    _check(machine)
    machine.control_side("node-a")
    _check(machine)
    machine.settle()
    _check(machine)
    machine.teardown()
