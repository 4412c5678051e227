"""Writing a NodeNetworkConfig's spec as one writer that notices the others (issue 34).

In consumer ``crd`` Azure CNS's own pool monitor writes ``spec.requestedIPCount`` and
``spec.ipsNotInUse``; nodewright writes them only when configured as the node agent
(``demandFromPods: true``) or for a NodeSubnet consumer, which reads no NodeNetworkConfig. Two
writers of one spec would undo each other on every pass, so nodewright's spec writes are
server-side applies under a field manager of their own (``SPEC_FIELD_MANAGER``), never forced
against another manager: when CNS (or anyone) owns a field with another value, the API server
answers 409 and names that manager. Then nothing is overwritten: the pass follows the spec as
stored, the NodeNetworkConfig gets the condition ``SpecWriter=False`` (reason
``AnotherSpecWriter``, naming the managers) and one Warning Event, and no apply is tried again for
``retry_seconds`` (10 min by default) so a standing conflict costs no request per pass. A conflict
only with nodewright's own earlier merge patches (manager ``nodewright``, from before the spec was
applied) is a hand-over to ourselves: that apply is forced once.

Owns ``SpecWriter``, ``conflicting_managers`` (pure) and the condition's names. Side effects:
server-side applies through the given function, the condition's status patch, Events.
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Callable, Collection
from typing import Any, Protocol

from nodewright.controllers.node_network_config.resources import NODE_NETWORK_CONFIG
from nodewright.runtime import Client, errors, get_logger, set_condition

__all__ = [
    "ANOTHER_SPEC_WRITER",
    "SPEC_FIELD_MANAGER",
    "SPEC_WRITER_CONDITION",
    "SpecWriter",
    "conflicting_managers",
    "spec_applier",
]

log = get_logger(__name__)
Object = dict[str, Any]

SPEC_FIELD_MANAGER = "nodewright-ipam"
"""The field manager of nodewright's spec applies: the spec fields it owns in managedFields."""
SPEC_WRITER_CONDITION = "SpecWriter"
ANOTHER_SPEC_WRITER = "AnotherSpecWriter"
SOLE_SPEC_WRITER = "SoleSpecWriter"
DEFAULT_RETRY_SECONDS = 600.0

_CONFLICT_WITH = re.compile(r'conflict with "([^"]+)"')


def conflicting_managers(error: errors.ApiError) -> tuple[str, ...]:
    """The field managers an apply conflict names, in order, each once (from the Status causes,
    else the message). Pure."""
    texts = [str(cause.get("message", "")) for cause in error.details.get("causes") or []]
    found = [name for text in (texts or [error.message]) for name in _CONFLICT_WITH.findall(text)]
    return tuple(dict.fromkeys(found))


class EventSink(Protocol):
    def event(self, obj: Object, type: Any, reason: str, message: str) -> None: ...


Apply = Callable[[str, Object, bool], Object]
"""Server-side apply of ``{"spec": ...}`` to the named NodeNetworkConfig (force or not)."""
PatchStatus = Callable[[str, Object], Object]
"""Merge-patch the named NodeNetworkConfig's status subresource with the given status fields."""


def spec_applier(client: Client, namespace: str) -> Apply:
    """An ``Apply`` through ``client``: server-side apply of the spec fields under
    ``SPEC_FIELD_MANAGER`` (the controller's client records the answer, which its next passes
    read). Raises ``errors.Conflict`` when another field manager holds one of the fields with
    another value and ``force`` is off. Side effect: the PATCH."""

    def apply(name: str, body: Object, force: bool) -> Object:
        intent = {"metadata": {"name": name, "namespace": namespace}, **body}
        return client.patch(
            NODE_NETWORK_CONFIG,
            name,
            intent,
            namespace,
            patch_type="apply",
            field_manager=SPEC_FIELD_MANAGER,
            force=force,
        )

    return apply


class SpecWriter:
    """Applies nodewright's spec, or notices another writer (see the module docstring)."""

    def __init__(
        self,
        *,
        apply: Apply,
        patch_status: PatchStatus,
        events: EventSink,
        own_update_managers: Collection[str],
        clock: Callable[[], float] = time.monotonic,
        retry_seconds: float = DEFAULT_RETRY_SECONDS,
    ) -> None:
        self._apply = apply
        self._patch_status = patch_status
        self._events = events
        self._own = frozenset(own_update_managers)
        self._clock = clock
        self._retry_seconds = retry_seconds
        self._held_until: dict[str, float] = {}
        self._lock = threading.Lock()

    def write(self, raw: Object, spec: Object) -> Object | None:
        """Apply ``spec`` to the NodeNetworkConfig ``raw``; the object as stored, or None when
        another writer holds the spec (the caller then follows the stored spec)."""
        name = str(raw["metadata"]["name"])
        with self._lock:
            held = self._held_until.get(name)
        if held is not None and self._clock() < held:
            return None
        try:
            stored = self._apply(name, {"spec": spec}, False)
        except errors.Conflict as error:
            managers = conflicting_managers(error)
            if not managers or not set(managers) <= self._own:
                self._notice(raw, managers)
                return None
            log.info("Took over the spec from our own earlier patches", node=name, managers=list(managers))
            stored = self._apply(name, {"spec": spec}, True)
        with self._lock:
            self._held_until.pop(name, None)
        self._clear(stored)
        return stored

    def forget(self, name: str) -> None:
        """The NodeNetworkConfig is gone."""
        with self._lock:
            self._held_until.pop(name, None)

    def _notice(self, raw: Object, managers: tuple[str, ...]) -> None:
        name = str(raw["metadata"]["name"])
        with self._lock:
            self._held_until[name] = self._clock() + self._retry_seconds
        who = ", ".join(managers) or "another field manager"
        message = (
            f"spec.requestedIPCount/ipsNotInUse are written by {who}; nodewright follows that spec and "
            f"does not overwrite it (set demandFromPods: false if the node agent writes the spec)"
        )
        conditions = _conditions(raw)
        if _condition_status(conditions) == "False":
            return  # said already (level-based: the condition is the record)
        set_condition(conditions, SPEC_WRITER_CONDITION, "False", ANOTHER_SPEC_WRITER, message)
        self._events.event(raw, "Warning", ANOTHER_SPEC_WRITER, message)
        log.warning("Found another writer of a NodeNetworkConfig spec", node=name, managers=list(managers))
        self._patch_status(name, {"conditions": conditions})

    def _clear(self, stored: Object) -> None:
        conditions = _conditions(stored)
        if _condition_status(conditions) != "False":
            return
        message = "nodewright writes the spec"
        set_condition(conditions, SPEC_WRITER_CONDITION, "True", SOLE_SPEC_WRITER, message)
        self._patch_status(str(stored["metadata"]["name"]), {"conditions": conditions})


def _conditions(obj: Object) -> list[Object]:
    return [dict(condition) for condition in (obj.get("status") or {}).get("conditions") or []]


def _condition_status(conditions: list[Object]) -> str | None:
    for condition in conditions:
        if condition.get("type") == SPEC_WRITER_CONDITION:
            return str(condition.get("status"))
    return None
