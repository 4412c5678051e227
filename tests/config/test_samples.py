"""Every sample under config/samples is a valid object of its kind, and every kind has one."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from nodewright.api import RESOURCES

SAMPLES = Path(__file__).resolve().parents[2] / "config" / "samples"
MODELS = {(resource.API_VERSION, resource.KIND): resource for resource in RESOURCES}


def documents() -> list[tuple[str, dict[str, Any]]]:
    return [
        (str(path.relative_to(SAMPLES)), document)
        for path in sorted(SAMPLES.rglob("*.yaml"))
        for document in yaml.safe_load_all(path.read_text())
        if document
    ]


@pytest.mark.parametrize(("path", "document"), documents(), ids=[path for path, _ in documents()])
def test_sample_parses_with_its_model(path: str, document: dict[str, Any]) -> None:
    """A sample of one of our kinds reads into its model without a validation error."""
    model = MODELS.get((document["apiVersion"], document["kind"]))
    if model is None:
        assert document["apiVersion"] == "v1", f"{path}: a sample of an unknown kind"
        return
    assert model.from_object(document).name == document["metadata"]["name"]


def test_every_kind_has_a_sample() -> None:
    """Each CRD kind we serve is shown by at least one sample."""
    shown = {(document["apiVersion"], document["kind"]) for _, document in documents()}
    assert sorted(set(MODELS) - shown) == []
