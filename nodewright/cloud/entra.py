"""A workload identity token exchange through azure-identity, as a pod's Azure SDK would make it:
a ServiceAccount token (the client assertion) for an access token of a user-assigned identity.

``TokenExchange.exchange`` answers whether Entra grants the token, and Entra's error (its AADSTS
code first) when it does not; the access token itself is dropped. It proves a federated identity
credential works before anything depends on it. Does I/O (one call to the authority's token
endpoint); never logs the assertion or the token.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from azure.core.exceptions import AzureError
from azure.core.pipeline.transport import RequestsTransport
from azure.identity import ClientAssertionCredential

__all__ = ["PUBLIC_AUTHORITY", "TokenExchange", "TokenExchangeError"]

PUBLIC_AUTHORITY = "login.microsoftonline.com"
"""Microsoft Entra's authority host in the public cloud."""
_AADSTS = re.compile(r"AADSTS\d+")


class TokenExchangeError(Exception):
    """Entra refused the assertion (``code`` is its AADSTS code when it gave one)."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


@dataclass(frozen=True)
class TokenExchange:
    """Where to exchange: the authority host (``host[:port]``), and the CA bundle to trust (None:
    the system's)."""

    authority: str = PUBLIC_AUTHORITY
    ca_bundle: str | None = None
    scope: str = "https://management.azure.com/.default"

    def exchange(self, tenant_id: str, client_id: str, assertion: str) -> None:
        """Exchange ``assertion`` for a token of ``client_id``; raises ``TokenExchangeError``."""
        transport = RequestsTransport(connection_verify=self.ca_bundle or True)
        credential = ClientAssertionCredential(
            tenant_id,
            client_id,
            lambda: assertion,
            authority=self.authority,
            disable_instance_discovery=self.authority != PUBLIC_AUTHORITY,
            transport=transport,
        )
        try:
            credential.get_token(self.scope)
        except AzureError as error:  # refused, or the authority unreachable: both retried later
            text = str(error.message or error)
            found = _AADSTS.search(text)
            raise TokenExchangeError(found.group(0) if found else "", _first_line(text)) from None
        finally:
            credential.close()


def _first_line(text: str) -> str:
    line = text.strip().splitlines()[0] if text.strip() else "token exchange refused"
    return line[:300]
