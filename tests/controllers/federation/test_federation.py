"""The workload identity federation reconciler against a real API server and the ARM emulator:
credentials follow ServiceAccounts (create, move, delete), the 21st ServiceAccount on one
identity is refused with a condition naming the accounts, faults converge without storms, and a
restart mid-way leaves no orphan while foreign credentials are left alone."""

from __future__ import annotations

from nodewright.controllers.federation.decisions import (
    CLIENT_ID_ANNOTATION,
    IDENTITY_ANNOTATION,
    RECORD_ANNOTATION,
    TENANT_ID_ANNOTATION,
    subject_of,
)
from nodewright.controllers.federation.reconciler import SERVICE_ACCOUNT
from nodewright.controllers.identity.options import AZURE_IDENTITY
from nodewright.runtime.kube.kinds import EVENT
from tests.cloud.helpers import cloud_for
from tests.controllers.federation.helpers import ISSUER, TENANT, Federation
from tests.waiting import eventually


def test_credentials_follow_service_accounts(federation: Federation) -> None:
    """An account naming an AzureIdentity gets a credential (issuer, subject, audience) and, after
    propagation, the client-id and tenant-id annotations; re-pointed at another identity's resource
    ID, its credential moves; deleted, its credential goes. A foreign credential stays untouched."""
    web, batch = federation.identity("web"), federation.identity("batch")
    service = cloud_for(federation.emulator).identities
    service.put_federated_credential(web, "hand-made", issuer="https://elsewhere", subject="someone")
    federation.client.create(
        AZURE_IDENTITY,
        {
            "metadata": {"name": "web", "namespace": federation.world.namespace},
            "spec": {"type": 0, "resourceID": web, "clientID": "stale"},
        },
    )
    federation.account("app", "web")
    federation.start()
    subject = subject_of(federation.world.namespace, "app")
    eventually(
        lambda: any(s == subject for _, s, _ in federation.credentials(web).values()), message="FIC created"
    )
    (name,) = [n for n, (_, s, _) in federation.credentials(web).items() if s == subject]
    assert federation.credentials(web)[name] == (ISSUER, subject, ["api://AzureADTokenExchange"])
    eventually(lambda: federation.status("app").get("reason") == "Ready", message="Ready after propagation")
    annotations = federation.annotations("app")
    assert annotations[CLIENT_ID_ANNOTATION] == service.get_identity(web).client_id
    assert annotations[TENANT_ID_ANNOTATION] == TENANT
    assert annotations[RECORD_ANNOTATION] == f"{web.lower()}#{name}"

    federation.client.patch(
        SERVICE_ACCOUNT,
        "app",
        {"metadata": {"annotations": {IDENTITY_ANNOTATION: batch}}},
        federation.world.namespace,
    )
    eventually(lambda: name not in federation.credentials(web), message="FIC removed from the old identity")
    eventually(
        lambda: any(s == subject for _, s, _ in federation.credentials(batch).values()), message="FIC moved"
    )
    eventually(
        lambda: (
            federation.annotations("app").get(CLIENT_ID_ANNOTATION) == service.get_identity(batch).client_id
        ),
        message="client-id follows",
    )

    federation.client.delete(SERVICE_ACCOUNT, "app", federation.world.namespace)
    eventually(lambda: federation.credentials(batch) == {}, message="FIC deleted with the account")
    eventually(lambda: federation.get_account("app") is None, message="finalizer released")
    assert set(federation.credentials(web)) == {"hand-made"}, "the foreign credential is left alone"


def test_the_twenty_first_account_on_one_identity_is_refused(federation: Federation) -> None:
    """21 accounts on one identity: 20 credentials; the last account gets CredentialLimitReached
    naming the accounts, a Warning Event, and no credential."""
    shared = federation.identity("shared")
    for index in range(21):
        federation.account(f"sa-{index:02d}", shared)
    federation.start(propagation=0)
    eventually(lambda: len(federation.credentials(shared)) == 20, timeout=60, message="20 credentials")
    eventually(
        lambda: federation.status("sa-20").get("reason") == "CredentialLimitReached",
        timeout=60,
        message="refused",
    )
    message = federation.status("sa-20")["message"]
    assert f"{federation.world.namespace}/sa-00" in message
    assert f"{federation.world.namespace}/sa-20" in message
    assert not any(
        s == subject_of(federation.world.namespace, "sa-20")
        for _, s, _ in federation.credentials(shared).values()
    )
    assert CLIENT_ID_ANNOTATION not in federation.annotations("sa-20")

    def refusal_recorded() -> bool:  # the recorder sends Events in the background
        events = federation.client.list(EVENT, federation.world.namespace).items
        return any(
            e.get("reason") == "CredentialLimitReached" and e["involvedObject"]["name"] == "sa-20"
            for e in events
        )

    eventually(refusal_recorded, message="a Warning Event for sa-20")


def test_faults_converge_without_storms_and_a_restart_leaves_no_orphan(federation: Federation) -> None:
    """429s and 500s on the credential API converge with a bounded number of requests. A manager
    stopped after recording a credential but before it landed, with the account deleted while it
    was down: the next manager deletes nothing foreign, leaves no orphan and releases the account."""
    web = federation.identity("web")
    faults = federation.emulator.faults
    faults.throttle("FederatedIdentityCredentials.create_or_update", times=2, retry_after=1)
    faults.server_error("FederatedIdentityCredentials.list", times=2, status=500)
    for name in ("a", "b", "c"):
        federation.account(name, web)
    federation.start(propagation=0)
    eventually(lambda: len(federation.credentials(web)) == 3, timeout=60, message="three credentials")
    puts = federation.emulator.requests.entries("FederatedIdentityCredentials.create_or_update")
    assert len(puts) <= 3 + 2 + 1, f"no storm: {len(puts)} PUTs for 3 credentials and 2 throttles"
    federation.stop()

    faults.server_error("FederatedIdentityCredentials.create_or_update", times=10_000, status=500)
    federation.account("d", web)
    federation.start(propagation=0)
    eventually(
        lambda: RECORD_ANNOTATION in federation.annotations("d"), message="intent recorded before the PUT"
    )
    federation.stop()
    assert not any(
        s == subject_of(federation.world.namespace, "d") for _, s, _ in federation.credentials(web).values()
    )
    federation.client.delete(SERVICE_ACCOUNT, "d", federation.world.namespace)
    federation.client.delete(SERVICE_ACCOUNT, "a", federation.world.namespace)
    faults.clear()
    federation.start(propagation=0)
    eventually(
        lambda: federation.get_account("d") is None and federation.get_account("a") is None,
        message="released",
    )
    eventually(lambda: len(federation.credentials(web)) == 2, message="a's credential deleted")
    subjects = {s for _, s, _ in federation.credentials(web).values()}
    assert subjects == {subject_of(federation.world.namespace, n) for n in ("b", "c")}
