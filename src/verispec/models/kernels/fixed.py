"""The fixed kernel choices tuned on one AMD EPYC (``kernel_choice="fixed"``), kept for A/B comparisons.

* :func:`fast_lm_head`: the output head as ``(W @ x.T).T`` (MKL's better path for a few rows);
* :func:`fast_small_linears`: every ``nn.Linear`` gets a oneDNN-packed copy of its weight
  (:mod:`.packed`), used for the few-row inputs of a verify pass.
"""

from __future__ import annotations

import types

import torch
from torch import nn

from .packed import pack_weight, packed_linear

__all__ = ["fast_linear_forward", "fast_lm_head", "fast_small_linears"]


def fast_linear_forward(self: nn.Linear, x: torch.Tensor) -> torch.Tensor:
    """``F.linear`` computed as ``(W @ x.T).T``, which MKL runs faster for a few rows on a CPU."""
    flat = x.reshape(-1, x.shape[-1])
    out = torch.mm(self.weight, flat.t()).t().contiguous()
    if self.bias is not None:
        out = out + self.bias
    return out.reshape(*x.shape[:-1], self.weight.shape[0])


def fast_lm_head(model: nn.Module) -> bool:
    """Swap the model's output head forward to ``(W @ x.T).T`` (in place; idempotent). Returns
    whether it swapped it now.

    Same weights and same results up to float rounding (max abs difference ~1e-6 in fp32);
    outputs stay contiguous. Heads that are not an ``nn.Linear``, or not on the CPU, are left
    alone.
    """
    get_head = getattr(model, "get_output_embeddings", None)
    head = get_head() if callable(get_head) else None
    if (isinstance(head, nn.Linear) and type(head).forward is nn.Linear.forward and "forward" not in vars(head)
            and head.weight.device.type == "cpu"):
        head.forward = types.MethodType(fast_linear_forward, head)  # type: ignore[method-assign]
        return True
    return False


def _small_linear_forward(self: nn.Linear, x: torch.Tensor) -> torch.Tensor:
    """The layer's own forward, except ``min_rows..max_rows`` float32 rows go through the
    oneDNN-packed weight."""
    rows = x.numel() // x.shape[-1]
    if not self.min_rows <= rows <= self.max_rows or x.dtype != torch.float32 or self.weight.dtype != torch.float32:
        return self.unpacked_forward(x)
    out = packed_linear(x.reshape(rows, x.shape[-1]), self.packed_weight, self.bias)
    return out.reshape(*x.shape[:-1], out.shape[-1])


def fast_small_linears(model: nn.Module, max_rows: int = 16, pack_rows: int = 8, head_max_rows: int = 32) -> int:
    """Give each ``nn.Linear`` a oneDNN-packed copy of its weight, used for inputs of
    2..``max_rows`` rows, and for the output head 1..``head_max_rows`` rows (in place; returns
    how many layers were changed).

    Why: on a CPU a decode step is bound by reading the weights, so a K+1-token verify pass
    should cost about one token's step. ``F.linear`` (MKL GEMM, nothing reused between calls)
    makes a few-row pass cost clearly more than a one-row step; with the weight packed once for
    oneDNN it comes close (BENCHMARKS.md). One row keeps ``F.linear`` in the decoder layers (as
    fast there). The output head (49152 x 576 for SmolLM2) is packed for one row too, where the
    packed matmul beats the unpacked one (``python -m verispec.bench.pass_costs``).
    Only float32 CPU weights, and only where this torch build has the oneDNN ops; results
    equal ``F.linear`` to float32 rounding (max abs difference ~1e-4 on layer outputs).
    Costs one more copy of the weights in memory.
    """
    if not torch.backends.mkldnn.is_available():
        return 0
    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    changed = 0
    for mod in model.modules():
        own_forward = mod.__dict__.get("forward")  # fast_lm_head's swap on the head is fine
        if (not isinstance(mod, nn.Linear) or type(mod).forward is not nn.Linear.forward
                or (own_forward is not None and getattr(own_forward, "__func__", None) is not fast_linear_forward)
                or mod.weight.dtype != torch.float32 or mod.weight.device.type != "cpu"):
            continue
        packed = pack_weight(mod.weight, pack_rows)
        if packed is None:  # a torch build without these oneDNN ops
            return changed
        mod.packed_weight = packed
        mod.min_rows, mod.max_rows = (1, head_max_rows) if mod is head else (2, max_rows)
        mod.unpacked_forward = mod.forward
        mod.forward = types.MethodType(_small_linear_forward, mod)  # type: ignore[method-assign]
        changed += 1
    return changed
