"""Manager config: typed YAML, defaults, and one-line errors naming file and key."""

from __future__ import annotations

from pathlib import Path

import pytest

from nodewright.runtime.process.config import ConfigError, ManagerConfig, load_config, parse_config


def test_compressed_kinds_reach_the_cache() -> None:
    """``cache.compressedKinds`` is read as a list of kind names."""
    assert parse_config({"cache": {"compressedKinds": ["Pod", "Node"]}}).cache.compressed_kinds == [
        "Pod",
        "Node",
    ]


def test_defaults_match_controller_runtime() -> None:
    """An empty file gives controller-runtime's defaults (metrics as kubebuilder now scaffolds
    them: HTTPS on :8443 behind authentication and authorization)."""
    config = parse_config(None)
    assert config == ManagerConfig()
    assert (config.metrics.bind_address, config.metrics.secure, config.metrics.cert_dir) == (
        ":8443",
        True,
        "",
    )
    assert config.health.bind_address == ":8081"
    assert (config.leader_election.lease_duration, config.leader_election.renew_deadline) == (15, 10)
    assert config.leader_election.retry_period == 2
    assert config.cache_sync_timeout == 120
    assert config.graceful_shutdown_timeout == 30


def test_full_file(tmp_path: Path) -> None:
    """Every section is read from camelCase keys into typed fields."""
    path = tmp_path / "config.yaml"
    path.write_text(
        """
metrics: {bindAddress: "127.0.0.1:0"}
health: {bindAddress: ":0"}
leaderElection: {enabled: false, namespace: kube-system, name: nw, leaseDuration: 4,
                 renewDeadline: 3, retryPeriod: 0.5}
logging: {level: debug, format: text}
cacheSyncTimeout: 10
gracefulShutdownTimeout: 5.5
reconcilers:
  sample: {module: tests.runtime.sample_reconciler, maxConcurrentReconciles: 3, options: {label: x}}
  dormant: {enabled: false}
"""
    )
    config = load_config(path)
    assert config.metrics.bind_address == "127.0.0.1:0"
    assert config.leader_election.enabled is False
    assert config.leader_election.retry_period == 0.5
    assert config.logging.format == "text"
    assert config.graceful_shutdown_timeout == 5.5
    assert config.reconcilers["sample"].max_concurrent_reconciles == 3
    assert config.reconcilers["sample"].options == {"label": "x"}
    assert config.reconcilers["dormant"].enabled is False


@pytest.mark.parametrize(
    ("text", "message"),
    [
        pytest.param(
            "leaderElection: {leaseDuration: abc}",
            "config.yaml: leaderElection.leaseDuration: expected a number, got 'abc'",
            id="wrong-type",
        ),
        pytest.param(
            "metricz: {}", "config.yaml: metricz: unknown key (expected one of:", id="unknown-top-key"
        ),
        pytest.param(
            "cache: {compressedKinds: Pod}",
            "config.yaml: cache.compressedKinds: expected a list, got 'Pod'",
            id="string-for-list",
        ),
        pytest.param(
            "cache: {compressedKinds: [Pod, 3]}",
            "config.yaml: cache.compressedKinds[1]: expected a string, got 3",
            id="wrong-list-item",
        ),
        pytest.param(
            "reconcilers: {a: {enabeld: true}}",
            "config.yaml: reconcilers.a.enabeld: unknown key",
            id="unknown-nested-key",
        ),
        pytest.param(
            "reconcilers: {a: {enabled: 'yes'}}",
            "config.yaml: reconcilers.a.enabled: expected a boolean, got 'yes'",
            id="string-for-bool",
        ),
        pytest.param(
            "reconcilers: {a: {maxConcurrentReconciles: true}}",
            "config.yaml: reconcilers.a.maxConcurrentReconciles: expected an integer, got True",
            id="bool-for-int",
        ),
        pytest.param(
            "logging: {format: xml}", "config.yaml: logging.format: expected one of 'json', 'text'", id="enum"
        ),
        pytest.param(
            "leaderElection: {leaseDuration: 5}",
            "config.yaml: leaderElection.leaseDuration: must be greater than renewDeadline",
            id="lease-not-above-renew",
        ),
        pytest.param(
            "leaderElection: {renewDeadline: 2}",
            "config.yaml: leaderElection.renewDeadline: must be greater than 1.2 x retryPeriod",
            id="renew-not-above-retry",
        ),
        pytest.param("- 1", "config.yaml: (top level): expected a mapping", id="not-a-mapping"),
        pytest.param("metrics: {bindAddress: nowhere}", "config.yaml: metrics.bindAddress:", id="address"),
        pytest.param("a: [", "config.yaml: invalid YAML at line", id="yaml-syntax"),
    ],
)
def test_errors_are_one_line_naming_file_and_key(tmp_path: Path, text: str, message: str) -> None:
    """Bad configs raise ConfigError with one line that starts with file and key."""
    path = tmp_path / "config.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError) as raised:
        load_config(path)
    line = str(raised.value).replace(str(tmp_path) + "/", "")
    assert line.startswith(message)
    assert "\n" not in line


def test_missing_file(tmp_path: Path) -> None:
    """A missing file is one line too."""
    with pytest.raises(ConfigError, match="cannot read"):
        load_config(tmp_path / "absent.yaml")
