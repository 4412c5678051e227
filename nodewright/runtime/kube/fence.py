"""The write fence: no mutating call leaves a replica that may have lost its Lease.

Owns ``WriteFence`` and ``FencedWriteError``. The leader elector (``leaderelection.py``) tells
the fence each time a renew of the Lease succeeded, giving the monotonic time at which that
renew *was sent* (``renewed(sent_at)``); it revokes the fence the moment leadership is lost or
given up. Every mutating call asks ``check(target, operation)`` first: the API client
(``client.py``: create, update, status, patch, delete, evict, and so Events too) with target
``kubernetes``, and the Azure SDK pipeline (a policy in ``cloud/write_guard.py``, wired by the
controllers package) with target ``arm``. ``check`` raises ``FencedWriteError`` (and nothing is
sent) unless the last successful renew is younger than ``renew_deadline - margin`` on this
process's monotonic clock. Each refusal is counted in
``nodewright_fenced_writes_total{target, by="client"}`` and logged as one line, without a traceback.

Why the margin bounds what a deposed leader can do
--------------------------------------------------
Another candidate may take the Lease only after it has seen the same Lease record, unchanged,
for ``lease_duration`` on its own monotonic clock. It cannot see our last renew before we sent
it, so it cannot take over before ``sent_at + lease_duration``. Our fence closes at
``sent_at + renew_deadline - margin``. Between the two lie ``lease_duration - renew_deadline +
margin`` seconds (15 - 10 + 2 = 7 s with the defaults): that slack is what a write that passed
the check still has to reach the server before a new leader can exist.

The window that remains, stated honestly: ``check`` and the bytes reaching the server are two
moments. A process that passes the check and is then paused (SIGSTOP, a VM freeze, a long
garbage collection, CPU starvation) for longer than that slack, or a request whose bytes are
held back in the network (a TCP retransmission, a proxy that buffers and later forwards) for
that long, can still land one write per in-flight call after a new leader started. The fence
cannot close this window, only shrink it: no check in the client can reach past the socket.
What the fence does guarantee is that no *new* call is sent once the renew is older than
``renew_deadline - margin``, that the SDK's retries are checked one by one (a retry after a long
back-off is refused), and that on loss every later call is refused at once.

To make "paused between the check and the send" as narrow as it can be in Python, the check is
made twice: early, where the call is made (the typed error, before any work), and again at the
last moment, in the HTTP connection itself, before each chunk of a mutating request is handed to
the socket (``guard_pool_manager``: the API client's pool and, through ``guard_session``, wired
by the controllers, the ARM transport's session). What is left is the handful of interpreter
steps between that last check and the ``sendall`` system call; a pause that lands there still
sends one request on resume.

The server closes what the client cannot, for Kubernetes writes
------------------------------------------------------------------
config/fence installs a ValidatingAdmissionPolicy (``SERVER_FENCE_POLICY``) whose param is the
leader Lease: the API server refuses every write of the manager's identity unless its sender (the
pod-name claim of the pod-bound token, which is the elector's identity, or else the user name)
is the Lease's ``holderIdentity``. The check is made where the write is admitted, so a request
that left a deposed leader before it lost the Lease, however late it lands, is refused once the
new leader's Lease write is visible to the policy. The client maps that refusal to
``FencedWriteError`` with ``by="server"`` (``refused_by_server``): counted with
``by="server"``, one log line, handled by reconcilers like a refusal of this fence.

The window that remains is the API server's propagation of the Lease to the policy: the policy
reads its param from the API server's own informer on Leases, not from storage. A late write
admitted after the takeover was committed to etcd but before that informer saw it is still
judged against the old holder and passes. On one API server this is the watch latency
(milliseconds; tests/controllers/test_server_fence.py measures the other side of it, the new
leader's first writes refused because the policy did not yet see its takeover). Behind several
API servers each has its own informer, so the window is the slowest one's watch lag, and a lagging
API server is exactly where a held request may land. The takeover itself can only happen
``lease_duration`` after our last renew, by which time every informer has normally caught up;
what it does not cover is an informer stuck far behind. Two more limits: the policy identifies
pods, not processes, so a container restarted in the same pod is the same sender (the process it
replaced is dead by then, but its requests still in the network are judged as the new one's);
and ARM has no such fence, so ARM writes rely on this module alone.

Side effects: metrics and log lines on refusal; ``guard_pool_manager`` and ``guard_session``
replace the connection pools they are given.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any, Literal
from urllib.parse import urlsplit

import requests
from urllib3 import PoolManager
from urllib3.connection import HTTPConnection, HTTPSConnection
from urllib3.connectionpool import HTTPConnectionPool, HTTPSConnectionPool

from nodewright.runtime.observe.logs import get_logger
from nodewright.runtime.observe.metrics import Metrics

__all__ = [
    "DEFAULT_MARGIN",
    "SERVER_FENCE_POLICY",
    "FenceTarget",
    "FencedWriteError",
    "RefusedBy",
    "WriteFence",
    "guard_pool_manager",
    "guard_session",
    "is_mutating",
    "is_server_fence_refusal",
]

log = get_logger(__name__)

DEFAULT_MARGIN = 2.0
"""Seconds cut from renew_deadline: the fence closes this long before the elector gives up."""

FenceTarget = Literal["kubernetes", "arm"]
RefusedBy = Literal["client", "server"]

SERVER_FENCE_POLICY = "nodewright-leader-fence"
"""The ValidatingAdmissionPolicy (and its binding) of the server-side fence (config/fence)."""


class FencedWriteError(Exception):
    """A mutating call was refused because this replica may no longer lead; nothing was sent.

    Deliberately not an ``ApiError`` (nor an Azure error): code that handles API or cloud
    failures does not swallow it, and the controller treats it as "stop, retry later".
    """

    def __init__(
        self, target: str, operation: str, renew_age: float | None, *, by: RefusedBy = "client"
    ) -> None:
        if by == "server":
            message = f"refused {target} write {operation}: the server's leader fence denied it"
        else:
            age = "never renewed" if renew_age is None else f"last renew {renew_age:.3f} s ago"
            message = f"refused {target} write {operation}: not leading ({age})"
        super().__init__(message)
        self.target = target
        self.operation = operation
        self.renew_age = renew_age
        self.by = by
        """``client``: this fence refused it, nothing was sent; ``server``: the API server's
        ValidatingAdmissionPolicy denied it (it was sent, nothing was stored)."""


class WriteFence:
    """Opens for ``renew_deadline - margin`` after each successful renew; closed otherwise.

    ``always_open()`` makes a fence for a manager without leader election (a single replica).
    Thread-safe: any worker thread may call ``check`` while the elector calls ``renewed``.
    """

    def __init__(
        self,
        *,
        renew_deadline: float,
        margin: float = DEFAULT_MARGIN,
        clock: Callable[[], float] = time.monotonic,
        metrics: Metrics | None = None,
    ) -> None:
        if not 0 <= margin < renew_deadline:
            raise ValueError("the write fence margin must be at least 0 and less than renew_deadline")
        self.renew_deadline = renew_deadline
        self.margin = margin
        self.validity = renew_deadline - margin
        """Seconds after a renew was sent during which writes pass."""
        self._clock = clock
        self._lock = threading.Lock()
        self._sent_at: float | None = None
        self._always_open = False
        # without a manager's metrics, refusals are counted in a registry nobody scrapes
        meter = (metrics or Metrics()).provider.get_meter("nodewright.runtime")
        self._refused = meter.create_counter(
            "nodewright_fenced_writes_total",
            description="Mutating calls refused because this replica may not lead, by target",
        )
        for target, by in (("kubernetes", "client"), ("kubernetes", "server"), ("arm", "client")):
            self._refused.add(0, {"target": target, "by": by})  # at zero, as controller-runtime does

    @classmethod
    def always_open(cls, metrics: Metrics | None = None) -> WriteFence:
        """A fence that never refuses (leader election is off: this replica is the only one)."""
        fence = cls(renew_deadline=1.0, margin=0.0, metrics=metrics)
        fence._always_open = True
        return fence

    def renewed(self, sent_at: float) -> None:
        """Record a successful renew that was sent at monotonic time ``sent_at``."""
        with self._lock:
            if self._sent_at is None or sent_at > self._sent_at:
                self._sent_at = sent_at

    def revoke(self) -> None:
        """Close the fence at once (leadership lost or released)."""
        with self._lock:
            self._sent_at = None
            self._always_open = False

    def renew_age(self) -> float | None:
        """Seconds since the last successful renew was sent; None when none counts any more."""
        with self._lock:
            sent_at = self._sent_at
        return None if sent_at is None else self._clock() - sent_at

    def is_open(self) -> bool:
        """True while a write would pass."""
        if self._always_open:
            return True
        age = self.renew_age()
        return age is not None and age < self.validity

    def closes_at(self) -> float | None:
        """The monotonic time at which the fence closes unless renewed (None: closed now)."""
        with self._lock:
            return None if self._sent_at is None else self._sent_at + self.validity

    def check(self, target: FenceTarget, operation: str) -> None:
        """Raise ``FencedWriteError`` unless a write may be sent now (side effect on refusal:
        one counter increment and one log line)."""
        if self.is_open():
            return
        age = self.renew_age()
        self._refused.add(1, {"target": target, "by": "client"})
        log.warning(
            "Refused write without leadership",
            target=target,
            operation=operation,
            renew_age=None if age is None else round(age, 3),
            validity=self.validity,
        )
        raise FencedWriteError(target, operation, age)

    def refused_by_server(self, operation: str, message: str) -> FencedWriteError:
        """The error to raise for a write the API server's leader fence denied (side effect:
        one counter increment, by="server", and one log line without a traceback)."""
        self._refused.add(1, {"target": "kubernetes", "by": "server"})
        age = self.renew_age()
        log.warning(
            "Refused write by the server's leader fence",
            target="kubernetes",
            operation=operation,
            renew_age=None if age is None else round(age, 3),
            answer=message,
        )
        return FencedWriteError("kubernetes", operation, age, by="server")

    def guard(self, target: FenceTarget) -> Callable[[str], None]:
        """``check`` bound to ``target``: the callable a cloud write guard is given."""

        def check(operation: str) -> None:
            self.check(target, operation)

        return check


_SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
_REVIEW_RESOURCES = (
    "/tokenreviews",
    "/subjectaccessreviews",
    "/selfsubjectaccessreviews",
    "/localsubjectaccessreviews",
    "/selfsubjectrulesreviews",
    "/selfsubjectreviews",
)


def is_server_fence_refusal(code: int, message: str) -> bool:
    """Whether an API error (its HTTP code and message) is the denial of the server-side fence:
    the API server names the policy in every denial it makes for it."""
    return code in (403, 422) and f"'{SERVER_FENCE_POLICY}'" in message and "denied request" in message


def is_mutating(method: str, path: str) -> bool:
    """Whether a request may change stored state. Reads are not, and neither are the review
    APIs (TokenReview, SubjectAccessReview and kin): their POSTs are questions the API server
    answers without storing anything, so a standby may ask them (metrics authorization, the
    permission check at start)."""
    if method.upper() in _SAFE_METHODS:
        return False
    resource_path = path.split("?", 1)[0].rstrip("/")
    is_review = resource_path.startswith(("/apis/authentication.k8s.io/", "/apis/authorization.k8s.io/"))
    return not (is_review and resource_path.endswith(_REVIEW_RESOURCES))


def _guarded_connection(base: type[HTTPConnection], check: Callable[[str], None]) -> type[HTTPConnection]:
    class GuardedConnection(base):  # type: ignore[valid-type,misc]
        """Checks ``check`` right before each chunk of a mutating request reaches the socket."""

        _guarded_request = ""

        def request(self, method: str, url: str, *args: Any, **kwargs: Any) -> None:
            mutating = method.upper() not in _SAFE_METHODS and is_mutating(method, urlsplit(url).path)
            self._guarded_request = f"{method.upper()} {url.split('?', 1)[0]}" if mutating else ""
            try:
                super().request(method, url, *args, **kwargs)
            finally:
                self._guarded_request = ""

        def send(self, data: Any) -> None:
            if self._guarded_request:
                check(self._guarded_request)  # raises: this chunk, and the request, never leave
            super().send(data)

    return GuardedConnection


def guard_pool_manager(manager: PoolManager, check: Callable[[str], None]) -> None:
    """Make every mutating request through ``manager``'s pools call ``check(\"METHOD path\")``
    at the last moment, before each chunk goes to the socket; ``check`` refuses by raising.

    Side effect: the manager's existing pools are closed; new ones use guarded connections.
    """
    manager.clear()
    manager.pool_classes_by_scheme = {
        "http": type(
            "GuardedHTTPConnectionPool",
            (HTTPConnectionPool,),
            {"ConnectionCls": _guarded_connection(HTTPConnection, check)},
        ),
        "https": type(
            "GuardedHTTPSConnectionPool",
            (HTTPSConnectionPool,),
            {"ConnectionCls": _guarded_connection(HTTPSConnection, check)},
        ),
    }


def guard_session(session: requests.Session, check: Callable[[str], None]) -> None:
    """``guard_pool_manager`` for each adapter of a ``requests`` session (the ARM transport's)."""
    for adapter in session.adapters.values():
        manager = getattr(adapter, "poolmanager", None)
        if manager is not None:
            guard_pool_manager(manager, check)
