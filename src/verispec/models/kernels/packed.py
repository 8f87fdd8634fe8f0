"""oneDNN-packed float32 weights: packed once, read by the few-row linears of a verify pass.
"""

from __future__ import annotations

import torch

__all__ = ["pack_weight", "packed_linear"]


def pack_weight(weight: torch.Tensor, pack_rows: int = 8) -> torch.Tensor | None:
    """A oneDNN-packed copy of a float32 CPU ``[out, in]`` weight for :func:`packed_linear`, or
    None where unsupported (another dtype or device, or a torch build without these ops)."""
    if weight.dtype != torch.float32 or weight.device.type != "cpu" or not torch.backends.mkldnn.is_available():
        return None
    try:
        return torch.ops.mkldnn._reorder_linear_weight(weight.detach(), pack_rows)
    except (AttributeError, RuntimeError):
        return None


def packed_linear(x: torch.Tensor, packed: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """``x [N, in] @ W.T (+ bias)`` -> ``[N, out]`` with W packed by :func:`pack_weight` (float32)."""
    return torch.ops.mkldnn._linear_pointwise(x, packed, bias, "none", [], "")
