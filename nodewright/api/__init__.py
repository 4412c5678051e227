"""api: CRD models (a package per group and version). Imports nothing internal."""

__all__: list[str] = []
