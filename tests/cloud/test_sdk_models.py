"""The SDK models' first-use setup under threads (``nodewright.cloud.sdk_models``).

Each case runs in a fresh interpreter, where no model class has been set up yet: eight threads
build one object of every azure-mgmt-compute model class, in the same order, at the same time.
Without the guard some of those first constructions fail (``dictionary changed size during
iteration``; inside the SDK's deserializer that failure becomes a raw ``dict`` in place of the
model); once ``build_clients`` has run, none does."""

from __future__ import annotations

import subprocess
import sys

from nodewright.cloud.sdk_models import guard_model_setup, guarded_model_bases

RACE = """
import inspect, sys, threading
sys.setswitchinterval(1e-6)  # switch threads often, as a busy manager does
if sys.argv[1] == "built":
    from nodewright.cloud.config import CloudSettings, CredentialKind, CredentialSettings
    from nodewright.cloud.factory import build_clients
    build_clients(CloudSettings(
        subscription_id="00000000-0000-0000-0000-000000000001",
        arm_endpoint="https://127.0.0.1:9/",
        credential=CredentialSettings(kind=CredentialKind.STATIC_TOKEN, static_token="token"),
    ))
import azure.mgmt.compute.models as models
from azure.mgmt.compute._utils.model_base import Model
classes = [c for c in vars(models).values() if inspect.isclass(c) and issubclass(c, Model)]
failures = []
start = threading.Barrier(8)
def build():
    start.wait()
    for cls in classes:
        try:
            cls()
        except RuntimeError:
            failures.append(cls.__name__)
threads = [threading.Thread(target=build) for _ in range(8)]
for thread in threads:
    thread.start()
for thread in threads:
    thread.join()
print(len(classes), len(failures))
"""


def _race(mode: str) -> tuple[int, int]:
    """(model classes, first constructions that failed) in a fresh interpreter."""
    done = subprocess.run(
        [sys.executable, "-c", RACE, mode], capture_output=True, text=True, timeout=120, check=True
    )
    classes, failures = done.stdout.split()
    return int(classes), int(failures)


def test_first_constructions_race_without_the_guard_and_not_after_build_clients() -> None:
    """The race is real on the installed SDK (else the guard can go: this assertion says so);
    with the clients built the same race fails nothing."""
    tries: list[tuple[int, int]] = []
    while len(tries) < 3 and not any(failures for _, failures in tries):
        tries.append(_race("plain"))
    assert any(failures for _, failures in tries), f"no failed setup without the guard: {tries}"
    classes, failures = _race("built")
    assert classes > 400
    assert failures == 0


def test_the_guard_covers_compute_and_network_once() -> None:
    guarded = guard_model_setup()
    assert {base.__module__ for base in guarded} >= {
        "azure.mgmt.compute._utils.model_base",
        "azure.mgmt.network._utils.model_base",
    }
    new = [base.__dict__["__new__"] for base in guarded]
    assert guard_model_setup() == guarded == guarded_model_bases()
    assert [base.__dict__["__new__"] for base in guarded] == new  # not wrapped twice
