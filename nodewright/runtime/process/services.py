"""Services scoped to one manager: typed slots that hold what a manager's plug-ins share.

Owns ``ServiceKey`` and ``Services``. The runtime knows nothing of what other layers share (the
clouds of the controllers layer, say), so a key names a service and says how to build it from
the manager; ``manager.services.get(key)`` returns that manager's one value, built on first use,
or the one the composition root put there first with ``provide``. Two managers never share a
value: there is no module-level state behind a key. Thread-safe.

Example::

    GREETER: ServiceKey[Greeter] = ServiceKey("greeter", lambda manager: Greeter(manager.metrics))

    def setup(manager: Manager, options: Mapping[str, Any]) -> None:
        greeter = manager.services.get(GREETER)  # the same object for every plug-in of manager
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Generic, TypeVar, cast

if TYPE_CHECKING:
    from nodewright.runtime.process.manager import Manager

__all__ = ["ServiceKey", "Services"]

T = TypeVar("T")


@dataclass(frozen=True, eq=False)
class ServiceKey(Generic[T]):
    """A service's name and how a manager builds it when nobody provided one (compared by identity)."""

    name: str
    build: Callable[[Manager], T]


class Services:
    """The services of one manager, by key."""

    def __init__(self, manager: Manager) -> None:
        self._manager = manager
        self._lock = threading.RLock()  # a service's build may get another service
        self._values: dict[ServiceKey[Any], Any] = {}

    def provide(self, key: ServiceKey[T], value: T) -> None:
        """Make ``value`` the manager's ``key`` service; ValueError if it has one already."""
        with self._lock:
            if key in self._values:
                raise ValueError(f"the manager has a {key.name!r} service already")
            self._values[key] = value

    def get(self, key: ServiceKey[T]) -> T:
        """The manager's ``key`` service, built by ``key.build(manager)`` on first use."""
        with self._lock:
            if key not in self._values:
                self._values[key] = key.build(self._manager)
            return cast(T, self._values[key])
