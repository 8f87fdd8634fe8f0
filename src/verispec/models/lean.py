"""Llama decoder layers without HF's per-call wrappers: the same operations, fewer Python steps.

A one-token pass of SmolLM2-135M runs 30 decoder layers of about a dozen small modules each,
and on a CPU each module call costs microseconds of Python around it (``Module.__call__``,
keyword deprecation wrappers, the attention-interface lookup, config attribute reads): about
1.5 ms of a 28 ms pass on a 2-core Xeon. :func:`lean_layers` replaces each plain
``LlamaDecoderLayer``'s ``forward`` (in place, per instance) with :func:`_lean_forward`, which runs
the very same tensor operations in the same order (the RMSNorm, linear and activation modules'
own ``forward``, HF's rotary formula, the model's registered attention function, the cache's
``update``), so its outputs are bit-identical (tested against HF's forward).

What it skips: hooks registered on the layer's submodules (the layer's own hooks still run, so
``output_hidden_states``, which HF records with a hook on each layer, keeps the lean path: a pass that
also returns the EAGLE head's features costs what a plain pass does).
It runs HF's forward instead when the layer is training, when a call brings keyword arguments
the lean path does not know (e.g. ``output_attentions``), or when the model's attention
implementation changed since it was installed.
"""

from __future__ import annotations

import types

import torch
from torch import nn

__all__ = ["lean_layers"]


def lean_layers(model: nn.Module) -> int:
    """Give every plain Llama decoder layer of ``model`` the lean forward; returns how many.

    Only exact ``LlamaDecoderLayer`` / ``LlamaAttention`` / ``LlamaMLP`` / ``LlamaRMSNorm``
    instances qualify (subclasses and other architectures may compute something else), and only
    when the model's attention implementation is registered with HF's attention interface."""
    try:
        from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS
        from transformers.models.llama import modeling_llama as llama
    except ImportError:  # a transformers without these names: keep HF's forward
        return 0
    done = 0
    for layer in model.modules():
        if not _plain_llama_layer(layer, llama) or getattr(layer, "_verispec_lean", None) is not None:
            continue
        impl = layer.self_attn.config._attn_implementation
        attention = ALL_ATTENTION_FUNCTIONS.get(impl) if impl != "eager" else llama.eager_attention_forward
        if attention is None:
            continue
        layer._verispec_lean = (layer.forward, impl, attention)  # HF's bound forward, for fallbacks
        layer.forward = types.MethodType(_lean_forward, layer)
        done += 1
    return done


def _plain_llama_layer(layer: nn.Module, llama: types.ModuleType) -> bool:
    if type(layer) is not llama.LlamaDecoderLayer:
        return False
    norms = (layer.input_layernorm, layer.post_attention_layernorm)
    return (type(layer.self_attn) is llama.LlamaAttention and type(layer.mlp) is llama.LlamaMLP
            and all(type(n) is llama.LlamaRMSNorm for n in norms))


# ``output_hidden_states`` reaches every layer when a caller asks the model for its hidden states;
# HF records them with a forward hook on the layer itself, which runs around this forward too.
# (``output_attentions`` is recorded on the attention module, which the lean path skips: HF runs.)
_KNOWN = frozenset({"attention_mask", "position_ids", "cache", "use_cache", "position_embeddings",
                    "output_hidden_states"})


def _lean_forward(self: nn.Module, hidden_states: torch.Tensor, **kwargs) -> torch.Tensor:
    """``LlamaDecoderLayer.forward`` as HF computes it: ``hidden_states [B, T, H] -> [B, T, H]``."""
    hf_forward, impl, attention = self._verispec_lean
    attn, mlp = self.self_attn, self.mlp
    if self.training or not _KNOWN.issuperset(kwargs) or attn.config._attn_implementation != impl:
        return hf_forward(hidden_states, **kwargs)
    B, T = hidden_states.shape[:2]
    D = attn.head_dim
    residual = hidden_states
    h = self.input_layernorm.forward(hidden_states)
    q = attn.q_proj.forward(h).view(B, T, -1, D).transpose(1, 2)  # [B, heads, T, D]
    k = attn.k_proj.forward(h).view(B, T, -1, D).transpose(1, 2)  # [B, kv heads, T, D]
    v = attn.v_proj.forward(h).view(B, T, -1, D).transpose(1, 2)
    cos, sin = kwargs["position_embeddings"]
    cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)
    q = (q * cos) + (_rotate_half(q) * sin)
    k = (k * cos) + (_rotate_half(k) * sin)
    cache = kwargs.get("cache")
    if cache is not None:
        k, v = cache.update(k, v, attn.layer_idx)
    out, _ = attention(attn, q, k, v, kwargs.get("attention_mask"), dropout=0.0, scaling=attn.scaling)
    hidden_states = residual + attn.o_proj.forward(out.reshape(B, T, -1).contiguous())
    residual = hidden_states
    h = self.post_attention_layernorm.forward(hidden_states)
    act = mlp.act_fn
    gate = act.forward(mlp.gate_proj.forward(h)) if isinstance(act, nn.Module) else act(mlp.gate_proj.forward(h))
    return residual + mlp.down_proj.forward(gate * mlp.up_proj.forward(h))


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    """HF's ``rotate_half``: ``[x1, x2] -> [-x2, x1]`` over the last dimension."""
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)
