"""CPU kernels for loaded models: packed and float16 linears, the output head, GQA attention.

On a CPU a decode step is bound by reading the weights, and the generic paths that HF and
``F.linear`` take are tuned for other shapes or other devices. The kernels here replace them, in
place and with the same weights, for the shapes speculative decoding runs (a few rows per pass):

* :func:`fast_lm_head`: the output head as ``(W @ x.T).T`` (MKL's better path for a few rows);
* :func:`fast_small_linears`: every ``nn.Linear`` gets a oneDNN-packed copy of its weight
  (:func:`pack_weight`, :func:`packed_linear`), used for the few-row inputs of a verify pass;
* :func:`gqa_attention`: HF's SDPA attention without its per-group K/V copies;
* :func:`fp16_linear`: a float16 fbgemm copy of a weight (the EAGLE head's draft steps).

All of them are CPU-specific (oneDNN, fbgemm, MKL's behaviour, torch's CPU SDPA kernel).
:func:`apply_cpu_kernels` is what loading calls: it installs the chosen kernels only when the
model lies on the CPU and leaves the plain HF modules on any other device; each kernel also
checks the device of what it is given. Measured costs are in BENCHMARKS.md ("Pass costs",
``python -m verispec.bench.pass_costs``).
"""

from __future__ import annotations

import types
import warnings
from collections.abc import Callable

import torch
from torch import nn

__all__ = [
    "KERNELS",
    "apply_cpu_kernels",
    "model_device",
    "fast_lm_head",
    "fast_small_linears",
    "gqa_attention",
    "pack_weight",
    "packed_linear",
    "fp16_linear",
]

KERNELS = ("fast_lm_head", "fast_small_linears", "gqa_attention")  # what apply_cpu_kernels installs, in order


# ----------------------------------------------------------------------------------------------
# choosing kernels by device


def model_device(model: nn.Module) -> torch.device:
    """The device a model runs on: HF's ``model.device``, else its first parameter's (CPU if none)."""
    dev = getattr(model, "device", None)
    if isinstance(dev, torch.device):
        return dev
    p = next(model.parameters(), None)
    return p.device if p is not None else torch.device("cpu")


def apply_cpu_kernels(model: nn.Module, *, head: bool = True, linears: bool = True,
                      attention: bool = True) -> tuple[str, ...]:
    """Install the chosen CPU kernels on ``model`` (in place) if it lies on the CPU.

    ``head``: :func:`fast_lm_head`; ``linears``: :func:`fast_small_linears`; ``attention``:
    :func:`gqa_attention` (applied in that order, as :data:`KERNELS` lists them). A model on any
    other device (CUDA, MPS, meta, ...) keeps its plain HF modules. Returns the names of the
    kernels that changed the model.
    """
    if model_device(model).type != "cpu":
        return ()
    done: list[str] = []
    if head and fast_lm_head(model):
        done.append("fast_lm_head")
    if linears and fast_small_linears(model):
        done.append("fast_small_linears")
    if attention and gqa_attention(model):
        done.append("gqa_attention")
    return tuple(done)


# ----------------------------------------------------------------------------------------------
# attention without K/V copies

_GQA_ATTENTION = "verispec_sdpa"


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
    AttentionInterface.register(_GQA_ATTENTION, _sdpa_gqa_forward)
    AttentionMaskInterface.register(_GQA_ATTENTION, sdpa_mask)  # build masks exactly as for "sdpa"
    model.set_attn_implementation(_GQA_ATTENTION)
    return model.config._attn_implementation == _GQA_ATTENTION


# ----------------------------------------------------------------------------------------------
# fast output head


def _fast_linear_forward(self: nn.Linear, x: torch.Tensor) -> torch.Tensor:
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
        head.forward = types.MethodType(_fast_linear_forward, head)  # type: ignore[method-assign]
        return True
    return False


# ----------------------------------------------------------------------------------------------
# packed and float16 linears


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


def fp16_linear(weight: torch.Tensor, bias: torch.Tensor | None = None
                ) -> Callable[[torch.Tensor], torch.Tensor] | None:
    """``x [N, in] -> x @ W.T + b [N, out]`` (float32 in and out, float32 accumulation) with
    ``W`` stored as float16 in fbgemm's packed layout, or None where unsupported (not a float32
    CPU weight, or a torch build without fbgemm).

    Half the bytes of float32 for one rounding of the weights to float16 (~5e-4 relative).
    For drafting, where a step reads every weight for a row or two and is bound by memory
    traffic, so halving the bytes read makes the EAGLE head's step cheaper than with
    :func:`pack_weight` (measured in BENCHMARKS.md: float16 against float32 draft weights).
    torch flags these fbgemm ops deprecated (still in the pinned 2.13); the warning is silenced
    here, and a build without them gets None.
    """
    if (weight.dtype != torch.float32 or weight.device.type != "cpu"
            or bias is not None and bias.dtype != torch.float32):
        return None
    if "fbgemm" not in torch.backends.quantized.supported_engines or not hasattr(torch, "fbgemm_linear_fp16_weight"):
        return None
    b = torch.zeros(weight.shape[0]) if bias is None else bias.detach().contiguous()
    try:
        with warnings.catch_warnings():  # torch warns once per process that the ops are deprecated
            warnings.simplefilter("ignore", UserWarning)
            packed = torch.fbgemm_pack_gemm_matrix_fp16(weight.detach().contiguous())
            torch.fbgemm_linear_fp16_weight(torch.zeros(1, weight.shape[1]), packed, b)
    except (AttributeError, RuntimeError):
        return None

    def linear(x: torch.Tensor) -> torch.Tensor:
        return torch.fbgemm_linear_fp16_weight(x, packed, b)
    return linear


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
                or (own_forward is not None and getattr(own_forward, "__func__", None) is not _fast_linear_forward)
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
