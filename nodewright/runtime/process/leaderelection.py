"""Leader election on a ``coordination.k8s.io/v1`` Lease, as client-go's leaderelection does it.

Owns ``LeaderElector``. Candidates race to write their identity into one Lease; every write is
a conditional update on the Lease's ``resourceVersion``, so two candidates can never both win
the same round. A candidate may take the Lease only when it is free (empty holder) or when the
holder has not renewed for ``lease_duration``, measured on this process's own monotonic clock
from the last time it saw the record change (never by comparing wall clocks across hosts). The
leader renews every ``retry_period``; ``release()`` empties the holder and shortens the lease so
another candidate takes over at once.

The renew deadline is enforced in time, not in the order of calls (as client-go bounds each
renew with a context deadline): each attempt runs on its own thread with a request timeout
derived from what is left of ``renew_deadline`` since the last successful renew was sent, and the
loop waits for it only until that deadline, by the monotonic clock. A leader whose renew is not
back by then stops leading even while its request still hangs; one that sees another holder in
the Lease stops at once. Every successful renew opens the ``WriteFence`` (``fence.py``) from
the moment it was sent; losing leadership revokes it before anything else happens.
``leader_election_master_status`` is 1 only while the fence is open: it drops to 0 when the
renew is older than ``renew_deadline - margin`` (in doubt), before the deadline itself.

The manager drives it: controllers start in ``on_started_leading`` and the process stops in
``on_stopped_leading``. ``on_started_leading`` runs on a thread of its own while the renewals go
on (as client-go runs ``OnStartedLeading`` in a goroutine): starting the controllers of a
2,000-node cluster took 8 s on a busy machine, and renewals that waited for it lost the Lease
just won. If it raises, leadership is given up (``on_stopped_leading`` runs). Side effects: API
calls on the Lease, one background thread (plus one for ``on_started_leading`` and one
short-lived thread per renew attempt).
"""

from __future__ import annotations

import datetime
import math
import os
import random
import socket
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from nodewright.runtime.kube import errors
from nodewright.runtime.kube.client import Client
from nodewright.runtime.kube.fence import DEFAULT_MARGIN, WriteFence
from nodewright.runtime.kube.kinds import LEASE
from nodewright.runtime.kube.times import format_micro_time
from nodewright.runtime.observe.logs import get_logger
from nodewright.runtime.observe.metrics import Metrics

__all__ = ["POD_NAME_VARIABLE", "LeaderElector", "default_identity"]

log = get_logger(__name__)

JITTER = 1.2
"""Retries wait retry_period x [1, 1.2) so that candidates do not move in lock step."""


SLOW_RENEW_LOG_INTERVAL = 30.0
"""At most one "Slow lease renew" line per this many seconds; the next says how many were slow."""

POD_NAME_VARIABLE = "POD_NAME"
"""Set from the downward API (config/manager): the pod's name is then this candidate's identity."""


def default_identity() -> str:
    """The pod's name (``$POD_NAME``) in a pod; elsewhere the hostname plus a random suffix,
    unique even for two processes on one host.

    The pod name is what the server-side fence (config/fence) compares with the Lease's
    holder: the API server knows it from the pod-bound ServiceAccount token
    (``authentication.kubernetes.io/pod-name``). A container restarted in the same pod keeps
    it, so a restart of a leader that crashed renews its own Lease at once instead of waiting
    for it to expire; the process it replaces is dead by then.
    """
    pod_name = os.environ.get(POD_NAME_VARIABLE, "").strip()
    return pod_name or f"{socket.gethostname()}_{uuid.uuid4().hex[:8]}"


Outcome = Literal["held", "failed", "taken"]
"""One round: we hold the Lease; the round failed (transport, conflict); another holder has it."""


@dataclass
class _Attempt:
    """One acquire-or-renew round running on its own thread."""

    sent_at: float
    done: threading.Event = field(default_factory=threading.Event)
    outcome: Outcome = "failed"
    finished_at: float = 0.0


class LeaderElector:
    """Acquires and renews one Lease for ``identity``; reports gains and losses by callback.

    ``fence`` is opened by each successful renew and revoked on loss; without one the elector
    keeps its own (margin: the smaller of 2 s and a quarter of ``renew_deadline``).
    """

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
        fence: WriteFence | None = None,
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
        self.fence = fence or WriteFence(
            renew_deadline=renew_deadline, margin=min(DEFAULT_MARGIN, renew_deadline / 4), metrics=metrics
        )
        self._metrics = metrics
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._leading = threading.Event()
        self._start_failed = threading.Event()
        self._lock = threading.Lock()  # serialises Lease writes between the loop and release
        self._observed_record: tuple[str, str] | None = None  # (holder, renewTime)
        self._observed_at = 0.0
        self._status: bool | None = None
        self.lost_at: float | None = None
        """Monotonic time at which leadership was lost (None while never lost)."""
        self.lost_reason: str | None = None
        """Why leadership was lost, as logged (None while never lost)."""
        self._slow = (0, 0.0, float("-inf"))  # slow rounds not yet logged, the slowest, last line at
        self._set_status(False)

    # -- public --------------------------------------------------------------------------

    def is_leader(self) -> bool:
        """True while leading and the fence is open (a renew is recent enough to write)."""
        return self._leading.is_set() and self.fence.is_open()

    def start(self) -> None:
        """Run the acquire-then-renew loop in a background thread."""
        self._thread = threading.Thread(target=self.run, name=f"leader-election-{self.name}", daemon=True)
        self._thread.start()

    def run(self) -> None:
        """Acquire the Lease, then keep renewing it until stopped or lost (blocks)."""
        log.info("Started leader election", lease=self._lease_name, identity=self.identity)
        sent_at = self._acquire()
        if sent_at is None:
            return
        self.fence.renewed(sent_at)
        self._leading.set()
        self._set_status(True)
        log.info("Acquired lease", lease=self._lease_name, identity=self.identity)
        threading.Thread(target=self._start_leading, name=f"leading-{self.name}", daemon=True).start()
        reason = self._renew_until_lost(sent_at)
        if reason is not None:
            self._lose(reason)

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
        self.fence.revoke()  # no write of ours may follow the hand-over
        with self._lock:
            self._leading.clear()
            self._set_status(False)
            try:
                lease = self.client.get(LEASE, self.name, self.namespace)
                if lease.get("spec", {}).get("holderIdentity") != self.identity:
                    return False
                now = format_micro_time(datetime.datetime.now(datetime.UTC))
                lease["spec"].update(
                    {"holderIdentity": "", "leaseDurationSeconds": 1, "acquireTime": now, "renewTime": now}
                )
                self.client.update(LEASE, lease)
            except errors.ApiError as error:
                log.error("Failed to release lease", lease=self._lease_name, error=str(error))
                return False
        log.info("Released lease", lease=self._lease_name, identity=self.identity)
        return True

    # -- the loop ------------------------------------------------------------------------

    @property
    def _lease_name(self) -> str:
        return f"{self.namespace}/{self.name}"

    def _acquire(self) -> float | None:
        """Try every retry period until the Lease is ours; the monotonic time the winning
        write was sent, or None when stopped first."""
        while not self._stop.is_set():
            sent_at = time.monotonic()
            if self._try_acquire_or_renew(self.renew_deadline) == "held":
                return sent_at
            self._stop.wait(self.retry_period * random.uniform(1.0, JITTER))  # noqa: S311 - jitter
        return None

    def _start_leading(self) -> None:
        try:
            self.on_started_leading()
        except Exception:
            log.exception("Failed to start leading", lease=self._lease_name)
            self._start_failed.set()

    def _renew_until_lost(self, sent_at: float) -> str | None:
        """Renew every retry period; the reason leadership ended, or None when stopped."""
        last_sent = sent_at
        next_attempt = time.monotonic() + self.retry_period
        attempt: _Attempt | None = None
        while not self._stop.is_set():
            now = time.monotonic()
            deadline = last_sent + self.renew_deadline
            if now >= deadline:
                return self._overdue(now, last_sent, attempt)
            if self._start_failed.is_set():
                return "on_started_leading failed"
            if not self.fence.is_open():
                self._set_status(False)  # in doubt: writes are refused from now on
            if attempt is None and now >= next_attempt:
                attempt = self._start_attempt(deadline - now)
            closes_at = self.fence.closes_at()
            doubt = closes_at if closes_at is not None and closes_at > now else deadline
            wake = min(deadline, doubt, deadline if attempt else next_attempt)
            waited = max(0.0, wake - now)
            if attempt is not None:
                attempt.done.wait(waited)
            else:
                self._stop.wait(waited)
            if attempt is None or not attempt.done.is_set():
                continue
            if attempt.outcome == "taken":
                return "another candidate holds the lease"
            self._note_slow(attempt)
            if attempt.outcome == "held" and attempt.finished_at < deadline:
                last_sent = attempt.sent_at
                self.fence.renewed(last_sent)
                self._set_status(True)
            attempt, next_attempt = None, time.monotonic() + self.retry_period
        return None

    def _overdue(self, now: float, last_sent: float, attempt: _Attempt | None) -> str:
        """Why the renew deadline passed: how long since the last renew that held was sent,
        and how long the round still out has been waiting (none: no round could start)."""
        waiting = f"a round out for {now - attempt.sent_at:.1f} s" if attempt else "no round out"
        return f"renew deadline passed: last renew sent {now - last_sent:.1f} s ago, {waiting}"

    def _note_slow(self, attempt: _Attempt) -> None:
        """A log line for a round that took longer than the retry period: the first sign of a
        starved API server or process, seconds before the deadline. At most one line per
        ``SLOW_RENEW_LOG_INTERVAL``; it counts the slow rounds since the last line, this one too."""
        took = attempt.finished_at - attempt.sent_at
        if took <= self.retry_period:
            return
        rounds, slowest, logged_at = self._slow
        rounds, slowest = rounds + 1, max(slowest, took)
        if attempt.finished_at - logged_at < SLOW_RENEW_LOG_INTERVAL:
            self._slow = (rounds, slowest, logged_at)
            return
        log.info(
            "Slow lease renew",
            lease=self._lease_name,
            seconds=round(took, 2),
            outcome=attempt.outcome,
            slow_rounds=rounds,
            slowest=round(slowest, 2),
        )
        self._slow = (0, 0.0, attempt.finished_at)

    def _start_attempt(self, budget: float) -> _Attempt:
        """Run one round on its own thread, its requests bounded by ``budget`` seconds."""
        attempt = _Attempt(sent_at=time.monotonic())

        def run() -> None:
            attempt.outcome = self._try_acquire_or_renew(budget)
            attempt.finished_at = time.monotonic()
            attempt.done.set()

        threading.Thread(target=run, name=f"lease-renew-{self.name}", daemon=True).start()
        return attempt

    def _lose(self, reason: str) -> None:
        self.fence.revoke()  # first: no write passes from here on
        self._leading.clear()
        self.lost_at = time.monotonic()
        self.lost_reason = reason
        self._set_status(False)
        log.warning("Lost lease", lease=self._lease_name, identity=self.identity, reason=reason)
        self.on_stopped_leading()

    # -- one round -----------------------------------------------------------------------

    def _try_acquire_or_renew(self, timeout: float) -> Outcome:
        """One conditional write of the Lease, every request bounded by ``timeout`` seconds."""
        with self._lock:
            try:
                return self._attempt(max(0.05, timeout))
            except errors.ApiError as error:
                log.info("Failed to acquire or renew lease", lease=self._lease_name, error=str(error))
                return "failed"
            except Exception:
                log.exception("Failed to acquire or renew lease", lease=self._lease_name)
                return "failed"

    def _attempt(self, timeout: float) -> Outcome:
        now = datetime.datetime.now(datetime.UTC)
        spec: dict[str, Any] = {
            "holderIdentity": self.identity,
            "leaseDurationSeconds": max(1, math.ceil(self.lease_duration)),
            "renewTime": format_micro_time(now),
        }
        try:
            lease = self.client.get(LEASE, self.name, self.namespace, timeout=timeout)
        except errors.NotFound:
            return self._create(spec, now, timeout)
        current = lease.get("spec") or {}
        holder = current.get("holderIdentity") or ""
        self._observe((holder, str(current.get("renewTime", ""))))
        observed_duration = float(current.get("leaseDurationSeconds") or self.lease_duration)
        expired = time.monotonic() > self._observed_at + observed_duration
        if holder and holder != self.identity and not expired:
            return "taken"
        if holder == self.identity:
            spec["acquireTime"] = current.get("acquireTime") or format_micro_time(now)
            spec["leaseTransitions"] = current.get("leaseTransitions") or 0
        else:
            spec["acquireTime"] = format_micro_time(now)
            spec["leaseTransitions"] = (current.get("leaseTransitions") or 0) + 1
        lease["spec"] = {**current, **spec}
        try:
            self.client.update(LEASE, lease, timeout=timeout)  # conditional on metadata.resourceVersion
        except errors.Conflict:
            return "failed"
        self._observe((self.identity, spec["renewTime"]))
        return "held"

    def _create(self, spec: dict[str, Any], now: datetime.datetime, timeout: float) -> Outcome:
        spec.update(acquireTime=format_micro_time(now), leaseTransitions=0)
        body = {"metadata": {"name": self.name, "namespace": self.namespace}, "spec": spec}
        try:
            self.client.create(LEASE, body, self.namespace, timeout=timeout)
        except (errors.AlreadyExists, errors.Conflict):
            return "failed"
        self._observe((self.identity, spec["renewTime"]))
        return "held"

    def _observe(self, record: tuple[str, str]) -> None:
        if record != self._observed_record:
            self._observed_record = record
            self._observed_at = time.monotonic()

    def _set_status(self, leading: bool) -> None:
        if self._status is leading:
            return
        self._status = leading
        if self._metrics is not None:
            self._metrics.leader_election_status.set(1 if leading else 0, {"name": self.name})
