"""The node-network-config reconciler's options, parsed strictly from the manager config.

Owns ``NodeNetworkConfigSettings`` and ``parse_options``. Unknown keys, wrong types and
out-of-range values raise ``ConfigError`` with one line naming the key. Example::

    reconcilers:
      node-network-config:
        maxConcurrentReconciles: 16      # default; ARM's budget bounds the passes (see __init__)
        options:
          namespace: kube-system            # where NodeNetworkConfigs and ClusterSubnetStates live
          nodeSelector: "kubernetes.azure.com/mode=user"   # nodes that get one ("" = all)
          consumer: crd                     # crd | nodesubnet: who hands the IPs to pods (README)
          demandFromPods: false             # crd only: true when nodewright is the node agent
          release: never                    # never (idle is refused: see RELEASE_IDLE_REFUSED)
          discoveryHeadroomIPs: 0           # pods a node may gain before the consumer sees new IPs
          scaleDownDelaySeconds: 60         # hysteresis: a surplus must last this long
          prefixBlocks: false               # experimental, nodesubnet: /28 blocks
          scaleSetBootPool: true            # Uniform scale sets' models carry a new node's pool
          scaler: {batchSize: 16, requestThresholdPercent: 50, releaseThresholdPercent: 150, maxIPCount: 250}
          leakGracePeriodSeconds: 600
          resyncPeriodSeconds: 600          # a pass per node at least this often (+-10 %)
          nicListPeriodSeconds: 60          # the NIC watcher lists every scale set's NICs this often
          nicListReadsPerSecond: 1          # ...within this many list pages a second (period stretches)
          nicRefreshSeconds: 150            # a pass uses a NIC snapshot younger than this
          subnetCheckIntervalSeconds: 30
          releaseSettleSeconds: 2
          backoffBaseSeconds: 2
          backoffCapSeconds: 60
          heirPairingWaitSeconds: 60        # a rollout's new node is sized once paired (docs/ipam.md)
          cloud: {subscriptionId: ..., credential: {kind: workload-identity}}

No I/O.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from nodewright.ipam import DEFAULT_LEAK_GRACE_SECONDS, PoolScaler
from nodewright.ipam.backoff import DEFAULT_BACKOFF_BASE_SECONDS, DEFAULT_BACKOFF_CAP_SECONDS
from nodewright.runtime import ConfigError, label_selector_matcher

__all__ = [
    "CONSUMER_CRD",
    "CONSUMER_NODESUBNET",
    "RELEASE_IDLE_REFUSED",
    "Consumer",
    "NodeNetworkConfigSettings",
    "parse_options",
]

Consumer = Literal["crd", "nodesubnet"]
CONSUMER_CRD: Consumer = "crd"
CONSUMER_NODESUBNET: Consumer = "nodesubnet"
Release = Literal["never"]
RELEASE_IDLE_REFUSED = (
    "release: idle is refused: Azure CNS NodeSubnet has no release handshake, so nodewright "
    "cannot know which addresses CNS has Assigned (a pod's IP is reported after CNS hands it "
    "out) nor stop CNS handing out one it is removing; an update that drops an Assigned IP is "
    "refused and the other IPs it dropped stay Available in CNS for good, though no longer on "
    "the NIC (CNS v1.6.48; docs/ipam.md). Use release: never"
)
"""Why ``release: idle`` fails the config (the reconciler's only scale-down for NodeSubnet)."""


@dataclass(frozen=True)
class NodeNetworkConfigSettings:
    """What the reconciler is configured with (see the module docstring for the YAML keys)."""

    namespace: str = "kube-system"
    node_selector: str = ""
    demand_from_pods: bool = False
    """consumer crd: nodewright writes the spec from pod demand (configured as the node agent);
    off by default, since Azure CNS's pool monitor writes it in CRD mode."""
    consumer: Consumer = CONSUMER_CRD
    release: Release = "never"
    discovery_headroom_ips: int = 0
    scale_down_delay_seconds: float = 60.0
    prefix_blocks: bool = False
    """Experimental: each secondary IP configuration is a /28 block of 16 addresses."""
    scaler: PoolScaler = field(default_factory=PoolScaler)
    leak_grace_period_seconds: float = DEFAULT_LEAK_GRACE_SECONDS
    resync_period_seconds: float = 600.0
    """A pass per node at least this often (+-10 % jitter); drift comes in through the NIC watcher."""
    nic_list_period_seconds: float = 60.0
    """The NIC watcher lists every scope (scale set, resource group) once per period."""
    nic_list_reads_per_second: float = 1.0
    """At most this many list pages a second on average (4 % of ARM's 25/s read refill)."""
    nic_refresh_seconds: float = 150.0
    """A pass that changes nothing uses a NIC snapshot (from a list or a read) younger than this."""
    subnet_check_interval_seconds: float = 30.0
    release_settle_seconds: float = 2.0
    backoff_base_seconds: float = DEFAULT_BACKOFF_BASE_SECONDS
    backoff_cap_seconds: float = DEFAULT_BACKOFF_CAP_SECONDS
    scale_set_boot_pool: bool = True
    """Keep each Uniform scale set's model (upgrade policy Manual) carrying its nodes' usual
    pool, so a new instance boots with its IPs (``boot_pools``; off with ``prefixBlocks``)."""
    heir_pairing_wait_seconds: float = 60.0
    """With the node-image reconciler beside it: the longest a new Node the rollout created waits
    to be paired before its first sizing (``heirs``); 0 sizes it at once."""

    @property
    def nodesubnet(self) -> bool:
        return self.consumer == CONSUMER_NODESUBNET

    @property
    def computes_demand(self) -> bool:
        """Whether nodewright writes the spec from pod demand (else the node agent does)."""
        return self.nodesubnet or self.demand_from_pods


_SECONDS = {
    "leakGracePeriodSeconds": "leak_grace_period_seconds",
    "resyncPeriodSeconds": "resync_period_seconds",
    "nicRefreshSeconds": "nic_refresh_seconds",
    "nicListPeriodSeconds": "nic_list_period_seconds",
    "nicListReadsPerSecond": "nic_list_reads_per_second",
    "subnetCheckIntervalSeconds": "subnet_check_interval_seconds",
    "releaseSettleSeconds": "release_settle_seconds",
    "backoffBaseSeconds": "backoff_base_seconds",
    "backoffCapSeconds": "backoff_cap_seconds",
    "scaleDownDelaySeconds": "scale_down_delay_seconds",
    "heirPairingWaitSeconds": "heir_pairing_wait_seconds",
}
_CHOICES: dict[str, tuple[str, tuple[str, ...]]] = {
    "consumer": ("consumer", ("crd", "nodesubnet")),
    "release": ("release", ("never",)),
}
_SCALER = {
    "batchSize": "batch_size",
    "requestThresholdPercent": "request_threshold_percent",
    "releaseThresholdPercent": "release_threshold_percent",
    "maxIPCount": "max_ip_count",
}
_BOOLS = {
    "demandFromPods": "demand_from_pods",
    "prefixBlocks": "prefix_blocks",
    "scaleSetBootPool": "scale_set_boot_pool",
}
_KNOWN = {
    "namespace",
    "nodeSelector",
    "scaler",
    "cloud",
    "discoveryHeadroomIPs",
    *_BOOLS,
    *_SECONDS,
    *_CHOICES,
}
_SELECTOR_TERM = re.compile(
    r"^\s*!?[A-Za-z0-9]([-A-Za-z0-9_./]*[A-Za-z0-9])?\s*"
    r"((=|==|!=)\s*[A-Za-z0-9]?([-A-Za-z0-9_.]*[A-Za-z0-9])?"
    r"|\s(in|notin)\s*\(\s*[-A-Za-z0-9_., ]*\))?\s*$"
)


def _label_selector(value: str, path: str) -> str:
    """A label selector the API server can parse (equality and set terms), or ConfigError: a
    selector it rejects would leave the reconciler listing nothing, silently."""
    terms = re.split(r",(?![^()]*\))", value) if value.strip() else []
    for term in terms:
        if not _SELECTOR_TERM.match(term):
            raise ConfigError(f"{path}: not a label selector the API server accepts: {term.strip()!r}")
    try:  # keys and values no label can hold (too long, not ASCII) would match no node
        label_selector_matcher(value)
    except ValueError as error:
        raise ConfigError(f"{path}: {error}") from None
    return value


def _number(value: Any, path: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ConfigError(f"{path}: expected a number of seconds, got {value!r}")
    if value < 0:
        raise ConfigError(f"{path}: must not be negative, got {value!r}")
    return float(value)


def _string(value: Any, path: str) -> str:
    if not isinstance(value, str):
        raise ConfigError(f"{path}: expected a string, got {value!r}")
    return value


def _scaler(block: Any, path: str) -> PoolScaler:
    if not isinstance(block, Mapping):
        raise ConfigError(f"{path}: expected a mapping")
    values: dict[str, int] = {}
    for key, value in block.items():
        if key not in _SCALER:
            raise ConfigError(f"{path}.{key}: unknown key (known: {', '.join(sorted(_SCALER))})")
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(f"{path}.{key}: expected an integer, got {value!r}")
        values[_SCALER[key]] = value
    defaults = PoolScaler()
    batch = values.get("batch_size", defaults.batch_size)
    maximum = values.get("max_ip_count", defaults.max_ip_count)
    if batch < 1:
        raise ConfigError(f"{path}.batchSize: must be at least 1, got {batch}")
    if maximum < 1:
        raise ConfigError(f"{path}.maxIPCount: must be at least 1, got {maximum}")
    for key in ("request_threshold_percent", "release_threshold_percent"):
        if values.get(key, 0) < 0:
            raise ConfigError(
                f"{path}.{next(k for k, v in _SCALER.items() if v == key)}: must not be negative"
            )
    return PoolScaler.normalized(
        batch_size=batch,
        request_threshold_percent=values.get("request_threshold_percent", defaults.request_threshold_percent),
        max_ip_count=maximum,
        release_threshold_percent=values.get("release_threshold_percent", defaults.release_threshold_percent),
    )


def parse_options(options: Mapping[str, Any], path: str = "options") -> NodeNetworkConfigSettings:
    """The settings from a reconciler's ``options`` mapping (the ``cloud`` block is read elsewhere)."""
    if not isinstance(options, Mapping):
        raise ConfigError(f"{path}: expected a mapping")
    for key in options:
        if key not in _KNOWN:
            raise ConfigError(f"{path}.{key}: unknown key (known: {', '.join(sorted(_KNOWN))})")
    values: dict[str, Any] = {}
    if "namespace" in options:
        values["namespace"] = _string(options["namespace"], f"{path}.namespace")
        if not values["namespace"]:
            raise ConfigError(f"{path}.namespace: must not be empty")
    if "nodeSelector" in options:
        values["node_selector"] = _label_selector(
            _string(options["nodeSelector"], f"{path}.nodeSelector"), f"{path}.nodeSelector"
        )
    for key, name in _BOOLS.items():
        if key in options:
            if not isinstance(options[key], bool):
                raise ConfigError(f"{path}.{key}: expected true or false, got {options[key]!r}")
            values[name] = options[key]
    if "scaler" in options:
        values["scaler"] = _scaler(options["scaler"], f"{path}.scaler")
    for key, name in _SECONDS.items():
        if key in options:
            values[name] = _number(options[key], f"{path}.{key}")
    if options.get("release") == "idle":
        raise ConfigError(f"{path}.{RELEASE_IDLE_REFUSED}")
    for key, (name, allowed) in _CHOICES.items():
        if key in options:
            if options[key] not in allowed:
                raise ConfigError(f"{path}.{key}: expected one of {', '.join(allowed)}, got {options[key]!r}")
            values[name] = options[key]
    if "discoveryHeadroomIPs" in options:
        headroom = options["discoveryHeadroomIPs"]
        if isinstance(headroom, bool) or not isinstance(headroom, int) or headroom < 0:
            raise ConfigError(
                f"{path}.discoveryHeadroomIPs: expected a non-negative integer, got {headroom!r}"
            )
        values["discovery_headroom_ips"] = headroom
    settings = NodeNetworkConfigSettings(**values)
    if settings.prefix_blocks and not settings.nodesubnet:
        raise ConfigError(f"{path}.prefixBlocks: needs consumer nodesubnet")
    for key, value in (
        ("nicListPeriodSeconds", settings.nic_list_period_seconds),
        ("nicListReadsPerSecond", settings.nic_list_reads_per_second),
    ):
        if value <= 0:
            raise ConfigError(f"{path}.{key}: must be above 0, got {value!r}")
    if settings.backoff_cap_seconds < settings.backoff_base_seconds:
        raise ConfigError(f"{path}.backoffCapSeconds: must be at least backoffBaseSeconds")
    return settings
