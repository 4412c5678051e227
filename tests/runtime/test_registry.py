"""Reconciler registry: found by explicit registration, config module path, or entry point."""

from __future__ import annotations

from collections.abc import Mapping
from importlib import metadata
from pathlib import Path
from typing import Any

import pytest

from nodewright.controllers.main import BUILT_IN_RECONCILERS
from nodewright.runtime.process.registry import (
    ENTRY_POINT_GROUP,
    ReconcilerPlugin,
    ReconcilerRegistry,
    RegistryError,
)
from tests.runtime import sample_reconciler


def setup_here(manager: Any, options: Mapping[str, Any]) -> None:
    """A setup function registered explicitly in the tests."""


HERE = ReconcilerPlugin("here", setup_here)


def test_explicit_registration_of_plugins() -> None:
    """register() takes declared plug-ins and resolves them by name."""
    registry = ReconcilerRegistry()
    registry.register(HERE)
    registry.register(sample_reconciler.PLUGIN)
    assert registry.resolve("here") is HERE
    assert registry.resolve("sample") is sample_reconciler.PLUGIN
    assert registry.names() == ["here", "sample"]


def test_module_path_from_config_wins() -> None:
    """A dotted module path (its PLUGIN, or module:attribute) named in config is imported and used."""
    registry = ReconcilerRegistry()
    registry.register(ReconcilerPlugin("sample", setup_here))
    assert registry.resolve("sample", "tests.runtime.sample_reconciler") is sample_reconciler.PLUGIN
    assert registry.resolve("x", "tests.runtime.sample_reconciler:PLUGIN") is sample_reconciler.PLUGIN


def test_a_bare_setup_function_is_a_plugin_without_checks() -> None:
    """module:setup still works: a plug-in with no option check and no declared rules."""
    plugin = ReconcilerRegistry().resolve("bare", "tests.runtime.sample_reconciler:setup")
    assert plugin == ReconcilerPlugin("bare", sample_reconciler.setup)
    assert plugin.validate_options is None
    assert plugin.rbac_rules == ()


def test_built_in_plugins_declare_everything() -> None:
    """Each built-in reconciler declares its option check and its RBAC rules in its plug-in."""
    assert [plugin.name for plugin in BUILT_IN_RECONCILERS] == [
        "identity-assignment",
        "node-image",
        "node-network-config",
        "workload-identity-federation",
    ]
    for plugin in BUILT_IN_RECONCILERS:
        assert plugin.validate_options is not None, plugin.name
        assert plugin.rbac_rules, plugin.name


@pytest.mark.parametrize(
    ("module", "message"),
    [
        pytest.param("tests.runtime.absent_module", "cannot import reconciler module", id="missing-module"),
        pytest.param("json", "exports no PLUGIN and no setup", id="no-setup"),
        pytest.param("tests.runtime.sample_reconciler:absent", "has no attribute", id="missing-attribute"),
    ],
)
def test_bad_module_paths(module: str, message: str) -> None:
    """Bad module paths raise RegistryError saying what is wrong."""
    with pytest.raises(RegistryError, match=message):
        ReconcilerRegistry().resolve("x", module)


def test_unknown_name() -> None:
    """A name with no registration, module or entry point is an error naming it."""
    with pytest.raises(RegistryError, match="'nowhere' is not registered"):
        ReconcilerRegistry().resolve("nowhere")


@pytest.fixture
def installed_entry_point(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A real installed distribution (a .dist-info on sys.path) declaring one entry point."""
    dist_info = tmp_path / "sample_plugin-1.0.dist-info"
    dist_info.mkdir()
    (dist_info / "METADATA").write_text("Metadata-Version: 2.1\nName: sample-plugin\nVersion: 1.0\n")
    (dist_info / "entry_points.txt").write_text(
        f"[{ENTRY_POINT_GROUP}]\nplugged = tests.runtime.sample_reconciler\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))


def test_entry_point_group(installed_entry_point: None) -> None:
    """An installed package's nodewright.reconcilers entry point is found by name."""
    names = [entry.name for entry in metadata.entry_points(group=ENTRY_POINT_GROUP)]
    assert "plugged" in names
    assert ReconcilerRegistry().resolve("plugged") is sample_reconciler.PLUGIN
