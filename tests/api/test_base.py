"""The model base: wire round-trips, validation errors that name the field, and generated CRDs
that a real API server accepts as structural schemas."""

from __future__ import annotations

import enum
import time
from dataclasses import dataclass
from typing import Any, ClassVar, Literal

import pykube
import pytest
import requests

from nodewright.api.base import Model, PrinterColumn, Resource, ValidationError, field
from nodewright.api.meta import Condition


class Color(enum.Enum):
    RED = "Red"
    BLUE = "Blue"


@dataclass(kw_only=True)
class Part(Model):
    """A part of a gadget."""

    part_id: str = field(json="partID")
    count: int = field(default=0, schema={"minimum": 0})


@dataclass(kw_only=True)
class GadgetSpec(Model):
    resource_id: str = field(json="resourceID", description="ARM ID of the thing")
    color: Color = Color.RED
    mode: Literal["fast", "slow"] = "fast"
    parts: list[Part] = field(default_factory=list)
    labels: dict[str, str] = field(default_factory=dict)
    weight: float | None = None
    enabled: bool = field(default=False, omit_empty=False)


@dataclass(kw_only=True)
class GadgetStatus(Model):
    conditions: list[Condition] = field(default_factory=list)
    observed_generation: int = 0


@dataclass(kw_only=True)
class Gadget(Resource):
    API_VERSION: ClassVar[str] = "test.nodewright.io/v1alpha1"
    KIND: ClassVar[str] = "Gadget"
    PLURAL: ClassVar[str] = "gadgets"
    SHORT_NAMES: ClassVar[tuple[str, ...]] = ("gd",)
    PRINTER_COLUMNS: ClassVar[tuple[PrinterColumn, ...]] = (PrinterColumn("Color", ".spec.color"),)

    spec: GadgetSpec
    status: GadgetStatus = field(default_factory=GadgetStatus)


WIRE: dict[str, Any] = {
    "apiVersion": "test.nodewright.io/v1alpha1",
    "kind": "Gadget",
    "metadata": {"name": "g1", "namespace": "default"},
    "spec": {
        "resourceID": "/subscriptions/s/resourceGroups/rg",
        "color": "Blue",
        "mode": "slow",
        "parts": [{"partID": "p1", "count": 2}],
        "labels": {"a": "b"},
        "weight": 1.5,
        "enabled": True,
    },
}


def test_round_trips_the_wire_format() -> None:
    """from_object then to_object gives back the same JSON, non-camelCase names included."""
    gadget = Gadget.from_object(WIRE)
    assert gadget.spec.resource_id == "/subscriptions/s/resourceGroups/rg"
    assert gadget.spec.color is Color.BLUE
    assert gadget.spec.parts == [Part(part_id="p1", count=2)]
    assert gadget.to_object() == WIRE


def test_omits_empty_fields_but_keeps_those_marked_otherwise() -> None:
    """Defaults that are empty are left out; a field with omit_empty=False is always written."""
    spec = GadgetSpec(resource_id="x")
    assert spec.to_dict() == {"resourceID": "x", "color": "Red", "mode": "fast", "enabled": False}


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        pytest.param({}, "spec.resourceID: is required", id="missing-required"),
        pytest.param({"resourceID": 5}, "spec.resourceID: expected a string, got int", id="wrong-type"),
        pytest.param(
            {"resourceID": "x", "color": "Green"}, "spec.color: must be one of 'Red', 'Blue'", id="bad-enum"
        ),
        pytest.param(
            {"resourceID": "x", "mode": "medium"},
            "spec.mode: must be one of 'fast', 'slow'",
            id="bad-literal",
        ),
        pytest.param(
            {"resourceID": "x", "parts": [{"partID": "a", "count": "2"}]},
            "spec.parts[0].count: expected an integer, got a string",
            id="nested-list-item",
        ),
        pytest.param(
            {"resourceID": "x", "enabled": 1},
            "spec.enabled: expected a boolean, got int",
            id="int-is-not-bool",
        ),
        pytest.param(
            {"resourceID": "x", "parts": {}},
            "spec.parts: expected an array, got an object",
            id="object-for-array",
        ),
    ],
)
def test_validation_errors_name_the_field(spec: dict[str, Any], message: str) -> None:
    """Bad input raises ValidationError whose message starts with the JSON path of the field."""
    with pytest.raises(ValidationError) as caught:
        Gadget.from_object({**WIRE, "spec": spec})
    assert str(caught.value).startswith(message)


def test_rejects_an_object_of_another_kind() -> None:
    with pytest.raises(ValidationError, match="expected Gadget"):
        Gadget.from_object({**WIRE, "kind": "Widget"})


def test_schema_describes_types_required_fields_and_hints() -> None:
    """The generated schema is structural: every property typed, required fields listed."""
    schema = Gadget.openapi_schema()
    spec = schema["properties"]["spec"]
    assert schema["required"] == ["spec"]
    assert spec["required"] == ["resourceID"]
    assert spec["properties"]["resourceID"] == {"description": "ARM ID of the thing", "type": "string"}
    assert spec["properties"]["color"] == {"type": "string", "enum": ["Red", "Blue"]}
    assert spec["properties"]["parts"]["items"]["properties"]["count"] == {"type": "integer", "minimum": 0}
    assert spec["properties"]["parts"]["items"]["description"] == "A part of a gadget."
    assert spec["properties"]["labels"] == {"type": "object", "additionalProperties": {"type": "string"}}
    condition = schema["properties"]["status"]["properties"]["conditions"]["items"]
    assert condition["required"] == ["type", "status", "reason", "lastTransitionTime"]


def _served_kind(kube_api: pykube.HTTPClient, deadline: float) -> Any:
    """The Gadget kind once discovery lists it: Established can come a moment before the API
    server's discovery serves the new group version (a 404 then, seen once in CI)."""
    while True:
        try:
            return pykube.object_factory(kube_api, Gadget.API_VERSION, Gadget.KIND)
        except requests.exceptions.HTTPError as error:
            if error.response is None or error.response.status_code != 404 or time.monotonic() > deadline:
                raise
        time.sleep(0.2)


def test_generated_crd_is_accepted_and_served(kube_api: pykube.HTTPClient, namespace: str) -> None:
    """The real API server accepts the generated CRD, prunes unknown fields, enforces the schema
    and serves the status subresource."""
    crd = Gadget.custom_resource_definition()
    crd_object = pykube.object_factory(kube_api, "apiextensions.k8s.io/v1", "CustomResourceDefinition")(
        kube_api, crd
    )
    if not crd_object.exists():
        crd_object.create()
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        crd_object.reload()
        conditions = {
            c["type"]: c["status"] for c in (crd_object.obj.get("status") or {}).get("conditions") or []
        }
        if conditions.get("Established") == "True":
            break
        time.sleep(0.2)
    assert conditions.get("Established") == "True", crd_object.obj.get("status")
    assert conditions.get("NonStructuralSchema") is None

    gadget_kind = _served_kind(kube_api, deadline)
    body = {**WIRE, "metadata": {"name": "g1", "namespace": namespace}}
    body["spec"] = {**WIRE["spec"], "unknownField": "pruned"}
    created = gadget_kind(kube_api, body)
    created.create()
    read = Gadget.from_object(created.obj)
    assert "unknownField" not in created.obj["spec"]
    assert read.spec.parts == [Part(part_id="p1", count=2)]

    bad = gadget_kind(
        kube_api,
        {
            **WIRE,
            "metadata": {"name": "g2", "namespace": namespace},
            "spec": {**WIRE["spec"], "color": "Green"},
        },
    )
    with pytest.raises(pykube.exceptions.HTTPError) as rejected:
        bad.create()
    assert rejected.value.code == 422

    read.status = GadgetStatus(
        observed_generation=1,
        conditions=[
            Condition(
                type="Ready", status="True", reason="Reconciled", last_transition_time="2026-01-01T00:00:00Z"
            )
        ],
    )
    response = kube_api.session.put(
        url=f"{kube_api.url}/apis/{Gadget.API_VERSION}/namespaces/{namespace}/gadgets/g1/status",
        json=read.to_object(),
    )
    response.raise_for_status()
    assert Gadget.from_object(response.json()).status.conditions[0].reason == "Reconciled"
