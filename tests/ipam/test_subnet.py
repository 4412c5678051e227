"""Subnet exhaustion with hysteresis: exhausted below one batch free, recovered at two batches."""

from __future__ import annotations

import pytest

from nodewright.ipam import subnet_exhausted


@pytest.mark.parametrize(
    ("available", "was_exhausted", "expected"),
    [
        pytest.param(100, False, False, id="plenty"),
        pytest.param(16, False, False, id="exactly-one-batch-left"),
        pytest.param(15, False, True, id="less-than-a-batch-enters"),
        pytest.param(0, False, True, id="empty"),
        pytest.param(20, True, True, id="stays-until-two-batches"),
        pytest.param(31, True, True, id="just-below-recovery"),
        pytest.param(32, True, False, id="recovers-at-two-batches"),
    ],
)
def test_subnet_exhausted_table(available: int, was_exhausted: bool, expected: bool) -> None:
    """With batch 16: enter below 16 free, leave at 32 free; in between the previous state holds."""
    assert subnet_exhausted(available=available, batch_size=16, was_exhausted=was_exhausted) is expected


def test_batch_below_one_counts_as_one() -> None:
    """A nonsense batch size does not make every subnet look healthy."""
    assert subnet_exhausted(available=0, batch_size=0, was_exhausted=False)
