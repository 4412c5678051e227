"""Shadow migration off pod identity, end to end in the local environment: a Deployment's pod uses
pod identity through an AzureIdentityBinding; the binding is opted in (``shadow``), its
ServiceAccount federated, and a real token (TokenRequest against the API server) exchanged at the
emulated Entra endpoint (signature checked against the API server's JWKS): Verified, with pod
identity untouched. ``cutover`` labels the Deployment's template; kube-controller-manager rolls it
(kwok runs the pods); the scale set's identity goes only once no pod without the label needs it.
Going back to ``shadow`` takes the label off; removing the annotation withdraws the
ServiceAccount's request and the condition."""

from __future__ import annotations

import time
from typing import Any

import pykube

from nodewright.api.aadpodidentity.v1 import WORKLOAD_IDENTITY_LABEL, AzureIdentityBinding
from nodewright.controllers.federation.decisions import CLIENT_ID_ANNOTATION, IDENTITY_ANNOTATION
from nodewright.controllers.federation.migration import (
    CONDITION_MIGRATION,
    MIGRATED_BY_ANNOTATION,
    MIGRATION_ANNOTATION,
)
from nodewright.controllers.federation.owners import WORKLOAD_KINDS
from nodewright.controllers.federation.reconciler import SERVICE_ACCOUNT
from nodewright.controllers.identity.options import AZURE_IDENTITY_BINDING
from nodewright.runtime.kube.kinds import POD
from tests.controllers.federation.helpers import ISSUER, Federation
from tests.controllers.federation.test_token_exchange import api_server_jwks
from tests.waiting import eventually

DEPLOYMENT = WORKLOAD_KINDS["Deployment"]


def _start(federation: Federation) -> None:
    """Federation with the migration (tokens exchanged at the emulator's Entra endpoint), then the
    identity reconciler: set up second, it shares the pods index the migration added first."""
    emulator = federation.emulator
    migration = {"enabled": True, "authorityHost": emulator.endpoint.split("://", 1)[1]}
    options = {"tenantId": emulator.state.tenant_id, "migration": migration}
    federation.start(propagation=0.5, options=options, with_identity=True)


def _deploy(federation: Federation, node: str, selector: str) -> None:
    world = federation.world
    world.client.create(SERVICE_ACCOUNT, {"metadata": {"name": "web-sa", "namespace": world.namespace}})
    labels = {"app": "web", "aadpodidbinding": selector}
    world.client.create(
        DEPLOYMENT,
        {
            "metadata": {"name": "web", "namespace": world.namespace},
            "spec": {
                "replicas": 1,
                "selector": {"matchLabels": {"app": "web"}},
                "template": {
                    "metadata": {"labels": labels},
                    "spec": {
                        "nodeName": node,
                        "serviceAccountName": "web-sa",
                        "containers": [{"name": "app", "image": "busybox"}],
                    },
                },
            },
        },
    )


def _stage(federation: Federation) -> tuple[str, str]:
    world = federation.world
    binding = AzureIdentityBinding.from_object(
        world.client.get(AZURE_IDENTITY_BINDING, "web-binding", world.namespace)
    )
    found = next((c for c in binding.status.conditions if c.type == CONDITION_MIGRATION), None)
    return (found.status, found.reason) if found is not None else ("", "")


def _annotate(federation: Federation, mode: str) -> None:
    world = federation.world
    body = {"metadata": {"annotations": {MIGRATION_ANNOTATION: mode}}}
    world.client.patch(AZURE_IDENTITY_BINDING, "web-binding", body, world.namespace)


def _pods(federation: Federation) -> list[dict[str, Any]]:
    return federation.client.list(POD, federation.world.namespace, label_selector="app=web").items


def _needs_pod_identity(pod: dict[str, Any]) -> bool:
    labels = pod["metadata"].get("labels") or {}
    running = pod["spec"].get("nodeName") and pod.get("status", {}).get("phase") not in (
        "Succeeded",
        "Failed",
    )
    return bool(running) and labels.get(WORKLOAD_IDENTITY_LABEL) != "true"


def test_a_binding_is_federated_verified_and_cut_over_without_losing_its_identity_early(
    federation: Federation, kube_api: pykube.HTTPClient
) -> None:
    world, emulator = federation.world, federation.emulator
    emulator.entra.jwks_provider = lambda: api_server_jwks(kube_api)
    web = federation.identity("web")
    scale_set = world.scale_set(world.resource_group("nodes"), "pool", capacity=1)
    world.start_nodes()
    node = world.nodes_of(scale_set)[0]
    world.azure_identity("web", web, world.client_id_of(web))
    world.binding("web-binding", "web", "web")
    _deploy(federation, node, world.selector("web"))
    _start(federation)
    eventually(lambda: world.identities_on(scale_set) == {web.lower()}, message="pod identity assigned")

    _annotate(federation, "shadow")
    eventually(lambda: _stage(federation) == ("True", "Verified"), timeout=60, message="Verified")
    annotations = federation.annotations("web-sa")
    assert annotations[IDENTITY_ANNOTATION] == web
    assert annotations[MIGRATED_BY_ANNOTATION] == f"{world.namespace}/web-binding"
    assert annotations[CLIENT_ID_ANNOTATION] == world.client_id_of(web)
    subject = f"system:serviceaccount:{world.namespace}:web-sa"
    assert [(e.issuer, e.subject) for e in emulator.entra.exchanges if e.granted] == [(ISSUER, subject)]
    template = world.client.get(DEPLOYMENT, "web", world.namespace)["spec"]["template"]
    assert WORKLOAD_IDENTITY_LABEL not in template["metadata"]["labels"], "shadow changes no workload"
    assert world.identities_on(scale_set) == {web.lower()}, "pod identity keeps working in shadow"
    assert [a.spec.pod for a in world.assigned()] == [p["metadata"]["name"] for p in _pods(federation)]

    _annotate(federation, "cutover")
    deadline, guarded = time.monotonic() + 90, 0
    while time.monotonic() < deadline:
        on_scale_set = world.identities_on(scale_set)  # read before the pods: a pod seen after it ran then
        pods = _pods(federation)
        if any(_needs_pod_identity(p) for p in pods):
            assert on_scale_set == {web.lower()}, f"identity removed while {len(pods)} pods still need it"
            guarded += 1
        elif pods and not on_scale_set and not world.assigned():
            break
        time.sleep(0.05)
    else:
        raise AssertionError(f"not cut over: {_stage(federation)}, {world.identities_on(scale_set)}")
    assert _stage(federation) == ("True", "CutOver")
    assert guarded > 0, "the check never saw the old pod"
    [pod] = [p for p in _pods(federation) if not p["metadata"].get("deletionTimestamp")]
    assert pod["metadata"]["labels"][WORKLOAD_IDENTITY_LABEL] == "true"
    assert pod["spec"]["serviceAccountName"] == "web-sa"

    _annotate(federation, "shadow")  # back: the label nodewright put on the template comes off
    eventually(lambda: _stage(federation) == ("True", "Verified"), timeout=60, message="back to Verified")
    template = world.client.get(DEPLOYMENT, "web", world.namespace)["spec"]["template"]
    assert WORKLOAD_IDENTITY_LABEL not in template["metadata"]["labels"]
    body = {"metadata": {"annotations": {MIGRATION_ANNOTATION: None}}}
    world.client.patch(AZURE_IDENTITY_BINDING, "web-binding", body, world.namespace)
    eventually(lambda: _stage(federation) == ("", ""), timeout=60, message="condition taken back")
    eventually(
        lambda: IDENTITY_ANNOTATION not in federation.annotations("web-sa"), message="request withdrawn"
    )
    assert MIGRATED_BY_ANNOTATION not in federation.annotations("web-sa")
