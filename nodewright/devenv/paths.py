"""Where the local environment keeps its files: the cache directory (``NODEWRIGHT_CACHE``, else
``~/.cache/nodewright``) holding the built binaries and, under ``run``, the default work
directory of ``make run``. Standard library only, so that ``python -m nodewright.devenv up`` can
find and lock its work directory before it imports anything heavy."""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["DEFAULT_CACHE", "DEFAULT_WORK_DIR"]

DEFAULT_CACHE = Path(os.environ.get("NODEWRIGHT_CACHE", Path.home() / ".cache" / "nodewright"))
DEFAULT_WORK_DIR = DEFAULT_CACHE / "run"
