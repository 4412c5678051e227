"""``maxUnavailable`` (pure): how many donors may be cordoned and drained while their heir is not
Ready yet, as Cluster API's and AKS's rolling updates count unavailable machines.

The spec value is a count (``2``, or a numeric string such as ``"2"``) or a percentage of the
claimed nodes (``"25%"``, rounded down as Cluster API rounds maxUnavailable). A negative count,
a percentage above 100 or text that is neither is rejected with ``InvalidMaxUnavailableError``
(the reconciler reports it with Degraded InvalidMaxUnavailable and a Warning Event and replaces
nothing). The allowance left now is the resolved value less the donors already cordoned whose heir
is not Ready. Neighbour: ``replacement`` (spends the allowance), ``node_image`` (validates).
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from nodewright.controllers.node_image.grouping import ClusterNode
from nodewright.controllers.node_image.pairing import ReplacementPair

__all__ = [
    "InvalidMaxUnavailableError",
    "parse_max_unavailable",
    "resolve_max_unavailable",
    "unavailable_allowance",
]

_PERCENT = re.compile(r"^([0-9]+)%$")


class InvalidMaxUnavailableError(ValueError):
    """``spec.maxUnavailable`` is no count and no percentage."""


def parse_max_unavailable(value: int | str) -> tuple[int, bool]:
    """The number and whether it is a percentage; raises ``InvalidMaxUnavailableError``."""
    if isinstance(value, int):
        number, percent = value, False
    else:
        text = value.strip()
        match = _PERCENT.match(text)
        if match is not None:
            number, percent = int(match.group(1)), True
        elif re.fullmatch(r"-?[0-9]+", text):
            number, percent = int(text), False
        else:
            raise InvalidMaxUnavailableError(
                f"spec.maxUnavailable {value!r} is neither a count nor a percentage such as 25%"
            )
    if number < 0:
        raise InvalidMaxUnavailableError(f"spec.maxUnavailable {value!r} is negative")
    if percent and number > 100:
        raise InvalidMaxUnavailableError(f"spec.maxUnavailable {value!r} is more than 100%")
    return number, percent


def resolve_max_unavailable(value: int | str, nodes: int) -> int:
    """The count ``value`` allows (a percentage of ``nodes``, rounded down)."""
    number, percent = parse_max_unavailable(value)
    return nodes * number // 100 if percent else number


def unavailable_allowance(allowed: int, pairs: Iterable[ReplacementPair]) -> int:
    """How many more donors may be cordoned now while their heir is not Ready: ``allowed`` less
    the donors unavailable already."""
    unavailable = sum(1 for pair in pairs if _unavailable(pair.donor, pair.heir))
    return max(0, allowed - unavailable)


def _unavailable(donor: ClusterNode, heir: ClusterNode) -> bool:
    return donor.unschedulable and not heir.ready
