"""Shared hypothesis settings and strategies for the ipam tests.

Example counts stay modest (CI shares two cores); deadlines are off because a loaded machine
makes timing flaky, and the functions under test are pure.
"""

from __future__ import annotations

import ipaddress

from hypothesis import settings
from hypothesis import strategies as st

from nodewright.ipam import PoolScaler

PROPERTY = settings(max_examples=150, deadline=None)
STATEFUL = settings(max_examples=150, stateful_step_count=50, deadline=None)

SUBNET = ipaddress.ip_network("10.240.0.0/16")


def address(index: int) -> str:
    """The index-th host address of the test subnet (distinct indexes give distinct addresses)."""
    return str(SUBNET.network_address + 4 + index)


def name(index: int) -> str:
    return f"00000000-0000-4000-8000-{index:012x}"


scalers = st.builds(
    PoolScaler.normalized,
    batch_size=st.integers(min_value=-2, max_value=300),
    request_threshold_percent=st.integers(min_value=-200, max_value=300),
    max_ip_count=st.integers(min_value=-5, max_value=400),
)


@st.composite
def assignment_lists(draw: st.DrawFn, max_size: int = 60) -> list[tuple[str, str]]:
    """Status ipAssignments: distinct names and distinct addresses, oldest first."""
    indexes = draw(st.lists(st.integers(min_value=0, max_value=5000), unique=True, max_size=max_size))
    return [(name(i), address(i)) for i in indexes]
