"""The shadow migration's pure parts: the mode annotation, the stage a binding is in, the options,
and the identity reconciler's rule that a cut-over binding gives no pod identity to pods labelled
for workload identity (and still does to the others)."""

from __future__ import annotations

import pytest

from nodewright.api.aadpodidentity.v1 import AzureIdentity, AzureIdentityBinding
from nodewright.controllers.federation.migration import (
    MIGRATION_ANNOTATION,
    Account,
    MigrationMode,
    Owner,
    accounts_of,
    migration_stage,
    parse_mode,
)
from nodewright.controllers.federation.options import parse_options
from nodewright.controllers.identity.decisions import PodInfo, match_pods
from nodewright.runtime.process.config import ConfigError

IDENTITY = "/subscriptions/s/resourceGroups/g/providers/Microsoft.ManagedIdentity/userAssignedIdentities/web"
READY = ("True", "Ready", "credential written")


def KIND_OF(kind: str) -> dict[str, str]:  # noqa: N802 - reads as a constant at the call sites
    return {"apiVersion": "aadpodidentity.k8s.io/v1", "kind": kind}


def _account(name: str, **changes: object) -> Account:
    values: dict[str, object] = {"asks_for": IDENTITY, "federation": READY, "client_id": "c", "uid": name}
    values.update(changes)
    return Account("ns", name, **values)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("value", "mode"),
    [
        ("", MigrationMode.OFF),
        ("shadow", MigrationMode.SHADOW),
        (" CutOver ", MigrationMode.CUTOVER),
        ("yes", None),
    ],
)
def test_parse_mode(value: str, mode: MigrationMode | None) -> None:
    assert parse_mode({MIGRATION_ANNOTATION: value} if value else {}) is mode


def test_accounts_of_pods_default_to_the_default_account() -> None:
    pods = [
        {"metadata": {"namespace": "a"}, "spec": {"serviceAccountName": "web"}},
        {"metadata": {"namespace": "a"}, "spec": {}},
        {"metadata": {"namespace": "a"}, "spec": {"serviceAccountName": "web"}},
    ]
    assert accounts_of(pods) == [("a", "default"), ("a", "web")]


@pytest.mark.parametrize(
    ("mode", "accounts", "verified", "failures", "owners", "expected"),
    [
        pytest.param(MigrationMode.SHADOW, [], (), {}, ([], []), ("False", "NoPods"), id="no-pods"),
        pytest.param(
            MigrationMode.SHADOW,
            [_account("a", exists=False)],
            (),
            {},
            ([], []),
            ("False", "ServiceAccountMissing"),
            id="missing",
        ),
        pytest.param(
            MigrationMode.SHADOW,
            [_account("a", asks_for="/other")],
            (),
            {},
            ([], []),
            ("False", "ServiceAccountConflict"),
            id="conflict",
        ),
        pytest.param(
            MigrationMode.SHADOW,
            [_account("a", federation=("False", "TooManyCredentials", "21st"))],
            (),
            {},
            ([], []),
            ("False", "FederationRefused"),
            id="refused",
        ),
        pytest.param(
            MigrationMode.SHADOW,
            [_account("a", federation=("False", "Propagating", "")), _account("b")],
            ("ns/b",),
            {},
            ([], []),
            ("False", "Federating"),
            id="propagating",
        ),
        pytest.param(
            MigrationMode.CUTOVER,
            [_account("a")],
            (),
            {"ns/a": "AADSTS70021: no match"},
            ([], []),
            ("False", "VerificationFailed"),
            id="refused-exchange",
        ),
        pytest.param(
            MigrationMode.CUTOVER, [_account("a")], (), {}, ([], []), ("False", "Verifying"), id="verifying"
        ),
        pytest.param(
            MigrationMode.SHADOW,
            [_account("a")],
            ("ns/a",),
            {},
            ([], []),
            ("True", "Verified"),
            id="verified",
        ),
        pytest.param(
            MigrationMode.CUTOVER,
            [_account("a")],
            ("ns/a",),
            {},
            ([Owner("Deployment", "ns", "web")], []),
            ("False", "CuttingOver"),
            id="label-failed",
        ),
        pytest.param(
            MigrationMode.CUTOVER,
            [_account("a")],
            ("ns/a",),
            {},
            ([], ["ns/bare"]),
            ("False", "CuttingOver"),
            id="bare-pod",
        ),
        pytest.param(
            MigrationMode.CUTOVER,
            [_account("a")],
            ("ns/a",),
            {},
            ([], []),
            ("True", "CutOver"),
            id="cut-over",
        ),
    ],
)
def test_migration_stage(
    *,
    mode: MigrationMode,
    accounts: list[Account],
    verified: tuple[str, ...],
    failures: dict[str, str],
    owners: tuple[list[Owner], list[str]],
    expected: tuple[str, str],
) -> None:
    stage = migration_stage(
        mode,
        IDENTITY,
        accounts,
        verified=verified,
        failures=failures,
        unlabelled=owners[0],
        unowned=owners[1],
    )
    assert (stage.status, stage.reason) == expected
    assert stage.message


def test_a_cut_over_binding_gives_no_pod_identity_to_labelled_pods_only() -> None:
    identity = AzureIdentity.from_object(
        {
            **KIND_OF("AzureIdentity"),
            "metadata": {"name": "web", "namespace": "ns"},
            "spec": {"type": 0, "resourceID": IDENTITY, "clientID": "c"},
        }
    )
    binding_body = {
        **KIND_OF("AzureIdentityBinding"),
        "metadata": {"name": "b", "namespace": "ns"},
        "spec": {"azureIdentity": "web", "selector": "web"},
    }
    cut_over = {
        **binding_body,
        "status": {
            "conditions": [
                {
                    "type": "WorkloadIdentityMigration",
                    "status": "True",
                    "reason": "CutOver",
                    "message": "m",
                    "lastTransitionTime": "2026-12-01T00:00:00Z",
                }
            ]
        },
    }
    old = PodInfo("ns", "old", node_name="n", binding_label="web")
    new = PodInfo("ns", "new", node_name="n", binding_label="web", workload_identity=True)
    shadow = match_pods([old, new], [AzureIdentityBinding.from_object(binding_body)], [identity])
    assert [m.pod.name for m in shadow] == ["new", "old"], "before the cutover both keep pod identity"
    after = match_pods([old, new], [AzureIdentityBinding.from_object(cut_over)], [identity])
    assert [m.pod.name for m in after] == ["old"]


def test_migration_options() -> None:
    base = {"issuer": "https://issuer", "tenantId": "t"}
    parsed = parse_options({**base, "migration": {"enabled": True, "authorityHost": "login.example"}})
    assert (parsed.migration, parsed.authority_host) == (True, "login.example")
    assert parse_options(base).migration is False
    with pytest.raises(ConfigError, match=r"options.tenantId: required when migration is enabled"):
        parse_options({"issuer": "https://issuer", "migration": {"enabled": True}})
    with pytest.raises(ConfigError, match=r"options.migration.enabled: expected true or false"):
        parse_options({**base, "migration": {"enabled": "yes"}})
    with pytest.raises(ConfigError, match=r"options.migration.authorityHost: expected a host name"):
        parse_options({**base, "migration": {"authorityHost": "https://login.example/"}})
