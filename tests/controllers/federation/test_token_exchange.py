"""A real exchange: the API server issues a ServiceAccount token (TokenRequest, audience
api://AzureADTokenExchange), and the emulated Entra endpoint grants an access token for it only
once the federation reconciler has made the ServiceAccount's credential, checking the signature
against the API server's own JWKS (/openid/v1/jwks)."""

from __future__ import annotations

import json
from typing import Any

import pykube

from nodewright.cloud.msi import FEDERATION_AUDIENCE
from tests.cloud.helpers import cloud_for
from tests.cloud.test_federated_credentials import exchange
from tests.controllers.federation.helpers import ISSUER, Federation
from tests.waiting import eventually


def service_account_token(api: pykube.HTTPClient, namespace: str, name: str) -> str:
    body = {
        "apiVersion": "authentication.k8s.io/v1",
        "kind": "TokenRequest",
        "spec": {"audiences": [FEDERATION_AUDIENCE]},
    }
    response = api.post(url=f"namespaces/{namespace}/serviceaccounts/{name}/token", data=json.dumps(body))
    response.raise_for_status()
    return str(response.json()["status"]["token"])


def api_server_jwks(api: pykube.HTTPClient) -> dict[str, Any]:
    response = api.session.get(f"{api.url}/openid/v1/jwks")
    response.raise_for_status()
    document: dict[str, Any] = response.json()
    return document


def test_a_service_account_token_is_exchanged_once_its_credential_exists(
    federation: Federation, kube_api: pykube.HTTPClient
) -> None:
    """Before the credential: AADSTS70021. After the reconciler reports Ready: a token, for the
    federated account only; the API server's issuer is the one the reconciler wrote."""
    web = federation.identity("web")
    client_id = str(cloud_for(federation.emulator).identities.get_identity(web).client_id)
    federation.emulator.entra.jwks_provider = lambda: api_server_jwks(kube_api)
    namespace = federation.world.namespace
    federation.account("app", web)
    federation.account("other", "")  # exists, asks for nothing

    status, body = exchange(federation.emulator, client_id, service_account_token(kube_api, namespace, "app"))
    assert status == 400
    assert "AADSTS70021" in body["error_description"]

    federation.start(propagation=0.5)
    eventually(lambda: federation.status("app").get("reason") == "Ready", message="Ready")
    status, body = exchange(federation.emulator, client_id, service_account_token(kube_api, namespace, "app"))
    assert status == 200, body
    assert body["access_token"]
    granted = [e for e in federation.emulator.entra.exchanges if e.granted]
    assert [(e.issuer, e.subject) for e in granted] == [(ISSUER, f"system:serviceaccount:{namespace}:app")]

    status, body = exchange(
        federation.emulator, client_id, service_account_token(kube_api, namespace, "other")
    )
    assert status == 400, "an account without a credential gets nothing"
