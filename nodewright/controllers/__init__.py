"""controllers: the reconcilers and the composition root (console script ``nodewright``)."""

__all__: list[str] = []
