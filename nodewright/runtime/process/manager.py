"""The manager: one process's lifecycle around a shared cache and its controllers.

Owns ``Manager``. Built from a ``ManagerConfig`` (``config.py``), it creates the API ``Client``
and the shared ``Cache``, hands out controller builders (``controller(name)``) and event
recorders, and sets up the reconcilers the config enables through the registry
(``registry.py``). Whatever its plug-ins use beyond the client and cache is its own too: its
``metrics`` registry, its ``fence`` and its ``services`` (``services.py``); none of it is kept
at module level, so two managers in one process share nothing of it (only the process's span
export, ``tracing.py``).

``run()`` blocks: it serves ``/metrics`` and the health probes, starts the informers and waits
for them to sync (``/readyz`` turns 200), then starts the controllers, only while holding the
Lease when leader election is on. ``stop()`` (or SIGTERM/SIGINT when ``run`` is on the main
thread) stops intake, drains in-flight reconciles for up to the graceful shutdown timeout, and
then releases the Lease so a standby takes over at once.

Leadership is a fence, not a flag. A replica that does not lead is a warm standby: its
informers run and its caches stay synced (``/readyz`` is 200 on leader and standby alike; the
``nodewright_leader`` gauge tells them apart; ``nodewright_informers_stopped`` counts informers that
stopped), but no reconciler runs and no write passes. The
client handed to reconcilers (``manager.client``) is fenced by ``manager.fence`` (``fence.py``),
which the elector opens on every renew; the elector alone writes the Lease, through the
unfenced client. Losing the Lease revokes the fence, cancels every controller at once (no
graceful drain: running reconciles' writes are refused and their results discarded), stops the
manager and makes ``run`` raise ``LeadershipLostError``, so the process exits non-zero and
restarts as a standby, as controller-runtime does. Before it stands for election it checks once
that the server-side fence (``server_fence.py``) is installed and warns if it is not.
"""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Mapping
from types import FrameType
from typing import Any, overload

from opentelemetry.metrics import Observation

from nodewright.runtime.control.builder import Builder
from nodewright.runtime.control.controller import Controller
from nodewright.runtime.control.reconcile import K, Request
from nodewright.runtime.informers.cache import Cache
from nodewright.runtime.kube.client import Client
from nodewright.runtime.kube.events import EventRecorder
from nodewright.runtime.kube.fence import WriteFence
from nodewright.runtime.observe.health import HealthServer, informers_running, workers_not_stuck
from nodewright.runtime.observe.logs import get_logger
from nodewright.runtime.observe.metrics import HttpServer, Metrics
from nodewright.runtime.process.config import ConfigError, ManagerConfig, ReconcilerConfig
from nodewright.runtime.process.leaderelection import LeaderElector
from nodewright.runtime.process.metrics_server import serve_metrics
from nodewright.runtime.process.registry import ReconcilerRegistry
from nodewright.runtime.process.server_fence import check_server_fence
from nodewright.runtime.process.services import Services

__all__ = ["CacheSyncTimeoutError", "LeadershipLostError", "Manager", "ManagerError"]

log = get_logger(__name__)


class ManagerError(RuntimeError):
    """The manager could not run (the message is one line)."""


class CacheSyncTimeoutError(ManagerError):
    """The informers did not sync within the cache sync timeout."""


class LeadershipLostError(ManagerError):
    """The Lease was lost while leading; the process should exit and restart."""


class Manager:
    """Shared cache, controllers, probes, metrics and leader election of one process."""

    def __init__(
        self,
        config: ManagerConfig | None = None,
        client: Client | None = None,
        *,
        kubeconfig: str | None = None,
    ) -> None:
        self.config = config or ManagerConfig()
        if client is None:
            client = Client.from_kubeconfig(kubeconfig) if kubeconfig else Client.from_environment()
        self.metrics = Metrics()
        """This manager's registry: plug-ins make their instruments on ``metrics.provider``."""
        self.services = Services(self)
        """What this manager's plug-ins share (``services.py``), built on first use."""
        self.fence = self._build_fence()
        """Every write of ``client`` (and, wired by the composition root, of ARM) passes it."""
        self._lease_client = client.with_own_connections()  # the Lease is written unfenced
        self.client = client.with_fence(self.fence)
        self.cache = Cache(
            client,
            sync_timeout=self.config.cache_sync_timeout,
            compressed_kinds=self.config.cache.compressed_kinds,
        )
        self.metrics.provider.get_meter("nodewright.runtime").create_observable_gauge(
            "nodewright_leader",
            callbacks=[lambda _: [Observation(1 if self.is_leader() else 0)]],
            description="1 while this replica leads and may write, 0 while it is a standby",
        )
        self.metrics.provider.get_meter("nodewright.runtime").create_observable_gauge(
            "nodewright_informers_stopped",
            callbacks=[lambda _: [Observation(sum(i.is_stopped() for i in self.cache.informers()))]],
            description="Informers that stopped while the manager runs (liveness fails meanwhile)",
        )
        self.health = HealthServer()
        self.health.add_readiness_check("informers-synced", self._informers_synced)
        self.health.add_liveness_check("informers", informers_running(self.cache.informers))
        self.health.add_liveness_check(
            "workers",
            workers_not_stuck(self._reconcile_running_seconds, self.config.health.stuck_worker_deadline),
        )
        self.elector: LeaderElector | None = None
        self.started = threading.Event()
        """Set once the servers listen and the informers synced (ports are known then)."""
        self._controllers: list[Controller[Any]] = []
        self._controllers_started = False
        self._controllers_lock = threading.Lock()
        self._stop = threading.Event()
        self._lost_lease = False
        self._synced = threading.Event()
        self._metrics_server: HttpServer | None = None
        self._recorders: dict[str, EventRecorder] = {}

    # -- wiring --------------------------------------------------------------------------

    @overload
    def controller(self, name: str) -> Builder[Request]: ...

    @overload
    def controller(self, name: str, key_type: type[K]) -> Builder[K]: ...

    def controller(self, name: str, key_type: type[Any] = Request) -> Builder[Any]:
        """Start building the controller ``name`` (``.for_(...)...complete(reconciler)``). Its
        requests are ``Request``s unless ``key_type`` names another hashable type, which its map
        functions return and its reconciler takes (then it has ``watches`` only)."""
        return Builder(self, name, key_type)

    def add_controller(self, controller: Controller[Any]) -> None:
        """Register a built controller; it starts with the others (at once if they run already)."""
        with self._controllers_lock:
            if any(c.name == controller.name for c in self._controllers):
                raise ValueError(f"a controller named {controller.name!r} exists already")
            self._controllers.append(controller)
            if self._controllers_started:
                controller.start()

    @property
    def controllers(self) -> list[Controller[Any]]:
        return list(self._controllers)

    def reconciler_config(self, name: str) -> ReconcilerConfig | None:
        return self.config.reconcilers.get(name)

    def event_recorder(self, component: str) -> EventRecorder:
        """The Event recorder that reports as ``component`` (one per component)."""
        if component not in self._recorders:
            self._recorders[component] = EventRecorder(self.client, component)
        return self._recorders[component]

    def setup_reconcilers(self, registry: ReconcilerRegistry | None = None) -> list[str]:
        """Call ``setup(manager, options)`` of every reconciler the config enables, by name."""
        registry = registry or ReconcilerRegistry()
        enabled: list[str] = []
        for name, reconciler in self.config.reconcilers.items():
            if not reconciler.enabled:
                log.info("Skipped disabled reconciler", reconciler=name)
                continue
            plugin = registry.resolve(name, reconciler.module)
            options: Mapping[str, Any] = reconciler.options
            try:
                plugin.setup(self, options)
            except ConfigError as error:  # name the key from the top of the config file
                raise ConfigError(f"reconcilers.{name}.{error}") from None
            enabled.append(name)
            log.info("Set up reconciler", reconciler=name)
        return enabled

    # -- lifecycle -----------------------------------------------------------------------

    @property
    def metrics_port(self) -> int | None:
        return self._metrics_server.port if self._metrics_server else None

    @property
    def health_port(self) -> int | None:
        try:
            return self.health.port
        except RuntimeError:
            return None

    def is_leader(self) -> bool:
        """True while this replica leads and its writes pass the fence."""
        if not self.config.leader_election.enabled:
            return self._controllers_started
        return self.elector is not None and self.elector.is_leader()

    def _build_fence(self) -> WriteFence:
        election = self.config.leader_election
        if not election.enabled:
            return WriteFence.always_open(self.metrics)
        return WriteFence(
            renew_deadline=election.renew_deadline,
            margin=election.effective_write_fence_margin,
            metrics=self.metrics,
        )

    def stop(self) -> None:
        """Ask ``run`` to shut down (safe from any thread or a signal handler)."""
        self._stop.set()

    def run(self) -> None:
        """Serve, sync, lead, reconcile, until ``stop``; then drain and release (blocks).

        Raises ``CacheSyncTimeoutError`` when informers do not sync in time and ``LeadershipLostError``
        after the Lease was lost.
        """
        restore = self._install_signal_handlers()
        try:
            self._start_servers()
            self.cache.start()
            if not self._wait_for_sync():
                timeout = self.config.cache_sync_timeout
                raise CacheSyncTimeoutError(f"caches did not sync within {timeout:g} s")
            self._synced.set()
            self.started.set()
            if self._stop.is_set():
                return
            election = self.config.leader_election
            if election.enabled:
                check_server_fence(self.client, election.namespace, election.name)
                self.elector = LeaderElector(
                    self._lease_client,
                    namespace=election.namespace,
                    name=election.name,
                    identity=election.identity or None,
                    lease_duration=election.lease_duration,
                    renew_deadline=election.renew_deadline,
                    retry_period=election.retry_period,
                    on_started_leading=self._start_controllers,
                    on_stopped_leading=self._on_lost_lease,
                    metrics=self.metrics,
                    fence=self.fence,
                )
                lease = f"{election.namespace}/{election.name}"
                log.info("Waiting for leadership as a warm standby", lease=lease)
                self.elector.start()
            else:
                self._start_controllers()
            self._stop.wait()
        finally:
            self._shut_down()
            restore()
        if self._lost_lease:
            raise LeadershipLostError("lost the leader election lease")

    def _wait_for_sync(self) -> bool:
        deadline = time.monotonic() + self.config.cache_sync_timeout
        while not self._stop.is_set():
            if self.cache.wait_for_sync(min(0.5, max(0.0, deadline - time.monotonic()))):
                return True
            if time.monotonic() >= deadline:
                return False
        return True  # stopping: nothing left to wait for

    def _reconcile_running_seconds(self) -> list[tuple[str, float]]:
        return [(c.name, c.queue.longest_running_seconds()) for c in self.controllers]

    def _informers_synced(self) -> bool:
        return self._synced.is_set() and self.cache.has_synced()

    def _start_servers(self) -> None:
        if self.config.metrics.bind_address != "0":
            self._metrics_server = serve_metrics(self.metrics, self.config.metrics, self.client)
        if self.config.health.bind_address != "0":
            self.health.start(self.config.health.bind_address)

    def _start_controllers(self) -> None:
        with self._controllers_lock:
            if self._stop.is_set() or self._controllers_started:
                return
            self._controllers_started = True
            for controller in self._controllers:
                controller.start()
        log.info("Started controllers", count=len(self._controllers))

    def _on_lost_lease(self) -> None:
        """Called by the elector after it revoked the fence: cancel everything at once."""
        self._lost_lease = True
        with self._controllers_lock:
            controllers = list(self._controllers) if self._controllers_started else []
        for controller in controllers:
            controller.cancel()
        self._stop.set()

    def _shut_down(self) -> None:
        graceful = 0.0 if self._lost_lease else self.config.graceful_shutdown_timeout
        log.info("Stopping manager", graceful_shutdown_timeout=graceful, lost_lease=self._lost_lease)
        deadline = time.monotonic() + graceful
        with self._controllers_lock:
            controllers = list(self._controllers) if self._controllers_started else []
            self._controllers_started = False
        for controller in controllers:
            controller.queue.shut_down()  # stop intake everywhere first, then drain
        drained = all([c.stop(max(0.0, deadline - time.monotonic())) for c in controllers])
        if not drained:
            log.warning("Gave up waiting for in-flight reconciles")
        if self.elector is not None:
            self.elector.release()
        for recorder in self._recorders.values():
            recorder.stop(timeout=graceful or 1.0)  # writes the Events still queued (if leading)
        self.cache.stop()
        self.health.stop()
        if self._metrics_server is not None:
            self._metrics_server.stop()
        log.info("Stopped manager")

    def _install_signal_handlers(self) -> Any:
        if threading.current_thread() is not threading.main_thread():
            return lambda: None

        def handle(signum: int, _: FrameType | None) -> None:
            log.info("Received signal, shutting down", signal=signal.Signals(signum).name)
            self.stop()

        previous = {sig: signal.signal(sig, handle) for sig in (signal.SIGTERM, signal.SIGINT)}

        def restore() -> None:
            for sig, handler in previous.items():
                signal.signal(sig, handler)

        return restore
