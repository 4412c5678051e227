"""``ScaleOutOperations``: the scale-outs in flight per scale set, and a joined step kept apart
until its end, so that its failure is reported to its own NodeImage while the scale set's next
step runs (pure bookkeeping, no I/O)."""

from __future__ import annotations

from nodewright.cloud.errors import CloudError
from nodewright.cloud.operations import OperationOutcome
from nodewright.controllers.node_image.scale_out_operations import ScaleOutOperations

SET = "/subscriptions/s/resourceGroups/g/providers/Microsoft.Compute/virtualMachineScaleSets/VMSS-A"


def _outcome(error: CloudError | None = None) -> OperationOutcome:
    return OperationOutcome("compute.scale_out", SET, error, started=0.0, finished=1.0, polls=1)


def test_a_steps_end_marks_it_ended() -> None:
    operations = ScaleOutOperations()
    ended = operations.begin(SET, "cluster", 3)
    running = operations.operation(SET.lower())
    assert running is not None
    assert running.running
    assert running.count == 3
    ended(_outcome())
    done = operations.operation(SET)
    assert done is not None
    assert not done.running
    operations.forget(SET)
    assert operations.operation(SET) is None


def test_a_joined_steps_end_is_kept_apart_from_the_next_step_on_the_same_scale_set() -> None:
    """Joined, the step leaves the scale set to its successor; the first step's failed end does
    not mark the successor ended, and is taken once, by its own NodeImage only."""
    operations = ScaleOutOperations()
    first_ended = operations.begin(SET, "cluster", 2)
    operations.joined(SET)
    assert operations.operation(SET) is None
    assert operations.take_ended_joined("cluster") == []  # still running

    operations.begin(SET, "cluster", 1)
    first_ended(_outcome(CloudError("AllocationFailed")))
    successor = operations.operation(SET)
    assert successor is not None
    assert successor.running, "the first step's end was taken for its successor's"
    assert successor.count == 1

    assert operations.take_ended_joined("another") == []
    (taken,) = operations.take_ended_joined("cluster")
    assert taken[0] == SET
    assert taken[1].count == 2
    assert taken[1].outcome is not None
    assert str(taken[1].outcome.error) == "AllocationFailed"
    assert operations.take_ended_joined("cluster") == []


def test_the_end_of_a_forgotten_step_is_dropped() -> None:
    operations = ScaleOutOperations()
    ended = operations.begin(SET, "cluster", 1)
    operations.forget(SET)
    ended(_outcome())
    assert operations.operation(SET) is None
    assert operations.take_ended_joined("cluster") == []
