"""Raw HTTPS calls to the emulator (no SDK), for what an SDK would not send: no token, no
api-version, a body that is not JSON, the admin endpoints. Trusts only the emulator's CA."""

from __future__ import annotations

import json
import ssl
import urllib.error
import urllib.request
from dataclasses import dataclass
from typing import Any

from nodewright.cloud.emulator import ArmEmulator


@dataclass(frozen=True)
class Answer:
    """Status, headers (names in lower case) and the parsed JSON body (None when empty)."""

    status: int
    headers: dict[str, str]
    body: Any


def call(emulator: ArmEmulator, method: str, path: str, body: Any = None, token: str | None = None) -> Answer:
    """``method`` on ``path``, sending ``body`` as JSON (bytes as they are) and
    ``Authorization: Bearer <token>`` when a token is given."""
    context = ssl.create_default_context(cafile=str(emulator.ca_file))
    data = body if isinstance(body, bytes) or body is None else json.dumps(body).encode()
    request = urllib.request.Request(emulator.endpoint + path, data=data, method=method)  # noqa: S310 - https to loopback
    request.add_header("Content-Type", "application/json")
    if token is not None:
        request.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(request, context=context) as response:  # noqa: S310 - https to loopback
            return _answer(response.status, response.headers.items(), response.read())
    except urllib.error.HTTPError as error:
        return _answer(error.code, error.headers.items(), error.read())


def _answer(status: int, headers: list[tuple[str, str]], payload: bytes) -> Answer:
    return Answer(status, {name.lower(): value for name, value in headers}, json.loads(payload or b"null"))
