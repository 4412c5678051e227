"""How reconcilers reach Azure: each manager's clouds, one ``Cloud`` per ``options.cloud`` block.

Owns ``ManagerClouds``, the clouds of one manager (``clouds_of(manager)``, kept in its
``manager.services`` under ``CLOUDS``): reconcilers of that manager configured with the same
settings get the same ``Cloud``, so they share one Retry-After gate and one mutation token bucket,
and all its clouds draw on one ARM request budget per subscription and principal. Every ARM call
of a manager's clouds is counted in that manager's metrics (``nodewright_azure_calls_total``,
``nodewright_azure_requests_total``, ``nodewright_azure_call_duration_seconds``), as is the ARM
request budget (``nodewright_arm_ratelimit_remaining{subscription,class}``,
``nodewright_arm_throttled_total{class,code}``); every mutating ARM request passes that manager's
leadership fence (``manager.fence.guard("arm")``: a refused request is never sent); and every ARM
request is a span of the runtime's tracer while spans are recorded (``cloud.tracing``). Two
managers in one process share none of it.

Owns the YAML shape of that block (camelCase, strict: unknown keys and wrong types fail with
one line naming the key) and the OpenTelemetry observer. Composition-root code: it may import
runtime and cloud alike.

Example (a YAML anchor lets several reconcilers share one block)::

    cloud: &cloud
      subscriptionId: 00000000-0000-0000-0000-000000000000
      credential: {kind: workload-identity}
      mutationQps: 10
      mutationBurst: 5
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Callable, Mapping
from typing import Any

import requests
from azure.core.pipeline.transport import RequestsTransport
from opentelemetry.trace import Tracer
from urllib3.util.retry import Retry

from nodewright.cloud.budget import ArmBudgets
from nodewright.cloud.config import CloudSettings, CredentialKind, CredentialSettings
from nodewright.cloud.factory import Cloud, build_cloud
from nodewright.cloud.throttle import CallEvent, CallObserver
from nodewright.runtime import ConfigError, Manager, Metrics, ServiceKey, guard_session, tracing

__all__ = [
    "CLOUDS",
    "ManagerClouds",
    "MetricsBudgetObserver",
    "MetricsCallObserver",
    "cloud_block",
    "clouds_of",
    "guarded_transport",
    "parse_cloud_settings",
    "settings_as_options",
]


def _cloud_tracer() -> Tracer | None:
    """The runtime's tracer for ARM spans, or None while no span processor is attached."""
    return tracing.tracer("nodewright.cloud") if tracing.recording() else None


_SETTINGS_FIELDS = {
    "subscriptionId": ("subscription_id", str),
    "armEndpoint": ("arm_endpoint", str),
    "credentialScope": ("credential_scope", str),
    "retryTotal": ("retry_total", int),
    "retryBackoffFactor": ("retry_backoff_factor", float),
    "retryBackoffMax": ("retry_backoff_max", float),
    "pollingInterval": ("polling_interval", float),
    "caBundle": ("ca_bundle", str),
    "mutationQps": ("mutation_qps", float),
    "mutationBurst": ("mutation_burst", int),
    "pacingMaxWaitSeconds": ("pacing_max_wait_seconds", float),
    "connectionTimeout": ("connection_timeout", float),
    "readTimeout": ("read_timeout", float),
    "budgetReserveFraction": ("budget_reserve_fraction", float),
    "backoffInitialSeconds": ("backoff_initial_seconds", float),
    "backoffMaxSeconds": ("backoff_max_seconds", float),
    "terminalBackoffInitialSeconds": ("terminal_backoff_initial_seconds", float),
    "terminalBackoffMaxSeconds": ("terminal_backoff_max_seconds", float),
    "httpLogging": ("http_logging", bool),
}
_CREDENTIAL_FIELDS = {
    "clientId": ("client_id", str),
    "tenantId": ("tenant_id", str),
    "tokenFile": ("token_file", str),
    "staticToken": ("static_token", str),
}


def _typed(value: Any, expected: type, path: str) -> Any:
    if expected is float and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if expected is bool and isinstance(value, bool):
        return value
    if isinstance(value, bool) or not isinstance(value, expected):
        raise ConfigError(f"{path}: expected {expected.__name__}, got {value!r}")
    return value


def _fields(block: Mapping[str, Any], table: Mapping[str, tuple[str, type]], path: str) -> dict[str, Any]:
    values: dict[str, Any] = {}
    for key, value in block.items():
        if key not in table:
            raise ConfigError(f"{path}.{key}: unknown key (known: {', '.join(sorted(table))})")
        name, expected = table[key]
        values[name] = _typed(value, expected, f"{path}.{key}")
    return values


def cloud_block(value: Any, path: str) -> Mapping[str, Any]:
    """A reconciler's ``cloud`` option kept as given, once it is a mapping (its keys are checked
    by ``parse_cloud_settings`` when the reconciler reaches Azure); ConfigError otherwise."""
    if not isinstance(value, Mapping):
        raise ConfigError(f"{path}: expected a mapping")
    return value


def parse_cloud_settings(block: Any, path: str = "cloud") -> CloudSettings:
    """The ``cloud`` options block as ``CloudSettings``; ConfigError names the bad key."""
    if not isinstance(block, Mapping):
        raise ConfigError(f"{path}: expected a mapping with at least subscriptionId")
    credential_block = block.get("credential", {})
    if not isinstance(credential_block, Mapping):
        raise ConfigError(f"{path}.credential: expected a mapping")
    credential_values = _fields(
        {k: v for k, v in credential_block.items() if k != "kind"}, _CREDENTIAL_FIELDS, f"{path}.credential"
    )
    kind_name = credential_block.get("kind", CredentialKind.DEFAULT.value)
    try:
        kind = CredentialKind(kind_name)
    except ValueError:
        allowed = ", ".join(k.value for k in CredentialKind)
        raise ConfigError(f"{path}.credential.kind: expected one of {allowed}, got {kind_name!r}") from None
    values = _fields({k: v for k, v in block.items() if k != "credential"}, _SETTINGS_FIELDS, path)
    if "subscription_id" not in values:
        raise ConfigError(f"{path}.subscriptionId: is required")
    try:
        return CloudSettings(credential=CredentialSettings(kind=kind, **credential_values), **values)
    except ValueError as error:
        raise ConfigError(f"{path}: {error}") from None


class MetricsCallObserver:
    """Counts cloud calls and HTTP attempts in a manager's OpenTelemetry metrics."""

    def __init__(self, metrics: Metrics) -> None:
        meter = metrics.provider.get_meter("nodewright.cloud")
        self._calls = meter.create_counter(
            "nodewright_azure_calls_total", description="Cloud-layer operations by operation and outcome"
        )
        self._requests = meter.create_counter(
            "nodewright_azure_requests_total", description="HTTP attempts to ARM (retries included)"
        )
        self._durations = meter.create_histogram(
            "nodewright_azure_call_duration_seconds", description="Cloud-layer operation duration"
        )

    def record(self, event: CallEvent) -> None:
        attributes = {"operation": event.operation, "outcome": event.outcome}
        if event.kind == "request":
            self._requests.add(1, attributes)
        else:
            self._calls.add(1, attributes)
            self._durations.record(event.duration_seconds, {"operation": event.operation})


class MetricsBudgetObserver:
    """Reports the ARM request budget in a manager's OpenTelemetry metrics."""

    def __init__(self, metrics: Metrics) -> None:
        meter = metrics.provider.get_meter("nodewright.cloud")
        self._remaining = meter.create_gauge(
            "nodewright_arm_ratelimit_remaining",
            description="Requests ARM says are left in the subscription's bucket, by class",
        )
        self._throttled = meter.create_counter(
            "nodewright_arm_throttled_total", description="429 answers from ARM by class and error code"
        )

    def remaining(self, subscription: str, request_class: str, value: int) -> None:
        self._remaining.set(value, {"subscription": subscription, "class": request_class})

    def throttled(self, request_class: str, code: str) -> None:
        self._throttled.add(1, {"class": request_class, "code": code})


_TRANSPORT_OPTIONS = ("connection_verify", "connection_timeout", "read_timeout")


def guarded_transport(settings: CloudSettings, write_guard: Callable[[str], None]) -> RequestsTransport:
    """An azure-core transport whose connections ask ``write_guard`` again right before the
    bytes of a mutating request reach the socket (the last-moment check of ``runtime.fence``)."""
    session = requests.Session()
    adapter = requests.adapters.HTTPAdapter(
        max_retries=Retry(total=False, redirect=False, raise_on_status=False)
    )
    for prefix in ("https://", "http://"):
        session.mount(prefix, adapter)
    guard_session(session, write_guard)
    options = {key: value for key, value in settings.client_options().items() if key in _TRANSPORT_OPTIONS}
    return RequestsTransport(session=session, session_owner=False, **options)


class ManagerClouds:
    """The clouds of one manager: one ``Cloud`` per ``CloudSettings``, built on first use, whose
    ARM writes pass ``write_guard`` and whose calls are counted in ``metrics``. Thread-safe."""

    def __init__(self, metrics: Metrics, write_guard: Callable[[str], None]) -> None:
        self.metrics = metrics
        self.write_guard = write_guard
        """Asked before every mutating ARM request of these clouds; refuses by raising."""
        self._budgets = ArmBudgets()
        self._lock = threading.Lock()
        self._clouds: dict[CloudSettings, Cloud] = {}

    def cloud(self, settings: CloudSettings, observer: CallObserver | None = None) -> Cloud:
        """The manager's one ``Cloud`` for ``settings`` (``observer`` applies on first use only)."""
        with self._lock:
            cloud = self._clouds.get(settings)
            if cloud is None:
                cloud = build_cloud(
                    settings,
                    observer=observer or MetricsCallObserver(self.metrics),
                    write_guard=self.write_guard,
                    transport=guarded_transport(settings, self.write_guard),
                    budget_observer=MetricsBudgetObserver(self.metrics),
                    budgets=self._budgets,
                    tracer=_cloud_tracer,
                )
                self._clouds[settings] = cloud
            return cloud

    def from_options(self, options: Mapping[str, Any]) -> Cloud:
        """The Cloud for a reconciler's ``options`` (its ``cloud`` block)."""
        return self.cloud(parse_cloud_settings(options.get("cloud"), "options.cloud"))


def _manager_clouds(manager: Manager) -> ManagerClouds:
    return ManagerClouds(manager.metrics, manager.fence.guard("arm"))


CLOUDS: ServiceKey[ManagerClouds] = ServiceKey("clouds", _manager_clouds)
"""A manager's clouds: its metrics and its leadership fence for ARM writes."""


def clouds_of(manager: Manager) -> ManagerClouds:
    """The clouds of ``manager`` (what a plug-in's ``setup`` reaches Azure through)."""
    return manager.services.get(CLOUDS)


def settings_as_options(settings: CloudSettings) -> dict[str, Any]:
    """The inverse of ``parse_cloud_settings``: an options block for these settings (tests, demo)."""
    by_name = {name: key for key, (name, _) in _SETTINGS_FIELDS.items()}
    block: dict[str, Any] = {
        by_name[f.name]: getattr(settings, f.name)
        for f in dataclasses.fields(settings)
        if f.name in by_name and getattr(settings, f.name) is not None
    }
    credential_by_name = {name: key for key, (name, _) in _CREDENTIAL_FIELDS.items()}
    credential: dict[str, Any] = {"kind": settings.credential.kind.value}
    for f in dataclasses.fields(settings.credential):
        value = getattr(settings.credential, f.name)
        if f.name in credential_by_name and value is not None:
            credential[credential_by_name[f.name]] = value
    block["credential"] = credential
    return block
