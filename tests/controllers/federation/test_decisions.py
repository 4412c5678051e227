"""The pure plan of one identity's federated credentials, table-tested."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from nodewright.cloud.msi import FederatedCredential
from nodewright.controllers.federation.decisions import (
    AccountInfo,
    credential_name,
    plan_identity,
    subject_of,
)

IDENTITY = "/subscriptions/s/resourcegroups/g/providers/microsoft.managedidentity/userassignedidentities/web"
OTHER = IDENTITY.replace("/web", "/other")
ISSUER = "https://issuer.example"
NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)


def account(
    name: str, *, wanted: str = IDENTITY, record: tuple[str, str] | None = None, deleting: bool = False
) -> AccountInfo:
    return AccountInfo("ns", name, wanted=wanted, record=record, deleting=deleting, created=name)


def ours(name: str) -> FederatedCredential:
    return FederatedCredential(credential_name("ns", name), ISSUER, subject_of("ns", name))


def plan(
    accounts: list[AccountInfo], existing: list[FederatedCredential]
) -> tuple[list[str], list[str], dict[str, str]]:
    result = plan_identity(
        IDENTITY, accounts, existing, issuer=ISSUER, now=NOW, propagation=timedelta(seconds=5)
    )
    return (
        [credential.name for _, credential in result.put],
        [name for _, name in result.delete],
        {key.split("/")[1]: outcome.reason for key, outcome in result.outcomes.items()},
    )


@pytest.mark.parametrize(
    ("accounts", "existing", "expected"),
    [
        pytest.param(
            [account("a")], [], ([credential_name("ns", "a")], [], {"a": "Propagating"}), id="new-account"
        ),
        pytest.param(
            [account("a", record=(IDENTITY, credential_name("ns", "a")))],
            [ours("a")],
            ([], [], {"a": "Ready"}),
            id="in-place-and-propagated",
        ),
        pytest.param(
            [account("a", wanted="", record=(IDENTITY, credential_name("ns", "a")))],
            [ours("a")],
            ([], [credential_name("ns", "a")], {}),
            id="no-longer-wanted-deleted",
        ),
        pytest.param(
            [account("a", record=(IDENTITY, credential_name("ns", "a")), deleting=True)],
            [ours("a")],
            ([], [credential_name("ns", "a")], {}),
            id="account-deleted",
        ),
        pytest.param(
            [account("a", record=(OTHER, "old"))],
            [],
            ([], [], {"a": "Moving"}),
            id="moving-waits-for-the-old-credential",
        ),
        pytest.param(
            [account("a")],
            [FederatedCredential("hand-made", ISSUER, subject_of("ns", "a"))],
            ([], [], {"a": "FederatedByForeignCredential"}),
            id="foreign-credential-used-not-touched",
        ),
    ],
)
def test_plan_identity(
    accounts: list[AccountInfo],
    existing: list[FederatedCredential],
    expected: tuple[list[str], list[str], dict[str, str]],
) -> None:
    """Each account's credential is written, kept, moved or deleted; foreign ones are never written."""
    assert plan(accounts, existing) == expected


def test_twenty_slots_count_foreign_credentials_and_refuse_with_names() -> None:
    """Foreign credentials take slots; accounts holding a credential keep theirs; the rest are
    refused with a message naming the accounts involved."""
    foreign = [FederatedCredential(f"hand-{i}", ISSUER, f"someone-{i}") for i in range(2)]
    holders = [account(f"h{i:02d}", record=(IDENTITY, credential_name("ns", f"h{i:02d}"))) for i in range(17)]
    newcomers = [account(f"n{i}") for i in range(3)]
    result = plan_identity(
        IDENTITY,
        [*newcomers, *holders],
        [*foreign, *(ours(a.name) for a in holders)],
        issuer=ISSUER,
        now=NOW,
        propagation=timedelta(0),
    )
    assert [a.name for a, _ in result.put] == ["n0"]
    refused = {key: o for key, o in result.outcomes.items() if o.reason == "CredentialLimitReached"}
    assert set(refused) == {"ns/n1", "ns/n2"}
    assert "ns/h00" in refused["ns/n1"].message
    assert "ns/n2" in refused["ns/n1"].message
    assert "foreign: 2" in refused["ns/n1"].message


def test_credential_names_are_valid_and_bounded() -> None:
    """Names use only Azure's characters and stay within 120, distinct for distinct accounts."""
    long_name = credential_name("ns", "x" * 300)
    assert len(long_name) == 120
    assert credential_name("a.b", "c") == "nodewright-a-b-c"
    assert credential_name("ns", "x" * 300) != credential_name("ns", "x" * 299)
