"""ipam: pure IP-pool arithmetic and allocation bookkeeping; no I/O."""

__all__: list[str] = []
