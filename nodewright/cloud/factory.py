"""The one place where Azure SDK clients are built.

``build_clients`` turns ``CloudSettings`` into a ``ComputeManagementClient``, a
``NetworkManagementClient`` and a ``ManagedServiceIdentityClient`` that share one credential,
one mutation token bucket, one call observer and one ARM request budget for the subscription and
principal, taken from the ``budgets`` they are given (``budget.ArmBudgets``: a manager hands all
its clouds one; without it a cloud has budgets of its own); each client gets its own Retry-After
gate. The throttling and counting policies go right after azure-core's ``RetryPolicy`` so they
see every attempt, behind a span per attempt of the ``tracer`` they are given
(``tracing.ArmSpanPolicy``; none without it). ``build_cloud`` wraps the
clients in the services the rest of nodewright uses (``ComputeService``, ``NetworkService``,
``IdentityService``), sharing one per-target backoff and one ``OperationTracker`` (the
long-running operations of their ``begin_`` calls, polled at ``polling_interval`` or ARM's
``Retry-After``).

Side effects: the SDK models' first-use setup is guarded across threads (``sdk_models``);
azure-core's per-request HTTP logger is set to WARNING unless
``settings.http_logging`` is on (then INFO): at INFO it is most of a manager's log at idle.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from azure.core.credentials import TokenCredential
from azure.core.pipeline.policies import RetryPolicy
from azure.mgmt.compute import ComputeManagementClient
from azure.mgmt.msi import ManagedServiceIdentityClient
from azure.mgmt.network import NetworkManagementClient

from nodewright.cloud.backoff import TargetBackoff
from nodewright.cloud.budget import ArmBudget, ArmBudgetPolicy, ArmBudgets, BudgetObserver
from nodewright.cloud.compute import ComputeService
from nodewright.cloud.config import CloudSettings, build_credential
from nodewright.cloud.msi import IdentityService
from nodewright.cloud.network import NetworkService
from nodewright.cloud.operations import OperationTracker
from nodewright.cloud.sdk_models import guard_model_setup
from nodewright.cloud.standalone_machines import StandaloneMachineService
from nodewright.cloud.throttle import (
    CallObserver,
    MutationRateLimitPolicy,
    NullObserver,
    RequestCountingPolicy,
    RetryAfterGate,
    RetryAfterGatePolicy,
    TokenBucket,
)
from nodewright.cloud.tracing import ArmSpanPolicy, TracerSource, no_tracer
from nodewright.cloud.write_guard import WriteGuard, WriteGuardPolicy


class ReadRetryPolicy(RetryPolicy[Any, Any]):
    """azure-core's ``RetryPolicy`` that resends only reads (GET, HEAD, OPTIONS) after a transport
    failure. A write (PUT, PATCH, POST, DELETE) is never resent by the SDK: it was built from what
    its caller read, and a resend after a timeout or a backoff would carry that plan late. Its
    failure goes back to the caller's work queue, which reads and decides again. (Status retries
    are off, ``retry_status=0``, unless a caller turns them on.)"""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._method_whitelist = frozenset({"GET", "HEAD", "OPTIONS"})


def _retry_policy(options: dict[str, Any]) -> RetryPolicy[Any, Any]:
    """The retry policy every client gets, from the ``retry_*`` client options."""
    return ReadRetryPolicy(**{key: value for key, value in options.items() if key.startswith("retry_")})


@dataclass
class CloudClients:
    """The SDK clients and the throttling state they share."""

    settings: CloudSettings
    credential: TokenCredential
    compute: ComputeManagementClient
    network: NetworkManagementClient
    msi: ManagedServiceIdentityClient
    observer: CallObserver
    mutation_bucket: TokenBucket
    compute_gate: RetryAfterGate
    network_gate: RetryAfterGate
    msi_gate: RetryAfterGate
    budget: ArmBudget

    def close(self) -> None:
        """Close the clients' HTTP sessions."""
        self.compute.close()
        self.network.close()
        self.msi.close()  # type: ignore[no-untyped-call]


@dataclass
class Cloud:
    """The services built on the clients: what controllers receive."""

    clients: CloudClients
    compute: ComputeService
    network: NetworkService
    identities: IdentityService
    standalone: StandaloneMachineService
    operations: OperationTracker

    def close(self) -> None:
        self.operations.close()
        self.clients.close()


HTTP_LOGGER = "azure.core.pipeline.policies.http_logging_policy"


def principal_of(settings: CloudSettings) -> str:
    """Who spends the budget: the credential's client ID, else its kind (one per process)."""
    return settings.credential.client_id or settings.credential.kind.value


def _policies(
    gate: RetryAfterGate,
    bucket: MutationRateLimitPolicy,
    observer: CallObserver,
    budget: ArmBudgetPolicy,
    tracer: TracerSource,
) -> list[Any]:
    # The token first, the Retry-After gate and the budget last: a write that waited for a token
    # must still check them, or a 429 that arrived during the wait would not hold it back.
    return [
        ArmSpanPolicy(tracer),  # first: a span covers the waits below too
        bucket,
        RetryAfterGatePolicy(gate),
        budget,
        RequestCountingPolicy(observer),
    ]


def _budget_for(settings: CloudSettings, budgets: ArmBudgets, observer: BudgetObserver | None) -> ArmBudget:
    """The ARM request budget in ``budgets`` of this endpoint, subscription and principal."""
    budget = budgets.get(
        settings.endpoint,
        settings.subscription_id,
        principal_of(settings),
        reserve_fraction=settings.budget_reserve_fraction,
        observer=observer,
    )
    if observer is not None:
        budget.observer = observer
    return budget


def build_clients(
    settings: CloudSettings,
    *,
    credential: TokenCredential | None = None,
    observer: CallObserver | None = None,
    mutation_bucket: TokenBucket | None = None,
    write_guard: WriteGuard | None = None,
    budget_observer: BudgetObserver | None = None,
    budgets: ArmBudgets | None = None,
    tracer: TracerSource = no_tracer,
    **client_options: Any,
) -> CloudClients:
    """Build the three SDK clients (no network traffic until the first call).

    ``credential`` overrides the one ``settings.credential`` describes; ``client_options`` are
    extra azure-core keyword arguments (for example a ``transport``). ``write_guard`` is asked
    before every mutating attempt, after the throttling policies (``write_guard.py``). ``budgets``
    holds the request budget the clients draw on (shared with every cloud built with the same
    ``budgets``); ``tracer`` returns the tracer each attempt's span goes to (None: no span).
    """
    guard_model_setup()  # before any thread builds an SDK model (sdk_models.py)
    credential = credential if credential is not None else build_credential(settings.credential)
    observer = observer if observer is not None else NullObserver()
    bucket = mutation_bucket or TokenBucket(settings.mutation_qps, settings.mutation_burst)
    options = {**settings.client_options(), **client_options}
    gates = [RetryAfterGate() for _ in range(3)]
    logging.getLogger(HTTP_LOGGER).setLevel(logging.INFO if settings.http_logging else logging.WARNING)
    budget = _budget_for(settings, budgets if budgets is not None else ArmBudgets(), budget_observer)
    rate_policy = MutationRateLimitPolicy(bucket, max_wait_seconds=settings.pacing_max_wait_seconds)
    guarded = [WriteGuardPolicy(write_guard)] if write_guard is not None else []

    def client_options_with(gate: RetryAfterGate) -> dict[str, Any]:
        # One budget and one retry policy per client (they share the budget): a pipeline links
        # its policies through their ``next``, so an instance in two pipelines would send one
        # client's requests through the other's later policies.
        budget_policy = ArmBudgetPolicy(budget, max_wait_seconds=settings.pacing_max_wait_seconds)
        policies = _policies(gate, rate_policy, observer, budget_policy, tracer) + guarded
        retry = {"retry_policy": _retry_policy(options)} if "retry_policy" not in options else {}
        return {"base_url": settings.endpoint, "per_retry_policies": policies, **retry, **options}

    subscription = settings.subscription_id
    compute = ComputeManagementClient(credential, subscription, **client_options_with(gates[0]))
    network = NetworkManagementClient(credential, subscription, **client_options_with(gates[1]))
    msi = ManagedServiceIdentityClient(credential, subscription, **client_options_with(gates[2]))
    return CloudClients(
        settings=settings,
        credential=credential,
        compute=compute,
        network=network,
        msi=msi,
        observer=observer,
        mutation_bucket=bucket,
        compute_gate=gates[0],
        network_gate=gates[1],
        msi_gate=gates[2],
        budget=budget,
    )


def build_cloud(settings: CloudSettings, **options: Any) -> Cloud:
    """Build the clients and the services over them; ``options`` are ``build_clients``'s keyword
    arguments (``credential``, ``observer``, ``mutation_bucket``, ``write_guard``,
    ``budget_observer``, ``budgets``, ``tracer`` and azure-core client options)."""
    clients = build_clients(settings, **options)
    budget = clients.budget
    backoff = TargetBackoff(
        initial_seconds=settings.backoff_initial_seconds,
        max_seconds=settings.backoff_max_seconds,
        terminal_initial_seconds=settings.terminal_backoff_initial_seconds,
        terminal_max_seconds=settings.terminal_backoff_max_seconds,
        # A throttled write backs its target off for the budget's hold of the writes class.
        class_hold=lambda access: budget.held_for("PUT" if access == "write" else "GET"),
    )
    operations = OperationTracker(interval=settings.polling_interval, observer=clients.observer)
    compute = ComputeService(
        clients.compute,
        observer=clients.observer,
        backoff=backoff,
        polling_interval=settings.polling_interval,
        operations=operations,
        budget=budget,
        pacing_max_wait_seconds=settings.pacing_max_wait_seconds,
        mutation_bucket=clients.mutation_bucket,
    )
    return Cloud(
        clients=clients,
        compute=compute,
        network=NetworkService(
            clients.network,
            compute,
            observer=clients.observer,
            backoff=backoff,
            budget=budget,
            pacing_max_wait_seconds=settings.pacing_max_wait_seconds,
            mutation_bucket=clients.mutation_bucket,
        ),
        identities=IdentityService(clients.msi, observer=clients.observer),
        standalone=StandaloneMachineService(
            clients.compute, clients.network, compute, observer=clients.observer, backoff=backoff
        ),
        operations=operations,
    )
