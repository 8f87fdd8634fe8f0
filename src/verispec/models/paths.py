"""Where verispec keeps what it prepares or measures on a machine (below every other module of
``verispec.models``, so that the loaders and the CPU kernels can both use it)."""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["cache_dir"]


def cache_dir() -> Path:
    """Where verispec caches prepared models: ``$VERISPEC_CACHE`` or ``~/.cache/verispec``."""
    env = os.environ.get("VERISPEC_CACHE")
    return Path(env).expanduser() if env else Path.home() / ".cache" / "verispec"
