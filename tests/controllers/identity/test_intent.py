"""The creation-time ownership intent of an AzureAssignedIdentity (``intent``): it stands for the
status only while no status was ever written."""

from __future__ import annotations

from typing import Any

from nodewright.controllers.identity.intent import intent_annotations, recorded_target, with_recorded_intent

TARGET = "/subscriptions/s/resourcegroups/rg/providers/microsoft.compute/virtualmachinescalesets/pool"


def obj(annotations: dict[str, str] | None = None, status: dict[str, Any] | None = None) -> dict[str, Any]:
    body: dict[str, Any] = {
        "metadata": {"name": "a", "namespace": "default", "annotations": annotations or {}}
    }
    if status is not None:
        body["status"] = status
    return body


def test_a_new_object_reads_as_its_intent() -> None:
    created = obj(intent_annotations(TARGET.upper(), adding=True))
    assert recorded_target(created) == TARGET
    assert with_recorded_intent(created)["status"] == {"target": TARGET, "addedByNodewright": True}
    assert "status" not in created, "the cached object is not changed"


def test_any_written_status_wins_over_the_intent() -> None:
    written = obj(intent_annotations(TARGET, adding=True), {"status": "Created", "target": ""})
    assert recorded_target(written) == ""
    assert with_recorded_intent(written) is written


def test_an_object_without_intent_or_status_records_nothing() -> None:
    mic_written = obj()
    assert recorded_target(mic_written) == ""
    assert with_recorded_intent(mic_written) is mic_written
    not_adding = obj(intent_annotations(TARGET, adding=False))
    assert with_recorded_intent(not_adding)["status"]["addedByNodewright"] is False
