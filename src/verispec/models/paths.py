"""Where verispec keeps what it prepares or measures on a machine (below every other module of
``verispec.models``, so that the loaders and the CPU kernels can both use it)."""

from __future__ import annotations

import contextlib
import json
import os
import platform
import tempfile
from pathlib import Path

import torch

__all__ = ["cache_dir", "cpu_matrix_units", "cpu_name", "cpuinfo_field", "machine_key", "read_json", "write_json"]

# CPU flags that decide which matrix kernels are fast (bfloat16 / int8 / float16 units); machines
# sold under one model name (a hypervisor's "Intel(R) Xeon(R) Processor") may differ in them.
MATRIX_FLAGS = ("avx2", "avx512f", "avx512_bf16", "avx512_fp16", "avx512_vnni", "avx_vnni", "amx_tile", "amx_bf16",
                "amx_int8", "amx_fp16")


def cache_dir() -> Path:
    """Where verispec caches prepared models: ``$VERISPEC_CACHE`` or ``~/.cache/verispec``."""
    env = os.environ.get("VERISPEC_CACHE")
    return Path(env).expanduser() if env else Path.home() / ".cache" / "verispec"


def cpuinfo_field(name: str) -> str | None:
    """The first ``name`` line of /proc/cpuinfo (e.g. "model name", "flags"), or None where there
    is no such file or line."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith(name):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return None


def cpu_name() -> str:
    """The CPU's model name (``lscpu``'s "Model name", read from /proc/cpuinfo where it exists)."""
    return cpuinfo_field("model name") or platform.processor() or platform.machine()


def cpu_matrix_units() -> str:
    """The CPU's matrix-kernel flags among :data:`MATRIX_FLAGS`, space-separated ("" where
    /proc/cpuinfo has no flags line)."""
    flags = set((cpuinfo_field("flags") or "").split())
    return " ".join(f for f in MATRIX_FLAGS if f in flags)


def machine_key() -> str:
    """What a measurement on this machine holds for: CPU model and matrix units (one model name
    can come with or without AMX), torch version, intra-op threads."""
    return f"{cpu_name()} [{cpu_matrix_units()}] | torch {torch.__version__} | {torch.get_num_threads()} threads"


def read_json(path: Path) -> object:
    """The JSON in ``path``, or None when there is no such file or it cannot be read (a cache
    that is missing or corrupt is measured again, never an error)."""
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def write_json(path: Path, data: object) -> None:
    """Write ``data`` to ``path`` atomically (a temporary file beside it, renamed over it); a
    read-only cache is left alone (what was measured still holds for this process)."""
    tmp = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile("w", dir=path.parent, prefix=f".{path.stem}-", suffix=".tmp",
                                         delete=False) as f:
            tmp = f.name
            json.dump(data, f, indent=1, sort_keys=True)
        os.replace(tmp, path)
    except OSError:
        if tmp is not None:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
