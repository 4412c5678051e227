"""The manager's typed configuration, read from YAML.

Owns the ``ManagerConfig`` dataclasses and the strict loader: camelCase keys as in
controller-runtime's ComponentConfig, every field typed and defaulted, and any unknown key, wrong
type or inconsistent value rejected with a ``ConfigError`` whose message is one line naming the
file, the key path and what was expected (``config.yaml: leaderElection.leaseDuration:
expected a number, got 'abc'``). The manager and the CLI are its readers; nothing here does
I/O except ``load_config`` reading the file.

Example::

    metrics: {bindAddress: ":8443", secure: true, certDir: ""}
    health: {bindAddress: ":8081", stuckWorkerDeadline: 600}
    leaderElection: {enabled: true, namespace: kube-system, name: nodewright,
                     leaseDuration: 15, renewDeadline: 10, retryPeriod: 2,
                     writeFenceMargin: 2}
    logging: {level: info, format: json}
    cache: {compressedKinds: [Pod]}
    cacheSyncTimeout: 120
    gracefulShutdownTimeout: 30
    reconcilers:
      nodeimage: {enabled: true, maxConcurrentReconciles: 4, options: {...}}
      mine: {module: my_package.my_reconciler}
"""

from __future__ import annotations

import dataclasses
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import yaml

__all__ = [
    "CacheConfig",
    "ConfigError",
    "HealthConfig",
    "LeaderElectionConfig",
    "LoggingConfig",
    "ManagerConfig",
    "MetricsConfig",
    "ReconcilerConfig",
    "load_config",
    "parse_config",
]


class ConfigError(ValueError):
    """A configuration problem, described in one line naming the file and the key."""


@dataclass(frozen=True, slots=True)
class MetricsConfig:
    bind_address: str = ":8443"
    """Where ``/metrics`` is served; "0" turns the server off. Every interface by default: in a
    pod, Prometheus scrapes through the metrics Service, which reaches the pod's IP."""
    secure: bool = True
    """HTTPS, with each request's bearer token checked by TokenReview and SubjectAccessReview
    (``get`` on the non-resource URL /metrics). False serves plain HTTP to anyone."""
    cert_dir: str = ""
    """Directory holding ``tls.crt`` and ``tls.key`` (a mounted Secret); empty means a
    self-signed certificate made at start."""


@dataclass(frozen=True, slots=True)
class HealthConfig:
    bind_address: str = ":8081"
    """Where ``/healthz`` and ``/readyz`` are served over plain HTTP; "0" turns the server off.
    Every interface by default: the kubelet probes the pod's IP. The probes reveal only
    check names and pass/fail."""
    stuck_worker_deadline: float = 600.0
    """Seconds one reconcile may run before ``/healthz`` reports the controller's workers stuck
    (the kubelet then restarts the pod); 0 turns the check off."""


@dataclass(frozen=True, slots=True)
class LeaderElectionConfig:
    enabled: bool = True
    namespace: str = "default"
    name: str = "nodewright-leader"
    identity: str = ""
    """This candidate's name in the Lease; empty means the pod's name from ``$POD_NAME`` (set by
    config/manager from the downward API; the server-side fence needs it), else the hostname plus
    a random suffix."""
    lease_duration: float = 15.0
    renew_deadline: float = 10.0
    retry_period: float = 2.0
    write_fence_margin: float | None = None
    """Writes are refused once the last renew is older than renewDeadline minus this. Unset:
    2 s, or half of renewDeadline - retryPeriod when that is smaller (short test leases)."""

    @property
    def effective_write_fence_margin(self) -> float:
        if self.write_fence_margin is not None:
            return self.write_fence_margin
        return min(2.0, (self.renew_deadline - self.retry_period) / 2)


@dataclass(frozen=True, slots=True)
class LoggingConfig:
    level: Literal["debug", "info", "warning", "error"] = "info"
    format: Literal["json", "text"] = "json"


@dataclass(frozen=True, slots=True)
class CacheConfig:
    compressed_kinds: list[str] = field(default_factory=list)
    """Kinds (such as ``Pod``) whose informers keep objects zstd-compressed: a fraction of the
    memory for a decode on every read. Worth it for numerous, rarely read kinds."""


@dataclass(frozen=True, slots=True)
class ReconcilerConfig:
    enabled: bool = True
    module: str = ""
    """Dotted module path (or ``module:attribute``) of the reconciler's ``setup``; empty means
    look the name up in the registry, then in the ``nodewright.reconcilers`` entry points."""
    max_concurrent_reconciles: int | None = None
    """Worker threads; unset keeps what the reconciler's code asks for (default 1)."""
    options: dict[str, Any] = field(default_factory=dict)
    """Free-form options handed to the reconciler's ``setup``."""


@dataclass(frozen=True, slots=True)
class ManagerConfig:
    metrics: MetricsConfig = field(default_factory=MetricsConfig)
    health: HealthConfig = field(default_factory=HealthConfig)
    leader_election: LeaderElectionConfig = field(default_factory=LeaderElectionConfig)
    logging: LoggingConfig = field(default_factory=LoggingConfig)
    cache: CacheConfig = field(default_factory=CacheConfig)
    cache_sync_timeout: float = 120.0
    graceful_shutdown_timeout: float = 30.0
    reconcilers: dict[str, ReconcilerConfig] = field(default_factory=dict)


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(part.title() for part in rest)


def _type_name(expected: Any) -> str:
    if expected is bool:
        return "a boolean"
    if expected is int:
        return "an integer"
    if expected is float:
        return "a number"
    if expected is str:
        return "a string"
    origin = typing.get_origin(expected)
    if origin is Literal:
        return "one of " + ", ".join(repr(v) for v in typing.get_args(expected))
    if origin is list:
        return "a list"
    return "a mapping"


def _convert(value: Any, expected: Any, path: str) -> Any:
    origin = typing.get_origin(expected)
    if origin in (types.UnionType, typing.Union):  # only "X | None" is used
        if value is None:
            return None
        (inner,) = [arg for arg in typing.get_args(expected) if arg is not type(None)]
        return _convert(value, inner, path)
    if dataclasses.is_dataclass(expected) and isinstance(expected, type):
        return _build(expected, value, path)
    if origin is dict:
        _, value_type = typing.get_args(expected)
        if not isinstance(value, dict):
            raise _wrong(path, "a mapping", value)
        if value_type is Any:
            return dict(value)
        return {str(key): _convert(item, value_type, f"{path}.{key}") for key, item in value.items()}
    if origin is list:
        (item_type,) = typing.get_args(expected)
        if not isinstance(value, list):
            raise _wrong(path, "a list", value)
        return [_convert(item, item_type, f"{path}[{index}]") for index, item in enumerate(value)]
    if origin is Literal:
        if value not in typing.get_args(expected):
            raise _wrong(path, _type_name(expected), value)
        return value
    if expected is float:
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise _wrong(path, "a number", value)
        return float(value)
    if expected is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise _wrong(path, "an integer", value)
        return value
    if expected is bool or expected is str:
        if not isinstance(value, expected):
            raise _wrong(path, _type_name(expected), value)
        return value
    raise TypeError(f"unsupported config type {expected!r} at {path}")  # a bug in this module


def _wrong(path: str, expected: str, value: Any) -> ConfigError:
    shown = "null" if value is None else repr(value)
    return ConfigError(f"{path}: expected {expected}, got {shown}")


def _build(cls: type[Any], data: Any, path: str) -> Any:
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise _wrong(path or "(top level)", "a mapping", data)
    hints = typing.get_type_hints(cls)
    by_key = {_camel(f.name): f for f in dataclasses.fields(cls)}
    values: dict[str, Any] = {}
    for key, value in data.items():
        key_path = f"{path}.{key}" if path else str(key)
        if key not in by_key:
            allowed = ", ".join(sorted(by_key))
            raise ConfigError(f"{key_path}: unknown key (expected one of: {allowed})")
        dataclass_field = by_key[key]
        values[dataclass_field.name] = _convert(value, hints[dataclass_field.name], key_path)
    return cls(**values)


def _validate(config: ManagerConfig) -> None:
    election = config.leader_election
    for name in ("lease_duration", "renew_deadline", "retry_period"):
        if getattr(election, name) <= 0:
            raise ConfigError(f"leaderElection.{_camel(name)}: expected a positive number of seconds")
    if not election.lease_duration > election.renew_deadline:
        raise ConfigError("leaderElection.leaseDuration: must be greater than renewDeadline")
    if not election.renew_deadline > 1.2 * election.retry_period:
        raise ConfigError("leaderElection.renewDeadline: must be greater than 1.2 x retryPeriod")
    if not 0 <= election.effective_write_fence_margin < election.renew_deadline - election.retry_period:
        raise ConfigError(
            "leaderElection.writeFenceMargin: must be at least 0 and less than renewDeadline - retryPeriod"
        )
    if config.health.stuck_worker_deadline < 0:
        raise ConfigError("health.stuckWorkerDeadline: expected a non-negative number of seconds")
    for name in ("cache_sync_timeout", "graceful_shutdown_timeout"):
        if getattr(config, name) < 0:
            raise ConfigError(f"{_camel(name)}: expected a non-negative number of seconds")
    for name, reconciler in config.reconcilers.items():
        count = reconciler.max_concurrent_reconciles
        if count is not None and count < 1:
            raise ConfigError(f"reconcilers.{name}.maxConcurrentReconciles: expected at least 1")
    for section in ("metrics", "health"):
        address: str = getattr(config, section).bind_address
        if address != "0" and not address.rpartition(":")[2].isdigit():
            raise ConfigError(f"{section}.bindAddress: expected 'host:port', ':port' or '0', got {address!r}")


def parse_config(data: Any, source: str = "<config>") -> ManagerConfig:
    """Build and validate a ``ManagerConfig`` from parsed YAML; errors name ``source``."""
    try:
        config: ManagerConfig = _build(ManagerConfig, data, "")
        _validate(config)
    except ConfigError as error:
        raise ConfigError(f"{source}: {error}") from None
    return config


def load_config(path: str | Path) -> ManagerConfig:
    """Read and validate a YAML config file (raises ``ConfigError`` with one line)."""
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as error:
        raise ConfigError(f"{path}: cannot read: {error.strerror or error}") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        problem = getattr(error, "problem", None) or "parse error"
        raise ConfigError(f"{path}: invalid YAML{where}: {problem}") from None
    return parse_config(data, str(path))
