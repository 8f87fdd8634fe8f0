"""HF's SDPA attention without its per-group K/V copies on the CPU (:func:`gqa_attention`).
"""

from __future__ import annotations

import torch
from torch import nn

__all__ = ["GQA_ATTENTION", "gqa_attention"]


GQA_ATTENTION = "verispec_sdpa"


def _sdpa_gqa_forward(module: nn.Module, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                      attention_mask: torch.Tensor | None, dropout: float = 0.0, scaling: float | None = None,
                      is_causal: bool | None = None, **kwargs) -> tuple[torch.Tensor, None]:
    """HF's SDPA attention, except a masked multi-token pass on the CPU: there HF copies K and V
    once per query group (``repeat_kv``: [B, 3, 3, S, 64] per layer for SmolLM2) because its
    GPU kernels need that; torch's CPU kernel shares the KV heads itself (``enable_gqa``).
    query ``[B, Hq, T, D]``, key/value ``[B, Hkv, S, D]`` -> ``[B, T, Hq, D]``."""
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    if (attention_mask is None or getattr(module, "num_key_value_groups", 1) == 1 or query.device.type != "cpu"
            or query.shape[2] == 1 or dropout or kwargs.get("position_bias") is not None
            or kwargs.get("softcap") is not None or kwargs.get("output_attentions")):
        return sdpa_attention_forward(module, query, key, value, attention_mask, dropout=dropout, scaling=scaling,
                                      is_causal=is_causal, **kwargs)
    out = nn.functional.scaled_dot_product_attention(query, key, value, attn_mask=attention_mask, scale=scaling,
                                                     enable_gqa=True)
    return out.transpose(1, 2).contiguous(), None


def gqa_attention(model: nn.Module) -> bool:
    """Switch a CPU model that runs HF's ``"sdpa"`` attention to :func:`_sdpa_gqa_forward` (same
    masks, same kernel, bit-identical outputs). Multi-token masked passes (a verify pass) skip
    HF's K/V copies; one-token passes run HF's code unchanged. Returns whether it switched;
    other models, attention types and devices are left alone."""
    config = getattr(model, "config", None)
    if (config is None or getattr(config, "_attn_implementation", None) != "sdpa"
            or not hasattr(model, "set_attn_implementation") or next(model.parameters()).device.type != "cpu"):
        return False
    try:
        from transformers import AttentionInterface
        from transformers.masking_utils import AttentionMaskInterface, sdpa_mask
    except ImportError:  # an older transformers without the attention registries
        return False
    AttentionInterface.register(GQA_ATTENTION, _sdpa_gqa_forward)
    AttentionMaskInterface.register(GQA_ATTENTION, sdpa_mask)  # build masks exactly as for "sdpa"
    model.set_attn_implementation(GQA_ATTENTION)
    return model.config._attn_implementation == GQA_ATTENTION
