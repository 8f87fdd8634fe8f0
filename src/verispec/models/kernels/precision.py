"""The matmul dtype of bulk data runs: float32, bfloat16, or whichever is faster here.
"""

from __future__ import annotations

import torch
from torch import nn

from .timing import measured_choice

__all__ = ["MATMUL_DTYPES", "faster_matmul_dtype", "matmul_dtype"]


MATMUL_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}


def faster_matmul_dtype(rows: int = 64, width: int = 576, inner: int = 1536) -> torch.dtype:
    """``torch.float32`` or ``torch.bfloat16``: whichever multiplies an MLP's matrices
    (``[rows, width] @ [width, inner]`` and back; by default SmolLM2-135M's, 64 rows) faster on
    this machine, timed once and then read from :func:`kernels_file`. bfloat16 has been several
    times faster on a Xeon with AMX tiles and on an AMD EPYC with avx512_bf16, and slower on a Xeon
    with avx512_bf16 but no AMX (all under one model name "Intel(R) Xeon(R) Processor" or "AMD
    EPYC"), so precision for speed is a measurement, not an assumption."""
    def make_calls() -> dict:
        g = torch.Generator().manual_seed(0)
        calls = {}
        for name, dtype in MATMUL_DTYPES.items():
            x = torch.randn(rows, width, generator=g).to(dtype)
            w1 = torch.randn(inner, width, generator=g).to(dtype)
            w2 = torch.randn(width, inner, generator=g).to(dtype)
            calls[name] = lambda x=x, w1=w1, w2=w2: nn.functional.linear(nn.functional.linear(x, w1), w2)
        return calls
    pick, _ = measured_choice(f"matmul dtype {rows}x{width}x{inner}", tuple(MATMUL_DTYPES), make_calls)
    return MATMUL_DTYPES[pick]


def matmul_dtype(name: str) -> torch.dtype:
    """``"float32"`` / ``"bfloat16"`` as a torch dtype; ``"auto"``: :func:`faster_matmul_dtype`."""
    if name == "auto":
        return faster_matmul_dtype()
    if name not in MATMUL_DTYPES:
        raise ValueError(f"precision must be one of {(*MATMUL_DTYPES, 'auto')}, got {name!r}")
    return MATMUL_DTYPES[name]
