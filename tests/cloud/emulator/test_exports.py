"""The emulator package's public surface is what its docstring promises, and nothing more."""

from __future__ import annotations

import nodewright.cloud.emulator as emulator_package


def test_public_names() -> None:
    """``__all__`` lists exactly the documented names, and each one exists."""
    assert sorted(emulator_package.__all__) == [
        "ArmEmulator",
        "ArmError",
        "DEFAULT_LOCATION",
        "DEFAULT_SUBSCRIPTION",
        "EmulatorState",
        "ErrorCode",
        "EstateBuilder",
        "Fault",
        "FaultInjector",
        "FaultKind",
        "RecordedRequest",
        "RequestLog",
        "load_seed_file",
    ]
    for name in emulator_package.__all__:
        assert getattr(emulator_package, name) is not None
