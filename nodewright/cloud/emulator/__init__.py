"""cloud.emulator: a local HTTPS emulator of the Azure Resource Manager REST API."""

__all__: list[str] = []
