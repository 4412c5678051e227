"""cloud: Azure access through the real SDKs, and a local ARM emulator. Knows nothing of Kubernetes."""

__all__: list[str] = []
