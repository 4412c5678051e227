"""Leader election on a ``coordination.k8s.io/v1`` Lease, as client-go's leaderelection does it.

Owns ``LeaderElector``. Candidates race to write their identity into one Lease; every write is
a conditional update on the Lease's ``resourceVersion``, so two candidates can never both win
the same round. A candidate may take the Lease only when it is free (empty holder) or when the
holder has not renewed for ``lease_duration``, measured on this process's own monotonic clock
from the last time it saw the record change (never by comparing wall clocks across hosts). The
leader renews every ``retry_period``; if it cannot renew for ``renew_deadline`` it stops leading.
``release()`` empties the holder and shortens the lease so another candidate takes over at once.

The manager drives it: controllers start in ``on_started_leading`` and the process stops in
``on_stopped_leading``. Side effects: API calls on the Lease, one background thread.
"""

from __future__ import annotations

import datetime
import math
import random
import socket
import threading
import time
import uuid
from collections.abc import Callable
from typing import Any

from nodewright.runtime import errors
from nodewright.runtime.client import Client
from nodewright.runtime.kinds import LEASE
from nodewright.runtime.logs import get_logger
from nodewright.runtime.metrics import Metrics

__all__ = ["LeaderElector", "default_identity"]

log = get_logger(__name__)

JITTER = 1.2
"""Retries wait retry_period x [1, 1.2) so that candidates do not move in lock step."""


def default_identity() -> str:
    """Hostname plus a random suffix: unique even for two processes on one host."""
    return f"{socket.gethostname()}_{uuid.uuid4().hex[:8]}"


def _micro_time(moment: datetime.datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class LeaderElector:
    """Acquires and renews one Lease for ``identity``; reports gains and losses by callback."""

    def __init__(
        self,
        client: Client,
        *,
        namespace: str,
        name: str,
        identity: str | None = None,
        lease_duration: float = 15.0,
        renew_deadline: float = 10.0,
        retry_period: float = 2.0,
        on_started_leading: Callable[[], None] = lambda: None,
        on_stopped_leading: Callable[[], None] = lambda: None,
        metrics: Metrics | None = None,
    ) -> None:
        if not lease_duration > renew_deadline:
            raise ValueError("lease_duration must be greater than renew_deadline")
        if not renew_deadline > JITTER * retry_period:
            raise ValueError("renew_deadline must be greater than 1.2 x retry_period")
        if retry_period <= 0:
            raise ValueError("retry_period must be positive")
        self.client = client
        self.namespace = namespace
        self.name = name
        self.identity = identity or default_identity()
        self.lease_duration = lease_duration
        self.renew_deadline = renew_deadline
        self.retry_period = retry_period
        self.on_started_leading = on_started_leading
        self.on_stopped_leading = on_stopped_leading
        self._metrics = metrics
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._leading = threading.Event()
        self._lock = threading.Lock()  # serialises Lease writes between the loop and release
        self._observed_record: tuple[str, str] | None = None  # (holder, renewTime)
        self._observed_at = 0.0
        self._set_status(False)

    # -- public --------------------------------------------------------------------------

    def is_leader(self) -> bool:
        return self._leading.is_set()

    def start(self) -> None:
        """Run the acquire-then-renew loop in a background thread."""
        self._thread = threading.Thread(target=self.run, name=f"leader-election-{self.name}", daemon=True)
        self._thread.start()

    def run(self) -> None:
        """Acquire the Lease, then keep renewing it until stopped or lost (blocks)."""
        log.info("Started leader election", lease=f"{self.namespace}/{self.name}", identity=self.identity)
        while not self._stop.is_set():
            if self._try_acquire_or_renew():
                break
            self._stop.wait(self.retry_period * random.uniform(1.0, JITTER))  # noqa: S311 - jitter
        else:
            return
        self._leading.set()
        self._set_status(True)
        log.info("Acquired lease", lease=f"{self.namespace}/{self.name}", identity=self.identity)
        self.on_started_leading()
        last_renewed = time.monotonic()
        while not self._stop.wait(self.retry_period):
            if self._try_acquire_or_renew():
                last_renewed = time.monotonic()
                continue
            if time.monotonic() - last_renewed >= self.renew_deadline or not self._leading.is_set():
                break
        if self._stop.is_set():
            return
        self._leading.clear()
        self._set_status(False)
        log.warning("Lost lease", lease=f"{self.namespace}/{self.name}", identity=self.identity)
        self.on_stopped_leading()

    def stop(self) -> None:
        """Stop the loop without touching the Lease (``release`` also gives it up)."""
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=self.renew_deadline)

    def release(self) -> bool:
        """Stop, and if leading, hand the Lease back: empty holder, one-second lease.

        Returns True when the Lease was released. Side effect: one update of the Lease.
        """
        self.stop()
        if not self._leading.is_set():
            return False
        with self._lock:
            self._leading.clear()
            self._set_status(False)
            try:
                lease = self.client.get(LEASE, self.name, self.namespace)
                if lease.get("spec", {}).get("holderIdentity") != self.identity:
                    return False
                now = _micro_time(datetime.datetime.now(datetime.UTC))
                lease["spec"].update(
                    {"holderIdentity": "", "leaseDurationSeconds": 1, "acquireTime": now, "renewTime": now}
                )
                self.client.update(LEASE, lease)
            except errors.ApiError as error:
                log.error("Failed to release lease", lease=f"{self.namespace}/{self.name}", error=str(error))
                return False
        log.info("Released lease", lease=f"{self.namespace}/{self.name}", identity=self.identity)
        return True

    # -- one round -----------------------------------------------------------------------

    def _try_acquire_or_renew(self) -> bool:
        """One conditional write of the Lease; True when we hold it afterwards."""
        with self._lock:
            try:
                return self._attempt()
            except errors.ApiError as error:
                log.info(
                    "Failed to acquire or renew lease",
                    lease=f"{self.namespace}/{self.name}",
                    error=str(error),
                )
                return False
            except Exception:
                log.exception("Failed to acquire or renew lease", lease=f"{self.namespace}/{self.name}")
                return False

    def _attempt(self) -> bool:
        now = datetime.datetime.now(datetime.UTC)
        spec: dict[str, Any] = {
            "holderIdentity": self.identity,
            "leaseDurationSeconds": max(1, math.ceil(self.lease_duration)),
            "renewTime": _micro_time(now),
        }
        try:
            lease = self.client.get(LEASE, self.name, self.namespace)
        except errors.NotFound:
            spec.update(acquireTime=_micro_time(now), leaseTransitions=0)
            body = {"metadata": {"name": self.name, "namespace": self.namespace}, "spec": spec}
            try:
                self.client.create(LEASE, body, self.namespace)
            except (errors.AlreadyExists, errors.Conflict):
                return False
            self._observe((self.identity, spec["renewTime"]))
            return True
        current = lease.get("spec") or {}
        holder = current.get("holderIdentity") or ""
        self._observe((holder, str(current.get("renewTime", ""))))
        observed_duration = float(current.get("leaseDurationSeconds") or self.lease_duration)
        expired = time.monotonic() > self._observed_at + observed_duration
        if holder and holder != self.identity and not expired:
            return False
        if holder == self.identity:
            spec["acquireTime"] = current.get("acquireTime") or _micro_time(now)
            spec["leaseTransitions"] = current.get("leaseTransitions") or 0
        else:
            spec["acquireTime"] = _micro_time(now)
            spec["leaseTransitions"] = (current.get("leaseTransitions") or 0) + 1
        lease["spec"] = {**current, **spec}
        try:
            self.client.update(LEASE, lease)  # conditional on metadata.resourceVersion
        except errors.Conflict:
            return False
        self._observe((self.identity, spec["renewTime"]))
        return True

    def _observe(self, record: tuple[str, str]) -> None:
        if record != self._observed_record:
            self._observed_record = record
            self._observed_at = time.monotonic()

    def _set_status(self, leading: bool) -> None:
        if self._metrics is not None:
            self._metrics.leader_election_status.set(1 if leading else 0, {"name": self.name})
